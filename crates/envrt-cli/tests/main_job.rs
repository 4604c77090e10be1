//! The README's main-job script, run as written against the built binary.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_main_job_script_runs_end_to_end_on_the_local_driver() {
    let state = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/main-job.sh");
    let mut child = Command::new("sh")
        .arg(script)
        .env("ENVRT", env!("CARGO_BIN_EXE_envrt"))
        .env("ENVRT_STATE_DIR", state.path())
        .env_remove("ENVRT_CONFIG")
        .current_dir(state.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the main job did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let lease = stdout
        .lines()
        .next()
        .unwrap()
        .strip_prefix("lease: ")
        .unwrap()
        .to_owned();
    let expected_tail = "3\nsorted:\napple\nfig\npear\n";
    assert!(stdout.contains(expected_tail), "{stdout}");
    assert!(stdout.contains("nativeSyncIn                yes"), "{stdout}");
    assert!(stdout.ends_with(&format!("{lease} released\n")), "{stdout}");
    // Nothing is left: the lease is released and its workspace gone.
    let workspaces = state.path().join("workspaces");
    assert_eq!(std::fs::read_dir(workspaces).unwrap().count(), 0);
}
