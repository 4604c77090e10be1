//! Execute (contract section 5) on real commands: argv, stdin bytes, exit codes, env,
//! timeouts with no survivor, grandchildren holding stdout, caps, missing programs and
//! cwds (one text each on every driver), env isolation, secrets, concurrency.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envrt_runtime_core::model::WORKSPACE_METADATA_KEY;
use envrt_runtime_core::{EnvValue, ExecuteRequest, LeasePolicy, OutputKeep, OutputStream, Secret};
use proptest::prelude::*;

use super::{Check, Checked, has_execute, property};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("execute_argv_roundtrip", has_execute, argv_roundtrip)
        .promise("Every argument reaches the program unchanged (no shell, no splitting)."),
    Check::new("execute_stdin_roundtrip", has_execute, stdin_roundtrip)
        .promise("stdin bytes reach the command unchanged."),
    Check::new("execute_large_stdin_and_stdout", has_execute, large_stdin)
        .promise("Large stdin and stdout pass through whole, without a deadlock."),
    Check::new("execute_exit_codes", has_execute, exit_codes)
        .promise("The command's exit code is reported as it exited."),
    Check::new("execute_env_roundtrip", has_execute, env_roundtrip)
        .promise("Request env values reach the command unchanged."),
    Check::new("execute_stdout_stderr_apart", has_execute, streams_apart)
        .promise("stdout and stderr come back apart, each with its own bytes."),
    Check::maybe("execute_timeout_kills_tree", has_execute, timeout_kills_tree)
        .promise("A timeout kills the whole process tree, keeps the output so far and sets timed_out."),
    Check::maybe("execute_grandchild_holding_stdout", has_execute, grandchild_stdout)
        .promise("Execute returns when the command exits, even if a grandchild holds stdout open."),
    Check::maybe("execute_drop_kills_tree", has_execute, drop_kills_tree)
        .promise("Dropping an execute future kills the command's whole tree within 10 s."),
    Check::new("execute_output_cap", has_execute, output_cap)
        .promise("Output past the cap is dropped and the truncation flag set (keep head)."),
    Check::new("execute_output_tail", has_execute, output_tail)
        .promise("With keep = tail the last bytes of a capped stream are kept, in order."),
    Check::new("execute_missing_program", has_execute, missing_program)
        .promise("A missing program exits 127 with exactly `envrt: command not found: {program}`."),
    Check::new("execute_missing_cwd", has_execute, missing_cwd)
        .promise("A missing cwd is refused with the one text of every driver, and nothing runs."),
    Check::new("execute_signal_reported", has_execute, signal_reported)
        .promise("A command killed by SIGKILL reports the signal and no exit code."),
    Check::new("execute_env_isolation", has_execute, env_isolation)
        .promise("The host's environment does not leak into the command beyond the allow-list."),
    Check::new("execute_secrets_absent", has_execute, secrets_absent)
        .promise("A secret env value never appears in errors or Debug output."),
    Check::new("execute_sink_streams", has_execute, sink_streams)
        .promise("A sink receives every output byte of each stream: the same bytes as the result."),
    Check::new("execute_concurrent", has_execute, concurrent)
        .promise("Many commands on one lease may run concurrently and each gets its own result."),
    Check::new("execute_concurrent_overlap", has_execute, concurrent_overlap)
        .promise("Two commands on one lease run at the same time (each waits for the other)."),
    Check::new("execute_cwd_confined", has_execute, cwd_confined)
        .promise("A cwd outside the driver's path scope is refused with the path-scope text."),
    Check::new("execute_default_cwd_is_the_workspace", has_execute, workspace_metadata)
        .promise("A command without a cwd runs in the lease's metadata.workspace."),
];

/// Strings without NUL (any other character, including non-ASCII and newlines).
fn arg_strategy() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[^\u{0}]{0,24}").expect("valid regex")
}

fn argv_roundtrip(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease_blocking(LeasePolicy::Ephemeral, |lease| {
        property(ctx, proptest::collection::vec(arg_strategy(), 0..6), |args| {
            ctx.block_on(async {
                let mut argv = vec!["%s\\0".to_string()];
                argv.extend(args.iter().cloned());
                // printf with only a format and no args still prints once.
                let result = ctx.exec(&lease, ExecuteRequest::new("printf", argv)).await?;
                ensure_eq(result.exit_code, Some(0), "exit code")?;
                let mut expected = Vec::new();
                if args.is_empty() {
                    expected.push(0u8);
                }
                for a in &args {
                    expected.extend_from_slice(a.as_bytes());
                    expected.push(0);
                }
                ensure_eq(result.stdout, expected, "argv echoed by printf")
            })
        })
    })
}

fn stdin_strategy(binary: bool) -> BoxedStrategy<Vec<u8>> {
    if binary {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..4096),
            (0usize..3 * 1024 * 1024, any::<u8>()).prop_map(|(n, seed)| pattern(n, seed)),
        ]
        .boxed()
    } else {
        proptest::string::string_regex("[^\u{0}]{0,512}")
            .expect("valid regex")
            .prop_map(String::into_bytes)
            .boxed()
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn stdin_roundtrip(ctx: &Ctx) -> Result<(), String> {
    let binary = ctx.profile.binary_safe;
    ctx.with_lease_blocking(LeasePolicy::Ephemeral, |lease| {
        property(ctx, stdin_strategy(binary), |bytes| {
            ctx.block_on(async {
                let mut request = ExecuteRequest::new("cat", Vec::<String>::new());
                request.stdin = Some(bytes.clone());
                request.timeout = Some(Duration::from_secs(120));
                let result = ctx.exec(&lease, request).await?;
                ensure_eq(result.exit_code, Some(0), "exit code of cat")?;
                ensure(result.stdout == bytes, || {
                    format!("cat returned {} bytes for {} sent", result.stdout.len(), bytes.len())
                })
            })
        })
    })
}

fn large_stdin(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        // Both directions far larger than a pipe buffer: a driver that writes stdin
        // before reading stdout deadlocks here.
        let bytes: Vec<u8> = if ctx.profile.binary_safe {
            pattern(4 * 1024 * 1024, 7)
        } else {
            "envrt large stdin\n".repeat(200_000).into_bytes()
        };
        let mut request = ExecuteRequest::new("cat", Vec::<String>::new());
        request.stdin = Some(bytes.clone());
        request.timeout = Some(Duration::from_secs(120));
        let result = ctx.exec(&lease, request).await?;
        ensure_eq(result.timed_out, false, "timed out")?;
        ensure(result.stdout == bytes, || {
            format!("cat returned {} bytes for {}", result.stdout.len(), bytes.len())
        })
    })
}

fn exit_codes(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease_blocking(LeasePolicy::Ephemeral, |lease| {
        property(ctx, 0i32..=255, |code| {
            ctx.block_on(async {
                let result = ctx
                    .exec(
                        &lease,
                        ExecuteRequest::new("sh", ["-c".to_string(), format!("exit {code}")]),
                    )
                    .await?;
                ensure_eq(result.exit_code, Some(code), "exit code")?;
                ensure_eq(result.signal, None, "signal")
            })
        })
    })
}

fn env_roundtrip(ctx: &Ctx) -> Result<(), String> {
    let strategy = proptest::collection::btree_map("ENVRT_P_[A-Z0-9_]{1,10}", "[^\u{0}=]{0,20}", 0..6);
    ctx.with_lease_blocking(LeasePolicy::Ephemeral, |lease| {
        property(ctx, strategy, |vars: BTreeMap<String, String>| {
            ctx.block_on(async {
                let script: String = vars.keys().map(|k| format!(" \"${k}\"")).collect();
                let mut request = ExecuteRequest::new("sh", ["-c".to_string(), format!("printf '%s\\0' x{script}")]);
                request.env = vars
                    .iter()
                    .map(|(k, v)| (k.clone(), EnvValue::from(v.as_str())))
                    .collect();
                let result = ctx.exec(&lease, request).await?;
                let mut expected = b"x\0".to_vec();
                for v in vars.values() {
                    expected.extend_from_slice(v.as_bytes());
                    expected.push(0);
                }
                ensure_eq(result.stdout, expected, "env values seen by the command")
            })
        })
    })
}

fn streams_apart(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let result = ctx
            .exec(
                &lease,
                ExecuteRequest::new("sh", ["-c", "printf out; printf err >&2; exit 3"]),
            )
            .await?;
        ensure_eq(result.stdout.as_slice(), b"out".as_slice(), "stdout")?;
        ensure_eq(result.stderr.as_slice(), b"err".as_slice(), "stderr")?;
        ensure_eq(result.exit_code, Some(3), "exit code")
    })
}

/// A shell loop whose command line carries `marker`, so it can be found in `/proc`.
pub(super) fn marked_loop(marker: &str) -> String {
    format!("sh -c 'while :; do sleep 1; done' {marker}")
}

/// No process carrying `marker` is left (within a bounded moment: killing is
/// asynchronous in the kernel); "not checked" when processes cannot be seen.
pub(super) async fn no_survivor(ctx: &Ctx, marker: &str) -> Result<Checked, String> {
    no_survivor_within(ctx, marker, Duration::from_secs(5)).await
}

/// [`no_survivor`] within `bound`.
async fn no_survivor_within(ctx: &Ctx, marker: &str, bound: Duration) -> Result<Checked, String> {
    let mut left = Vec::new();
    for _ in 0..bound.as_millis() / 100 {
        left = match ctx.processes(marker) {
            Ok(left) => left,
            Err(why) => {
                return Ok(Checked::NotChecked(format!(
                    "the command behaved, but survivors cannot be looked for: {why}"
                )));
            }
        };
        if left.is_empty() {
            return Ok(Checked::Yes);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("processes survived: {left:?}"))
}

fn timeout_kills_tree(ctx: &Ctx) -> Result<Checked, String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let marker = ctx.marker("timeout");
        let script = format!(
            "echo partial; {l} & {l} & sh -c '{inner} & wait' {marker} & wait",
            l = marked_loop(&marker),
            inner = "sleep 1000".replace('\'', ""),
        );
        let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script, marker.clone()]);
        request.timeout = Some(Duration::from_millis(1500));
        let result = ctx.exec(&lease, request).await?;
        ensure(result.timed_out, || "timed_out is false".into())?;
        ensure_eq(result.exit_code, None, "exit code of a killed command")?;
        ensure(result.stdout.starts_with(b"partial"), || {
            format!("partial output lost: {:?}", String::from_utf8_lossy(&result.stdout))
        })?;
        no_survivor(ctx, &marker).await
    })
}

/// The contract's bound for a dropped execute's tree to be gone.
const DROP_BOUND: Duration = Duration::from_secs(10);

/// Dropping an execute future once its tree runs kills the whole tree within
/// [`DROP_BOUND`].
fn drop_kills_tree(ctx: &Ctx) -> Result<Checked, String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let marker = ctx.marker("dropped");
        let script = format!("{l} & {l} & wait", l = marked_loop(&marker));
        let request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
        let mut execute = Box::pin(ctx.exec(&lease, request));
        // Until both loops run (when processes can be seen), else a moment.
        let started = async {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while tokio::time::Instant::now() < deadline {
                match ctx.processes(&marker) {
                    Ok(seen) if seen.len() >= 2 => return true,
                    Ok(_) => {}
                    Err(_) => {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        return true;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        };
        tokio::select! {
            result = &mut execute => {
                return Err(format!("the command ended by itself before it was dropped: {result:?}"));
            }
            seen = started => ensure(seen, || "the command's processes never showed up".into())?,
        }
        drop(execute);
        no_survivor_within(ctx, &marker, DROP_BOUND).await
    })
}

fn grandchild_stdout(ctx: &Ctx) -> Result<Checked, String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let marker = ctx.marker("grandchild");
        let script = format!("{} & echo started", marked_loop(&marker));
        let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
        // Generous: a driver that waits for the grandchild's stdout hits it.
        request.timeout = Some(Duration::from_secs(60));
        let result = ctx.exec(&lease, request).await?;
        ensure_eq(
            result.timed_out,
            false,
            "timed out (the call waited for the grandchild)",
        )?;
        ensure_eq(result.exit_code, Some(0), "exit code")?;
        ensure_eq(String::from_utf8_lossy(&result.stdout).as_ref(), "started\n", "stdout")?;
        no_survivor(ctx, &marker).await
    })
}

fn output_cap(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let mut request = ExecuteRequest::new("sh", ["-c", "head -c 300000 /dev/zero | tr '\\0' a; printf bb >&2"]);
        request.max_output_bytes = Some(1000);
        let result = ctx.exec(&lease, request).await?;
        ensure_eq(result.exit_code, Some(0), "exit code")?;
        ensure_eq(result.stdout, vec![b'a'; 1000], "capped stdout")?;
        ensure(result.stdout_truncated, || "stdout_truncated is false".into())?;
        ensure_eq(result.stderr.as_slice(), b"bb".as_slice(), "stderr")?;
        ensure(!result.stderr_truncated, || "stderr_truncated is true".into())
    })
}

/// `OutputKeep::Tail` keeps the last bytes of a stream past the cap, in order, and
/// flags the cut; a stream under the cap is whole.
fn output_tail(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let script = "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done; printf 'the end'; printf bb >&2";
        let mut request = ExecuteRequest::new("sh", ["-c", script]);
        request.max_output_bytes = Some(20);
        request.keep = OutputKeep::Tail;
        let result = ctx.exec(&lease, request).await?;
        ensure_eq(result.exit_code, Some(0), "exit code")?;
        ensure_eq(
            String::from_utf8_lossy(&result.stdout).as_ref(),
            "998\nline1999\nthe end",
            "the stdout tail",
        )?;
        ensure(result.stdout_truncated, || "stdout_truncated is false".into())?;
        ensure_eq(result.stderr.as_slice(), b"bb".as_slice(), "stderr")?;
        ensure(!result.stderr_truncated, || "stderr_truncated is true".into())
    })
}

/// The lease names its workspace under the one documented metadata key, and a command
/// without a cwd runs there.
fn workspace_metadata(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let workspace = lease
            .workspace()
            .ok_or_else(|| {
                format!(
                    "lease metadata has no \"{WORKSPACE_METADATA_KEY}\": {:?}",
                    lease.metadata
                )
            })?
            .to_owned();
        ensure(workspace.starts_with('/'), || {
            format!("workspace {workspace:?} is not absolute")
        })?;
        let result = ctx.exec(&lease, ExecuteRequest::new("sh", ["-c", "pwd -P"])).await?;
        ensure_eq(result.exit_code, Some(0), "exit code")?;
        let real = ctx
            .exec(
                &lease,
                ExecuteRequest::new("sh", ["-c", &format!("cd '{workspace}' && pwd -P")]),
            )
            .await?;
        ensure_eq(result.stdout, real.stdout, "the default cwd against the workspace")
    })
}

/// A program that does not exist, by bare name and by path: exit code 127 and, on stderr,
/// exactly the contract's `envrt: command not found: {program}` line, on every driver.
fn missing_program(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let name = ctx.marker("no-such-program");
        for program in [name.clone(), format!("./{name}-dir/{name}")] {
            let result = ctx.exec(&lease, ExecuteRequest::new(program.clone(), ["x"])).await?;
            ensure_eq(result.exit_code, Some(127), &format!("exit code of {program}"))?;
            ensure_eq(
                String::from_utf8_lossy(&result.stderr).into_owned(),
                format!("envrt: command not found: {program}\n"),
                "stderr",
            )?;
        }
        Ok(())
    })
}

/// An execute `cwd` that does not exist, or names a file, is refused with the one text of
/// every driver, naming the cwd as given, and runs nothing.
fn missing_cwd(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let file = ctx.marker("cwd-file");
        ctx.sh(&lease, &format!("echo x > '{file}'")).await?;
        let missing = ctx.marker("no-such-dir");
        for cwd in [missing.clone(), format!("{missing}/deeper"), file] {
            let mut request = ExecuteRequest::new("pwd", Vec::<String>::new());
            request.cwd = Some(cwd.clone());
            let error = ctx
                .runtime
                .execute(&lease.id, request)
                .await
                .err()
                .ok_or(format!("cwd {cwd} accepted"))?;
            ensure_eq(
                error.to_string(),
                format!("Invalid input: cwd \"{cwd}\" is not a directory in the environment."),
                "refusal",
            )?;
        }
        Ok(())
    })
}

fn signal_reported(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let result = ctx
            .exec(&lease, ExecuteRequest::new("sh", ["-c", "kill -9 $$"]))
            .await?;
        ensure_eq(result.exit_code, None, "exit code")?;
        ensure_eq(result.signal.as_deref(), Some("SIGKILL"), "signal")?;
        ensure_eq(result.timed_out, false, "timed out")
    })
}

/// Variables the contract lets a driver pass through.
const ALLOWED: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TERM", "USER", "PWD", "SHLVL", "HOSTNAME", "_",
];

fn env_isolation(ctx: &Ctx) -> Result<(), String> {
    let host: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| !ALLOWED.contains(&k.as_str()))
        .collect();
    ensure(!host.is_empty(), || {
        "no host variable to look for (run under cargo)".into()
    })?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let result = ctx
            .exec(&lease, ExecuteRequest::new("env", Vec::<String>::new()))
            .await?;
        let seen = String::from_utf8_lossy(&result.stdout);
        let leaked: Vec<&str> = seen
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, v)| host.get(*k).is_some_and(|hv| hv == v))
            .map(|(k, _)| k)
            .collect();
        ensure(leaked.is_empty(), || format!("host variables leaked: {leaked:?}"))
    })
}

fn secrets_absent(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let secret = ctx.marker("secret-value");
        let mut request = ExecuteRequest::new("sh", ["-c", "printf %s \"$TOKEN\""]);
        request.env.insert("TOKEN".into(), Secret::new(secret.clone()).into());
        ensure(!format!("{request:?}").contains(&secret), || {
            "the secret shows in Debug".into()
        })?;
        let result = ctx.exec(&lease, request.clone()).await?;
        ensure_eq(
            String::from_utf8_lossy(&result.stdout).as_ref(),
            secret.as_str(),
            "secret seen by the command",
        )?;
        // An error path must not show it either. Whether the cwd is refused is
        // execute_cwd_confined's promise: here only what comes back is looked at.
        request.cwd = Some("../outside".into());
        let shown = match ctx.runtime.execute(&lease.id, request).await {
            Err(error) => format!("{error} {error:?}"),
            Ok(result) => format!(
                "{} {}",
                String::from_utf8_lossy(&result.stderr),
                serde_json::Value::Object(result.metadata.clone())
            ),
        };
        ensure(!shown.contains(&secret), || {
            "the secret shows in the answer to a refused cwd".to_string()
        })
    })
}

/// Chunks a sink received, in arrival order.
type Chunks = Vec<(OutputStream, Vec<u8>)>;

fn sink_streams(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let seen: Arc<Mutex<Chunks>> = Arc::default();
        let sink = seen.clone();
        let mut request = ExecuteRequest::new("sh", ["-c", "printf one; printf two >&2; printf three"]);
        request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
            sink.lock().unwrap().push((stream, chunk.to_vec()));
        }));
        let result = ctx.exec(&lease, request).await?;
        let chunks = seen.lock().unwrap().clone();
        let join = |which: OutputStream| -> Vec<u8> {
            chunks
                .iter()
                .filter(|(s, _)| *s == which)
                .flat_map(|(_, c)| c.clone())
                .collect()
        };
        ensure_eq(
            join(OutputStream::Stdout),
            result.stdout.clone(),
            "sink stdout vs result",
        )?;
        ensure_eq(
            join(OutputStream::Stderr),
            result.stderr.clone(),
            "sink stderr vs result",
        )?;
        ensure_eq(result.stdout.as_slice(), b"onethree".as_slice(), "stdout")
    })
}

fn concurrent(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let runs = (0..16).map(|i| {
            let lease = lease.clone();
            async move {
                let result = ctx
                    .exec(&lease, ExecuteRequest::new("printf", [format!("run-{i}")]))
                    .await?;
                ensure_eq(
                    String::from_utf8_lossy(&result.stdout).into_owned(),
                    format!("run-{i}"),
                    "stdout",
                )
            }
        });
        futures::future::try_join_all(runs).await.map(|_| ())
    })
}

fn cwd_confined(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let link = ctx.marker("cwd-link");
        ctx.sh(&lease, &format!("ln -s /tmp '{link}'")).await?;
        // A whole isolated environment takes any absolute path; `..` stays refused.
        let whole = ctx.any_cwd();
        let refused: Vec<&str> = if whole {
            vec!["../outside"]
        } else {
            vec!["../outside", "/etc", link.as_str()]
        };
        for cwd in refused {
            let mut request = ExecuteRequest::new("pwd", Vec::<String>::new());
            request.cwd = Some(cwd.into());
            let error = ctx
                .runtime
                .execute(&lease.id, request)
                .await
                .err()
                .ok_or(format!("cwd {cwd} accepted"))?;
            ensure_eq(
                error.to_string(),
                format!("Path \"{cwd}\" is outside the lease workspace."),
                "refusal",
            )?;
        }
        Ok(())
    })
}

/// Two commands on one lease, each of which creates its own marker file and then waits
/// (bounded) for the other's: they can only both succeed if they run at the same time. A
/// driver that runs a lease's commands one after the other fails here.
fn concurrent_overlap(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let dir = ctx.marker("overlap");
        ctx.sh(&lease, &format!("mkdir -p '{dir}'")).await?;
        let side = |me: &str, other: &str| {
            let script = format!(
                "touch '{dir}/{me}'; i=0; while [ ! -e '{dir}/{other}' ]; do \
                 i=$((i+1)); [ $i -gt 300 ] && exit 9; sleep 0.1; done; echo met"
            );
            let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
            request.timeout = Some(Duration::from_secs(60));
            ctx.exec(&lease, request)
        };
        let (a, b) = tokio::join!(side("a", "b"), side("b", "a"));
        for (name, result) in [("a", a?), ("b", b?)] {
            ensure(result.exit_code == Some(0), || {
                format!(
                    "command {name} never saw the other's marker (exit {:?}, timed out {}): \
                     the two commands did not run at the same time",
                    result.exit_code, result.timed_out
                )
            })?;
        }
        Ok(())
    })
}
