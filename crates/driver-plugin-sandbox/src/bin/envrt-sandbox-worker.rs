//! `envrt-sandbox-worker`: the reference plugin worker of the `sandbox` driver. It speaks
//! newline-delimited JSON-RPC 2.0 on stdin/stdout and runs every command inside `bwrap`.
//! See [`envrt_driver_plugin_sandbox::worker`] for the flags and the behaviour.

fn main() -> std::process::ExitCode {
    envrt_driver_plugin_sandbox::worker::main()
}
