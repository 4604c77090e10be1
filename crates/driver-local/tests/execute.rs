//! Execute on real processes (contract section 5) through the facade.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Harness, bounded, marker, survivors, unique_sleep};
use envrt_driver_local::LocalConfig;
use envrt_runtime_core::{ExecuteRequest, LeaseStatus, OutputStream};

#[tokio::test]
async fn argv_exit_codes_and_cwd_reach_the_program() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    let odd = ["", "two words", "ünï©ødé", "$HOME", "'\"\\", "-n"];
    let mut args = vec!["-c", "printf '%s\\n' \"$@\"", "sh"];
    args.extend(odd);
    let out = h.run(&lease, "sh", &args).await;
    assert_eq!(out.exit_code, Some(0));
    let expected: String = odd.iter().map(|a| format!("{a}\n")).collect();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);

    for code in [0, 1, 2, 42, 127, 255] {
        let out = h.sh(&lease, &format!("exit {code}")).await;
        assert_eq!(out.exit_code, Some(code));
        assert_eq!(out.signal, None);
        assert!(!out.timed_out);
    }

    std::fs::create_dir(ws.join("sub")).unwrap();
    let mut request = ExecuteRequest::new("pwd", [""; 0]);
    request.cwd = Some("sub".into());
    assert_eq!(
        h.execute(&lease, request).await.stdout,
        format!("{}/sub\n", ws.display()).into_bytes()
    );
    let mut request = ExecuteRequest::new("pwd", [""; 0]);
    request.cwd = Some(format!("{}/sub", ws.display()));
    assert_eq!(
        h.execute(&lease, request).await.stdout,
        format!("{}/sub\n", ws.display()).into_bytes()
    );
    assert_eq!(
        h.run(&lease, "pwd", &[]).await.stdout,
        format!("{}\n", ws.display()).into_bytes()
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn cwd_outside_the_workspace_is_refused_and_nothing_runs() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    std::os::unix::fs::symlink("/tmp", ws.join("escape")).unwrap();
    for bad in ["..", "../other", "/tmp", "escape", "escape/x", "a/../../b"] {
        let tag = marker("cwd");
        let mut request = ExecuteRequest::new("sh", ["-c", "touch ran-$0", tag.as_str()]);
        request.cwd = Some(bad.into());
        let err = bounded(h.runtime.execute(&lease.id, request)).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Path \"{bad}\" is outside the lease workspace.")
        );
    }
    assert_eq!(common::tree(&ws), vec!["escape".to_string()]);
    let mut request = ExecuteRequest::new("true", [""; 0]);
    request.cwd = Some("missing".into());
    let err = bounded(h.runtime.execute(&lease.id, request)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid input: cwd \"missing\" is not a directory in the environment."
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_missing_program_exits_127_naming_it() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let name = marker("no-such-program");
    let out = h.run(&lease, &name, &["x"]).await;
    assert_eq!(out.exit_code, Some(127));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!("envrt: command not found: {name}\n")
    );
    let out = h.run(&lease, "./not-here", &[]).await;
    assert_eq!(out.exit_code, Some(127));
    assert_eq!(out.stderr, b"envrt: command not found: ./not-here\n");
    // Not executable: 126 like a shell.
    std::fs::write(h.workspace(&lease).join("plain.txt"), b"x").unwrap();
    let out = h.run(&lease, "./plain.txt", &[]).await;
    assert_eq!(out.exit_code, Some(126));
    assert_eq!(out.stderr, b"envrt: permission denied: ./plain.txt\n");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

/// The driver looks the program up on the command's own `PATH` (to hand the spawn an
/// absolute path); what the program sees and which file runs stay as `execvp` has them.
#[tokio::test]
async fn the_program_is_found_on_the_commands_own_path_and_keeps_its_name() {
    use std::os::unix::fs::PermissionsExt;
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);
    // argv[0] is the name given, not the path the driver found.
    let out = h.sh(&lease, "tr '\\0' '\\n' < /proc/$$/cmdline | head -n 1").await;
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, b"sh\n");

    // a/tool is a directory, b/tool a file without execute bits, c/tool the program.
    let tool = marker("tool");
    std::fs::create_dir_all(ws.join("a").join(&tool)).unwrap();
    std::fs::create_dir_all(ws.join("b")).unwrap();
    std::fs::write(ws.join("b").join(&tool), "#!/bin/sh\necho from-b\n").unwrap();
    std::fs::create_dir_all(ws.join("c")).unwrap();
    let program = ws.join("c").join(&tool);
    std::fs::write(&program, "#!/bin/sh\necho \"from-c $#\"\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let with_path = |path: String| {
        let mut request = ExecuteRequest::new(tool.as_str(), ["x", "y"]);
        request.env.insert("PATH".into(), path.into());
        request
    };
    let path = format!("{0}/a:{0}/b:{0}/c:/usr/bin:/bin", ws.display());
    let out = h.execute(&lease, with_path(path)).await;
    assert_eq!((out.exit_code, out.stdout), (Some(0), b"from-c 2\n".to_vec()));
    // A relative entry counts from the command's cwd.
    let out = h.execute(&lease, with_path("a:c".into())).await;
    assert_eq!((out.exit_code, out.stdout), (Some(0), b"from-c 2\n".to_vec()));
    // Only a non-executable file on the path: 126, as a shell says it.
    let out = h.execute(&lease, with_path(format!("{0}/a:{0}/b", ws.display()))).await;
    assert_eq!(out.exit_code, Some(126));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!("envrt: permission denied: {tool}\n")
    );
    // Not on the command's path (the host's does not count): 127.
    let out = h
        .execute(&lease, with_path(format!("{}/a:/usr/bin:/bin", ws.display())))
        .await;
    assert_eq!(out.exit_code, Some(127));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!("envrt: command not found: {tool}\n")
    );
    // A name with a '/' is not looked up; it runs relative to the cwd.
    let out = h.run(&lease, &format!("./c/{tool}"), &["z"]).await;
    assert_eq!((out.exit_code, out.stdout), (Some(0), b"from-c 1\n".to_vec()));
    // An executable without a `#!` line found on the path runs with /bin/sh, as execvp
    // does it (`/bin/sh FILE ARGS...`); named with a '/', it cannot be executed.
    std::fs::create_dir_all(ws.join("d")).unwrap();
    let bare = ws.join("d").join(&tool);
    std::fs::write(&bare, "echo \"plain $0 $#\"\n").unwrap();
    std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = h.execute(&lease, with_path(format!("{}/d", ws.display()))).await;
    assert_eq!(out.exit_code, Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("plain {} 2\n", bare.display())
    );
    let out = h.run(&lease, &format!("./d/{tool}"), &[]).await;
    assert_eq!(out.exit_code, Some(126));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!("envrt: cannot execute ./d/{tool}: Exec format error (os error 8)\n")
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_signal_is_reported_by_name() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    for (sig, name) in [
        ("KILL", "SIGKILL"),
        ("TERM", "SIGTERM"),
        ("SEGV", "SIGSEGV"),
        ("USR1", "SIGUSR1"),
    ] {
        let out = h.sh(&lease, &format!("kill -{sig} $$")).await;
        assert_eq!(out.exit_code, None);
        assert_eq!(out.signal.as_deref(), Some(name));
        assert!(!out.timed_out);
    }
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_timeout_kills_the_whole_tree_and_keeps_partial_output() {
    let h = Harness::with_config(LocalConfig {
        kill_grace: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    let tag = marker("timeout");
    // Grandchildren that ignore SIGTERM, a nested shell, and a sleeping parent.
    let script = format!(
        "echo started; echo err >&2; \
         (trap '' TERM; sleep {nap}) & \
         sh -c 'trap \"\" TERM; sleep {nap}; : {tag}' & \
         sleep {nap}"
    );
    let mut request = ExecuteRequest::new("sh", ["-c", script.as_str(), tag.as_str()]);
    request.timeout = Some(Duration::from_millis(500));
    let out = h.execute(&lease, request).await;
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert!(
        matches!(out.signal.as_deref(), Some("SIGTERM") | Some("SIGKILL")),
        "{:?}",
        out.signal
    );
    assert_eq!(out.stdout, b"started\n");
    assert_eq!(out.stderr, b"err\n");
    assert!(survivors(&nap).await.is_empty(), "sleepers survived");
    assert!(survivors(&tag).await.is_empty(), "shells survived");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace() {
    let h = Harness::with_config(LocalConfig {
        kill_grace: Duration::from_millis(200),
        ..Default::default()
    })
    .await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    let script = format!("trap '' TERM; sleep {nap}; sleep {nap}");
    let mut request = ExecuteRequest::new("sh", ["-c", script.as_str()]);
    request.timeout = Some(Duration::from_millis(200));
    let out = h.execute(&lease, request).await;
    assert!(out.timed_out);
    assert_eq!(out.signal.as_deref(), Some("SIGKILL"));
    assert!(survivors(&nap).await.is_empty());
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_grandchild_holding_stdout_does_not_hold_the_call() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    // The background sleeper inherits stdout and stderr; the shell exits at once.
    let out = h.sh(&lease, &format!("sleep {nap} & echo done")).await;
    assert_eq!(out.exit_code, Some(0));
    assert!(!out.timed_out);
    assert_eq!(out.stdout, b"done\n");
    assert!(
        survivors(&nap).await.is_empty(),
        "the grandchild must be killed with the group"
    );
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn a_grandchild_that_left_the_group_cannot_hold_the_call_either() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    // setsid takes the sleeper out of the command's process group, and it still holds
    // stdout; the call must return, and (contained in the command's cgroup, or found by
    // the process scan) the sleeper must not outlive it.
    let out = h.sh(&lease, &format!("setsid sleep {nap} & echo done")).await;
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, b"done\n");
    if h.driver.containment().starts_with("cgroup") {
        assert!(survivors(&nap).await.is_empty(), "the setsid sleeper outlived the call");
    }
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    assert!(
        survivors(&nap).await.is_empty(),
        "the setsid sleeper outlived the release"
    );
    h.finish();
}

#[tokio::test]
async fn output_is_capped_per_stream_with_flags_and_the_sink_sees_everything() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let seen: Arc<Mutex<(usize, usize)>> = Arc::default();
    let sink_seen = seen.clone();
    let mut request = ExecuteRequest::new("sh", ["-c", "head -c 3000000 /dev/zero; head -c 10 /dev/zero >&2"]);
    request.max_output_bytes = Some(1000);
    request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
        let mut s = sink_seen.lock().unwrap();
        match stream {
            OutputStream::Stdout => s.0 += chunk.len(),
            OutputStream::Stderr => s.1 += chunk.len(),
        }
    }));
    let out = h.execute(&lease, request).await;
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.stdout_truncated);
    assert_eq!(out.stderr.len(), 10);
    assert!(!out.stderr_truncated);
    assert_eq!(*seen.lock().unwrap(), (3_000_000, 10));

    let mut exact = ExecuteRequest::new("printf", ["abc"]);
    exact.max_output_bytes = Some(3);
    let out = h.execute(&lease, exact).await;
    assert_eq!((out.stdout.as_slice(), out.stdout_truncated), (&b"abc"[..], false));
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn stdin_and_stdout_both_beyond_a_pipe_buffer_do_not_deadlock() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let data: Vec<u8> = (0..4 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut request = ExecuteRequest::new("cat", [""; 0]);
    request.stdin = Some(data.clone());
    let out = h.execute(&lease, request).await;
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "stdin came back changed");
    // Empty stdin is EOF at once.
    let mut request = ExecuteRequest::new("wc", ["-c"]);
    request.stdin = Some(Vec::new());
    assert_eq!(h.execute(&lease, request).await.stdout, b"0\n");
    // A command that ignores its stdin still finishes.
    let mut request = ExecuteRequest::new("true", [""; 0]);
    request.stdin = Some(data);
    assert_eq!(h.execute(&lease, request).await.exit_code, Some(0));
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn many_concurrent_executes_on_one_lease() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let runs = (0..32).map(|i| {
        let mut request = ExecuteRequest::new("sh", ["-c", "echo $0; exit $(( $0 % 7 ))", &i.to_string()]);
        request.stdin = Some(vec![b'x'; 100_000]);
        h.runtime.execute(&lease.id, request)
    });
    let results = bounded(futures::future::join_all(runs)).await;
    for (i, result) in results.into_iter().enumerate() {
        let out = result.unwrap();
        assert_eq!(out.stdout, format!("{i}\n").into_bytes());
        assert_eq!(out.exit_code, Some(i as i32 % 7));
    }
    assert_eq!(h.driver.running_commands(&lease.id), 0);
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn dropping_the_execute_future_kills_the_group() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    let script = format!("sleep {nap} & sleep {nap}");
    let request = ExecuteRequest::new("sh", ["-c", script.as_str()]);
    let run = h.runtime.execute(&lease.id, request);
    // Give it a bounded chance to start, then drop it.
    let dropped = tokio::time::timeout(Duration::from_millis(300), run).await;
    assert!(dropped.is_err(), "the command cannot have finished");
    assert!(survivors(&nap).await.is_empty());
    assert_eq!(h.driver.running_commands(&lease.id), 0);
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

/// The command is supervised on a task of its own; a sink that panics there still panics
/// the call, and the command's group is killed and leaves the process table.
#[tokio::test]
async fn a_panicking_sink_panics_the_call_and_kills_the_group() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let nap = unique_sleep();
    let script = format!("echo first; sleep {nap}");
    let mut request = ExecuteRequest::new("sh", ["-c", script.as_str()]);
    request.sink = Some(Arc::new(|_: OutputStream, _: &[u8]| panic!("sink-panic-marker")));
    let call = std::panic::AssertUnwindSafe(h.runtime.execute(&lease.id, request));
    let panic = bounded(futures::FutureExt::catch_unwind(call)).await.unwrap_err();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"sink-panic-marker"));
    assert!(survivors(&nap).await.is_empty());
    assert_eq!(h.driver.running_commands(&lease.id), 0);
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}

#[tokio::test]
async fn the_sink_receives_output_while_the_command_runs() {
    let h = Harness::new().await;
    let lease = h.lease().await;
    let flag = h.workspace(&lease).join("sink-saw-first");
    let sink_flag = flag.clone();
    let streamed: Arc<Mutex<Vec<u8>>> = Arc::default();
    let sink_streamed = streamed.clone();
    // The command can only succeed if the sink saw "first" while it was still running.
    let script = "echo first; i=0; while [ ! -e sink-saw-first ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; \
                  [ -e sink-saw-first ] && echo second";
    let mut request = ExecuteRequest::new("sh", ["-c", script]);
    request.sink = Some(Arc::new(move |_: OutputStream, chunk: &[u8]| {
        let mut seen = sink_streamed.lock().unwrap();
        seen.extend_from_slice(chunk);
        if seen.starts_with(b"first\n") {
            let _ = std::fs::write(&sink_flag, b"");
        }
    }));
    let out = h.execute(&lease, request).await;
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, b"first\nsecond\n");
    assert_eq!(*streamed.lock().unwrap(), b"first\nsecond\n");
    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}
