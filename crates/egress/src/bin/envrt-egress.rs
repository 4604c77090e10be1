//! The `envrt-egress` binary: one lease's egress proxy and DNS stub on unix sockets, the
//! policy reloaded on SIGHUP (see `envrt_egress::standalone`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match envrt_egress::standalone::Options::parse(&args) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("envrt-egress: {error}\n{}", envrt_egress::standalone::USAGE);
            return ExitCode::from(2);
        }
    };
    // Two threads: a forwarded body's upstream reads and the lease-side writes overlap
    // (bench row 13: the proxy's cost is the kernel's copies and wake-ups, not its own code).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("envrt-egress: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(envrt_egress::standalone::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("envrt-egress: {error}");
            ExitCode::FAILURE
        }
    }
}
