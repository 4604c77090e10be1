//! `envrt-sandbox-worker`: the reference plugin worker of the `sandbox` driver. It speaks
//! newline-delimited JSON-RPC 2.0 on stdin/stdout and runs every command inside `bwrap`.
//! See the [`envrt_sandbox_worker`] library for the flags and the behaviour.

fn main() -> std::process::ExitCode {
    envrt_sandbox_worker::main()
}
