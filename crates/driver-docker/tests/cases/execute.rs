//! The cases of `execute` (contract section 5), a module of `execute.rs` (the engine's exec
//! path) and of `execute_agent.rs` (through the lease's supervisor); `execute_harness!` is
//! the including file's harness.

use super::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_runtime_core::{DriverError, ExecuteRequest, OutputStream, RuntimeError, Secret};

type Chunks = Vec<(OutputStream, Vec<u8>)>;

pub(crate) fn unique() -> u32 {
    // A sleep length no other test uses, to find the test's own processes.
    100_000 + (uuid::Uuid::new_v4().as_u128() % 800_000) as u32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argv_streams_and_exit_codes() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let r = h.sh(&lease, "printf out; printf err >&2; exit 3").await;
        assert_eq!(
            (r.stdout.as_slice(), r.stderr.as_slice(), r.exit_code),
            (&b"out"[..], &b"err"[..], Some(3))
        );
        assert!(!r.timed_out && r.signal.is_none());
        let args = ["a b", "'c'", "$HOME", "", "ü\"\\"];
        let r = h
            .runtime
            .execute(
                &lease.id,
                ExecuteRequest::new("printf", ["[%s]\n"].into_iter().chain(args)),
            )
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "[a b]\n['c']\n[$HOME]\n[]\n[ü\"\\]\n"
        );
        assert_eq!(r.exit_code, Some(0));
        for code in [0, 1, 7, 126, 255] {
            let r = h.sh(&lease, &format!("exit {code}")).await;
            assert_eq!(r.exit_code, Some(code));
        }
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_bytes_arrive_with_eof() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        let mut request = ExecuteRequest::new("cat", [""; 0]);
        request.stdin = Some(bytes.clone());
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(r.exit_code, Some(0));
        assert!(r.stdout == bytes, "stdin bytes came back changed");
        // Empty stdin and no stdin: EOF at once, no hang.
        let mut request = ExecuteRequest::new("cat", [""; 0]);
        request.stdin = Some(Vec::new());
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!((r.exit_code, r.stdout.len()), (Some(0), 0));
        let r = h
            .runtime
            .execute(&lease.id, ExecuteRequest::new("cat", [""; 0]))
            .await
            .unwrap();
        assert_eq!((r.exit_code, r.stdout.len()), (Some(0), 0));
        // A command that never reads a big stdin still returns.
        let mut request = ExecuteRequest::new("true", [""; 0]);
        request.stdin = Some(vec![b'x'; 8 << 20]);
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(r.exit_code, Some(0));
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_program_gives_127_naming_it() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let r = h
            .runtime
            .execute(&lease.id, ExecuteRequest::new("envrt-no-such-program", ["x"]))
            .await
            .unwrap();
        assert_eq!(r.exit_code, Some(127));
        assert_eq!(
            String::from_utf8_lossy(&r.stderr),
            "envrt: command not found: envrt-no-such-program\n"
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_whole_tree_and_keeps_partial_output() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let n = unique();
        let script = format!(
            "sleep {n} & (sleep {n}1; echo never) & setsid sleep {n}2 & sh -c 'trap \"\" TERM; sleep {n}3' & \
             echo started; echo warn >&2; wait"
        );
        let mut request = ExecuteRequest::new("sh", ["-c", &script]);
        request.timeout = Some(Duration::from_millis(1500));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert!(r.timed_out);
        assert_eq!(r.exit_code, None);
        assert!(r.signal.is_some(), "{r:?}");
        assert_eq!(r.stdout, b"started\n");
        assert_eq!(r.stderr, b"warn\n");
        assert_eq!(r.metadata["survivors"], 0);
        assert_eq!(
            h.processes_matching(&lease, &format!("sleep {n}")).await,
            Vec::<String>::new()
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_when_the_command_exits_even_if_a_grandchild_holds_stdout() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let n = unique();
        let mut request = ExecuteRequest::new("sh", ["-c", &format!("sleep {n} & echo done")]);
        request.timeout = Some(Duration::from_secs(60));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert!(!r.timed_out);
        assert_eq!((r.exit_code, r.stdout.as_slice()), (Some(0), &b"done\n"[..]));
        assert_eq!(
            h.processes_matching(&lease, &format!("sleep {n}")).await,
            Vec::<String>::new()
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_writes_without_pause_still_times_out() {
    // Output that never stops must not starve the timeout.
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let mut request = ExecuteRequest::new("yes", ["envrt-flood"]);
        request.timeout = Some(Duration::from_millis(1500));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert!(r.timed_out, "{:?}", r.metadata);
        assert_eq!(r.exit_code, None);
        assert!(r.stdout.starts_with(b"envrt-flood\n"), "{} bytes", r.stdout.len());
        assert_eq!(
            h.processes_matching(&lease, "yes envrt-flood").await,
            Vec::<String>::new()
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_is_noticed_while_a_background_writer_floods_the_output() {
    // The command exits; what it left in the background writes without pause and holds
    // the output open. The exit must still be seen (and the writer killed), long before
    // the timeout.
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let mut request = ExecuteRequest::new("sh", ["-c", "yes envrt-flood-bg & exit 3"]);
        request.timeout = Some(Duration::from_secs(60));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert!(!r.timed_out, "{:?}", r.metadata);
        assert_eq!(r.exit_code, Some(3), "{:?}", r.metadata);
        assert_eq!(r.metadata["killedTree"], true, "{:?}", r.metadata);
        assert_eq!(
            h.processes_matching(&lease, "yes envrt-flood-bg").await,
            Vec::<String>::new()
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_capped_per_stream_and_streams_to_the_sink() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        let chunks: Arc<Mutex<Chunks>> = Arc::default();
        let seen = chunks.clone();
        let mut request = ExecuteRequest::new(
            "sh",
            ["-c", "yes | head -c 100000; echo e1 >&2; sleep 0.2; echo e2 >&2"],
        );
        request.max_output_bytes = Some(1000);
        request.sink = Some(Arc::new(move |s: OutputStream, c: &[u8]| {
            seen.lock().unwrap().push((s, c.to_vec()))
        }));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(r.stdout.len(), 1000);
        assert!(r.stdout_truncated);
        assert_eq!((r.stderr.as_slice(), r.stderr_truncated), (&b"e1\ne2\n"[..], false));
        let chunks = chunks.lock().unwrap();
        let total_out: usize = chunks
            .iter()
            .filter(|(s, _)| *s == OutputStream::Stdout)
            .map(|(_, c)| c.len())
            .sum();
        assert_eq!(total_out, 100_000, "the sink sees every byte");
        let err: Vec<u8> = chunks
            .iter()
            .filter(|(s, _)| *s == OutputStream::Stderr)
            .flat_map(|(_, c)| c.clone())
            .collect();
        assert_eq!(err, b"e1\ne2\n", "the wrapper's pid line never shows");
        assert!(chunks.len() > 2);
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_is_only_the_image_config_and_request() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h
            .lease(serde_json::json!({"env": {"FROM_CONFIG": "c"}}), Default::default())
            .await;
        let mut request = ExecuteRequest::new("env", [""; 0]);
        request.env.insert("FROM_REQUEST".into(), "r".into());
        request.env.insert("TOKEN".into(), Secret::new("s3cr3t-value").into());
        assert!(!format!("{request:?}").contains("s3cr3t-value"));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        let mut names: Vec<String> = String::from_utf8_lossy(&r.stdout)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_owned()))
            .collect();
        names.sort();
        // PATH from the image; HOME and HOSTNAME set by Docker; PWD and SHLVL by the exec
        // path's wrapper sh (a command started by the supervisor has no wrapper).
        let mut expected = vec![
            "FROM_CONFIG",
            "FROM_REQUEST",
            "HOME",
            "HOSTNAME",
            "PATH",
            "PWD",
            "SHLVL",
            "TOKEN",
        ];
        if r.metadata.get("supervisor").is_some() {
            expected.retain(|name| !["PWD", "SHLVL"].contains(name));
        }
        assert_eq!(names, expected);
        assert!(String::from_utf8_lossy(&r.stdout).contains("TOKEN=s3cr3t-value\n"));
        // A failing request never shows the secret.
        let mut request = ExecuteRequest::new("env", [""; 0]);
        request.env.insert("TOKEN".into(), Secret::new("s3cr3t-value").into());
        request.cwd = Some("/nope".into());
        let err = h.runtime.execute(&lease.id, request).await.unwrap_err();
        assert!(!format!("{err} {err:?}").contains("s3cr3t-value"));
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cwd_is_confined_to_the_workspace() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        h.sh(&lease, "mkdir -p /workspace/sub").await;
        for (cwd, expected) in [
            ("sub", "/workspace/sub\n"),
            ("/workspace/sub", "/workspace/sub\n"),
            (".", "/workspace\n"),
        ] {
            let mut request = ExecuteRequest::new("pwd", [""; 0]);
            request.cwd = Some(cwd.into());
            let r = h.runtime.execute(&lease.id, request).await.unwrap();
            assert_eq!(String::from_utf8_lossy(&r.stdout), expected);
        }
        // Absolute paths elsewhere in the container are accepted (tests/user_paths_and_modes.rs).
        for cwd in ["../etc", "sub/../../x"] {
            let mut request = ExecuteRequest::new("pwd", [""; 0]);
            request.cwd = Some(cwd.into());
            let err = h.runtime.execute(&lease.id, request).await.unwrap_err();
            assert!(matches!(
                err,
                RuntimeError::Driver(DriverError::PathOutsideWorkspace { .. })
            ));
            assert_eq!(
                err.to_string(),
                format!("Path \"{cwd}\" is outside the lease workspace.")
            );
        }
        let mut request = ExecuteRequest::new("pwd", [""; 0]);
        request.cwd = Some("missing".into());
        let err = h.runtime.execute(&lease.id, request).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid input: cwd \"missing\" is not a directory in the environment."
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_escapees_holding_the_output_are_killed_too() {
    let h = execute_harness!();
    common::bounded(120, async {
        // A non-root container user: the killer runs as that user.
        let lease = h
            .lease(serde_json::json!({"user": "65534:65534"}), Default::default())
            .await;
        let n = unique();
        // The subshell starts a new session and exits at once: its child is re-parented to
        // init, outside the command's group and session, but still holds stdout.
        let mut request = ExecuteRequest::new("sh", ["-c", &format!("(setsid sleep {n} &); echo done")]);
        request.timeout = Some(Duration::from_secs(60));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(
            (r.exit_code, r.stdout.as_slice(), r.timed_out),
            (Some(0), &b"done\n"[..], false)
        );
        assert_eq!(
            h.processes_matching(&lease, &format!("sleep {n}")).await,
            Vec::<String>::new()
        );
        let mut request = ExecuteRequest::new("sh", ["-c", &format!("(setsid sleep {n}1 &); sleep {n}2")]);
        request.timeout = Some(Duration::from_millis(800));
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert!(r.timed_out);
        assert_eq!(r.metadata["survivors"], 0);
        assert_eq!(
            h.processes_matching(&lease, &format!("sleep {n}")).await,
            Vec::<String>::new()
        );
    })
    .await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_values_reach_the_command_byte_for_byte_and_leave_stdin_untouched() {
    let h = execute_harness!();
    common::bounded(120, async {
        let lease = h.default_lease().await;
        // Quotes, `$`, backslashes, newlines (a trailing one too), non-ASCII: all must
        // arrive as given; the command's stdin follows, untouched.
        let tricky = "a'b\"c$HOME\\n\\0101\nline2\n\u{e9}$(id)\n";
        let mut request = ExecuteRequest::new(
            "sh",
            [
                "-c",
                "printf '%s|' \"$TOKEN\" \"$PLAIN\" \"$EMPTY\"; cat; env | grep -c envrt_ || true",
            ],
        );
        request.env.insert("TOKEN".into(), Secret::new(tricky).into());
        request.env.insert("EMPTY".into(), Secret::new("").into());
        request.env.insert("PLAIN".into(), "plain".into());
        request.stdin = Some(b"stdin after the secrets\n".to_vec());
        let r = h.runtime.execute(&lease.id, request).await.unwrap();
        assert_eq!(r.exit_code, Some(0), "{}", String::from_utf8_lossy(&r.stderr));
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            format!("{tricky}|plain||stdin after the secrets\n0\n"),
            "the wrapper's own variables must not leak into the command either"
        );
    })
    .await;
    h.finish().await;
}
