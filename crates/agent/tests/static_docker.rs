//! The static binary as a container's PID 1: built with `+crt-static` on the gnu target,
//! bind-mounted read-only into the busybox test image with no network, reached through its
//! socket in a bind-mounted host directory. Without Docker or the image the test is skipped
//! loudly, unless `ENVRT_REQUIRE_DOCKER=1` (as in CI), which makes it fail instead.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{bounded, collect, sh};
use envrt_agent::client::Client;
use envrt_agent::proto::{Offsets, Status, Stream, TtySize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use envrt_test_support::Component;
use envrt_test_support::docker::image;

/// Docker and the image, or why not.
fn docker_ready() -> Result<(), String> {
    let inspect = std::process::Command::new("docker")
        .args(["image", "inspect", &image()])
        .output()
        .map_err(|error| format!("cannot run docker: {error}"))?;
    if !inspect.status.success() {
        return Err(format!(
            "no image {}: {}",
            image(),
            String::from_utf8_lossy(&inspect.stderr).trim()
        ));
    }
    Ok(())
}

struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .output();
    }
}

#[tokio::test]
async fn the_static_agent_runs_as_pid_1_in_the_busybox_image() {
    if let Err(why) = docker_ready() {
        Component::Docker.skip_or_fail(
            format_args!("ENVRT_REQUIRE_DOCKER=1 but the static agent test cannot run: {why}"),
            format_args!(
                "\n*** SKIPPED: the static agent in Docker: {why} (set ENVRT_REQUIRE_DOCKER=1 to fail instead) ***\n"
            ),
        );
        return;
    }
    let agent = envrt_test_support::docker::static_agent();
    let bin = agent.parent().expect("the binary's directory").to_owned();
    bounded(120, async {
        let lease = tempfile::tempdir().unwrap();
        let name = format!("envrt-agent-test-{}", std::process::id());
        let container = Container(name.clone());
        let mut run = Command::new("docker")
            .args(["run", "--rm", "--network", "none", "--name", &name, "-v"])
            .arg(format!("{}:/agent:ro", bin.display()))
            .arg("-v")
            .arg(format!("{}:/run/envrt", lease.path().display()))
            .args([&image(), "/agent/envrt-agent", "--socket", "/run/envrt/agent.sock"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker run");
        let mut line = String::new();
        BufReader::new(run.stdout.take().unwrap())
            .read_line(&mut line)
            .await
            .unwrap();
        assert_eq!(line.trim_end(), "envrt-agent listening on /run/envrt/agent.sock");
        let client = Client::connect(&lease.path().join("agent.sock")).await.unwrap();
        let state = client.agent().await.unwrap();
        assert_eq!((state.pid, state.reaps_orphans), (1, true));
        let info = client
            .spawn(sh("echo hello from $$; sleep 100 >/dev/null 2>&1 & echo $!"))
            .await
            .unwrap();
        let (bytes, exit) = collect(&client, info.id, Offsets::default()).await;
        assert_eq!(exit.unwrap().status, Status::Exited { code: 0 });
        let text = String::from_utf8_lossy(&bytes[&Stream::Stdout]).into_owned();
        assert!(text.starts_with(&format!("hello from {}\n", info.pid)), "{text:?}");
        let orphan: i32 = text.lines().nth(1).unwrap().parse().unwrap();
        let kill = client.spawn(sh(&format!("kill -9 {orphan}"))).await.unwrap();
        assert_eq!(client.wait(kill.id, None).await.unwrap(), Status::Exited { code: 0 });
        // PID 1 reaps it; the reaping reports no event, so ask until it shows.
        while !client.agent().await.unwrap().recent_orphans.contains(&orphan) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut request = sh("tty; stty size");
        request.tty = Some(TtySize { rows: 12, cols: 34 });
        let tty = client.spawn(request).await.unwrap();
        let (bytes, exit) = collect(&client, tty.id, Offsets::default()).await;
        let text = String::from_utf8_lossy(&bytes[&Stream::Tty]).into_owned();
        assert!(
            text.starts_with("/dev/pts/") && text.ends_with("\r\n12 34\r\n"),
            "{text:?}"
        );
        assert_eq!(exit.unwrap().status, Status::Exited { code: 0 });
        let stop = std::process::Command::new("docker")
            .args(["stop", "-t", "10", &name])
            .output()
            .unwrap();
        assert!(
            stop.status.success(),
            "docker stop: {}",
            String::from_utf8_lossy(&stop.stderr)
        );
        let status = run.wait().await.unwrap();
        assert!(status.success(), "the agent as PID 1 ended with {status}");
        drop(container);
    })
    .await;
}
