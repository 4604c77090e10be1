//! `wrk` as the load generator of a request-rate row (row 15's lease listing): the rate it
//! reaches, its bearer token written to a `0600` script file rather than its argv.

use std::process::Stdio;

/// Requests per second `wrk` reaches on `url` (sending `token` as the bearer) from
/// `connections` connections for `seconds`; `None` without `wrk` on the PATH.
/// A non-2xx answer is an error: a refused request is no request served.
pub(crate) async fn rate(url: &str, token: &str, connections: usize, seconds: f64) -> Option<Result<f64, String>> {
    let present = tokio::process::Command::new("wrk")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok();
    if !present {
        return None;
    }
    Some(
        async {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let script = dir.path().join("auth.lua");
            {
                use std::io::Write as _;
                use std::os::unix::fs::OpenOptionsExt as _;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&script)
                    .map_err(|e| e.to_string())?;
                writeln!(file, "wrk.headers[\"Authorization\"] = \"Bearer {token}\"").map_err(|e| e.to_string())?;
            }
            let out = tokio::process::Command::new("wrk")
                .args([
                    "-t2",
                    &format!("-c{connections}"),
                    &format!("-d{}s", seconds.ceil() as u64),
                ])
                .arg("-s")
                .arg(&script)
                .arg(url)
                .stdin(Stdio::null())
                .output()
                .await
                .map_err(|e| format!("wrk: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if !out.status.success() || text.contains("Non-2xx") {
                return Err(format!(
                    "wrk: {}{}",
                    text.trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            text.lines()
                .find_map(|line| line.trim().strip_prefix("Requests/sec:"))
                .and_then(|rate| rate.trim().parse::<f64>().ok())
                .ok_or_else(|| format!("wrk printed no rate: {}", text.trim()))
        }
        .await,
    )
}
