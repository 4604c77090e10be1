//! The `envrt-agent` binary: `envrt-agent --socket PATH [--subreaper] [--max-processes N]
//! [--max-buffer-bytes N] [--first-id N] [--exit-when-socket-gone] [--forward tcp|dns:ADDR:PORT=PATH]...`. See the crate's documentation for the wire and the bounds.

use std::process::ExitCode;

fn usage() -> String {
    "usage: envrt-agent --socket PATH [--subreaper] [--max-processes N] [--max-buffer-bytes N] [--first-id N] [--exit-when-socket-gone] [--forward tcp|dns:ADDR:PORT=PATH]..."
        .to_owned()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(envrt_agent::TTY_EXEC) {
        let error = envrt_agent::tty_exec(&args[1..]);
        eprintln!(
            "envrt-agent: cannot start {:?}: {error}",
            args.get(1).map(String::as_str).unwrap_or("")
        );
        return ExitCode::from(127);
    }
    let options = match envrt_agent::Options::parse(&args) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("envrt-agent: {error}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("envrt-agent: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(envrt_agent::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("envrt-agent: {error}");
            ExitCode::FAILURE
        }
    }
}
