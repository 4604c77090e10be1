//! `envrt attach` through a service: the process's output from the output route (NDJSON,
//! live), this terminal's stdin written with the stdin route, as the attach of a runtime
//! of its own does it: the detach key (`Ctrl-]`) ends the attachment and leaves the
//! process running (exit 0), the end of stdin closes the process's stdin, and the end of
//! the process ends attach with its code (128+n for signal n).

use hyper::Method;
use hyper::body::Bytes;
use tokio::io::AsyncReadExt;

use envrt::core::process::{ProcessInfo, ProcessStream};

use crate::attach::{AttachArgs, DETACH};
use crate::error::CliError;
use crate::server::{Server, process_path};

pub(crate) async fn run(server: &Server, args: AttachArgs) -> Result<u8, CliError> {
    let path = process_path(&args.process)?;
    let info: ProcessInfo = server.json(Method::GET, &path, None).await?;
    // Without --from: only what comes from now on, as attach on a runtime of its own.
    let from: Vec<String> = info
        .streams
        .iter()
        .map(|held| format!("{}={}", held.stream, args.from.unwrap_or(held.written)))
        .collect();
    let mut lines = server
        .lines(Method::GET, &format!("{path}/output?{}", from.join("&")), None)
        .await?;
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 64 * 1024];
    let mut stdin_open = true;
    loop {
        tokio::select! {
            line = lines.next() => match line? {
                Some(line) => {
                    if let Some(exit) = line.get("exit") {
                        let info: ProcessInfo = serde_json::from_value(exit.clone()).map_err(|e| {
                            CliError::Failure(format!("envrt: the service sent an exit that is not a process: {e}"))
                        })?;
                        return Ok(info.status.exit_code().map_or(1, |code| (code & 0xff) as u8));
                    }
                    let stream: ProcessStream = serde_json::from_value(line["stream"].clone())
                        .map_err(|e| CliError::Failure(format!("envrt: the service sent an unknown stream: {e}")))?;
                    crate::attach::emit(stream, &crate::via_server::chunk_bytes(&line)?);
                }
                None => return Ok(1),
            },
            read = stdin.read(&mut buf), if stdin_open => {
                let n = read.map_err(|e| CliError::Failure(format!("envrt: cannot read stdin: {e}")))?;
                if n == 0 {
                    stdin_open = false;
                    server.raw(Method::POST, &format!("{path}/stdin/close"), None, Bytes::new()).await?;
                    continue;
                }
                let data = &buf[..n];
                let (before, detach) = match data.iter().position(|b| *b == DETACH) {
                    Some(at) => (&data[..at], true),
                    None => (data, false),
                };
                if !before.is_empty() {
                    server
                        .raw(
                            Method::POST,
                            &format!("{path}/stdin"),
                            Some("application/octet-stream"),
                            Bytes::copy_from_slice(before),
                        )
                        .await?;
                }
                if detach {
                    crate::say!("envrt: detached from {}; it keeps running", args.process);
                    return Ok(0);
                }
            }
        }
    }
}
