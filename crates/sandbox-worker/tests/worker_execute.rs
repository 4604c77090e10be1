//! `environmentExecute` and `environmentExecuteBinary` against the real worker and bwrap.

mod common;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::*;
use serde_json::{Value, json};

fn logs(w: &Worker, invocation: &str, stream: &str) -> String {
    w.notes
        .iter()
        .filter(|n| {
            n["method"] == "execute.log" && n["paperclipInvocationId"] == invocation && n["params"]["stream"] == stream
        })
        .map(|n| n["params"]["chunk"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn round_trip_streams_chunks_tagged_with_the_invocation() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let id = w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "/bin/sh", "args": ["-c", "echo out1; echo err1 1>&2; printf 'out2 \\303\\251'; cat"],
                "stdin": "from-stdin\n", "timeoutMs": 20000}),
        ),
    );
    let r = w.wait_response(id);
    assert_eq!(
        r["result"],
        json!({"exitCode": 0, "signal": null, "timedOut": false, "stdout": "out1\nout2 éfrom-stdin\n", "stderr": "err1\n",
            "metadata": r["result"]["metadata"].clone()})
    );
    assert_eq!(r["result"]["metadata"]["stdoutTruncated"], false);
    assert_eq!(r["result"]["metadata"]["stderrTruncated"], false);
    let inv = format!("inv-{id}");
    assert_eq!(logs(&w, &inv, "stdout"), "out1\nout2 éfrom-stdin\n");
    assert_eq!(logs(&w, &inv, "stderr"), "err1\n");
    // Without an invocation on the request, chunks carry no id (as the SDK).
    w.send_raw(
        &json!({"jsonrpc": "2.0", "id": 500, "method": "environmentExecute",
        "params": on_lease(&lease, json!({"command": "echo", "args": ["plain"]}))})
        .to_string(),
    );
    let r = w.wait_response(500);
    assert_eq!(r["result"]["stdout"], "plain\n");
    let note = w.wait_note(|n| n["method"] == "execute.log" && n["params"]["chunk"] == "plain\n");
    assert_eq!(
        note,
        json!({"jsonrpc": "2.0", "method": "execute.log", "params": {"stream": "stdout", "chunk": "plain\n"}})
    );
}

/// Inspect's `test_exec_large_command`: 16 arguments of 64 KiB (1 MiB of argv) run; the
/// bound is what `execve` takes (2 MiB less a margin), and an argv just under it runs too.
#[test]
fn an_argv_of_megabytes_runs_up_to_the_kernel_bound() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let mut args = vec!["-c".to_owned(), "echo $# ${#1} ${#16}".to_owned(), "sh".to_owned()];
    args.extend(std::iter::repeat_n("a".repeat(64 * 1024), 16));
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "sh", "args": args})),
    );
    assert_eq!(r["stdout"], "16 65536 65536\n", "{r}");
    // 15 arguments of 128 KiB - 1 plus the rest: 2031616 bytes counted, the bound itself.
    let counted = |args: &[String]| {
        args.iter()
            .chain(["sh".to_owned()].iter())
            .map(|a| a.len() + 9)
            .sum::<usize>()
    };
    let mut args = vec!["-c".to_owned(), "echo $#".to_owned(), "sh".to_owned()];
    args.extend(std::iter::repeat_n("b".repeat(128 * 1024 - 1), 15));
    let rest = 2_031_616 - counted(&args) - 9;
    args.push("c".repeat(rest));
    assert_eq!(counted(&args), 2_031_616);
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "sh", "args": args.clone()})),
    );
    assert_eq!(r["stdout"], "16\n", "{r}");
    args.last_mut().unwrap().push('c');
    let (code, message) = w.err(
        "environmentExecute",
        on_lease(&lease, json!({"command": "sh", "args": args})),
    );
    assert_eq!(code, -32602);
    assert_eq!(
        message,
        "Invalid input: arguments and environment take 2031617 bytes, over the limit of 2031616 bytes"
    );
}

/// `envrtStdinRoute` needs the data plane (not offered here) and excludes `stdin`.
#[test]
fn a_stdin_route_without_a_data_plane_is_refused() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let params = on_lease(
        &lease,
        json!({"command": "cat", "envrtStdinRoute": 4611686018427387904u64}),
    );
    let (code, message) = w.err("environmentExecuteBinary", params);
    assert_eq!(code, -32602);
    assert_eq!(
        message,
        "envrtStdinRoute 4611686018427387904 is not an unused stdin route of the data plane"
    );
}

#[test]
fn binary_execute_is_byte_exact() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    // Far more than a pipe holds each way: stdin is fed while output is drained, no deadlock.
    let all: Vec<u8> = (0..=255u8).cycle().take(1_000_000).collect();
    let r = w.ok(
        "environmentExecuteBinary",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "cat; printf '\\377\\000' >&2"], "stdin": STANDARD.encode(&all)}),
        ),
    );
    assert_eq!(STANDARD.decode(r["stdout"].as_str().unwrap()).unwrap(), all);
    assert_eq!(STANDARD.decode(r["stderr"].as_str().unwrap()).unwrap(), vec![0xff, 0]);
    assert_eq!(r["exitCode"], 0);
    // Streamed chunks are base64 too and add up to the same bytes.
    let streamed: Vec<u8> = w
        .notes
        .iter()
        .filter(|n| n["method"] == "execute.log" && n["params"]["stream"] == "stdout")
        .flat_map(|n| {
            assert_eq!(n["params"]["encoding"], "base64");
            STANDARD.decode(n["params"]["chunk"].as_str().unwrap()).unwrap()
        })
        .collect();
    assert_eq!(streamed, all);
    assert_eq!(
        w.err(
            "environmentExecuteBinary",
            on_lease(&lease, json!({"command": "cat", "stdin": "aGk"}))
        ),
        (-32602, "stdin must be a well-formed base64 string".into())
    );
}

#[test]
fn missing_program_is_127_naming_it() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    for program in ["definitely-not-a-program-xyz", "/workspace/nope/prog"] {
        let r = w.ok("environmentExecute", on_lease(&lease, json!({"command": program})));
        assert_eq!(r["exitCode"], 127, "{r}");
        assert_eq!(r["stderr"], format!("envrt: command not found: {program}\n"));
        assert_eq!(r["timedOut"], false);
    }
}

#[test]
fn signal_deaths_are_told_apart_from_exit_codes() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "echo before; kill -9 $$"]}),
        ),
    );
    assert_eq!(
        (
            r["exitCode"].clone(),
            r["signal"].clone(),
            r["timedOut"].clone(),
            r["stdout"].clone()
        ),
        (Value::Null, json!("SIGKILL"), json!(false), json!("before\n"))
    );
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "sh", "args": ["-c", "kill -TERM $$"]})),
    );
    assert_eq!(
        (r["exitCode"].clone(), r["signal"].clone()),
        (Value::Null, json!("SIGTERM"))
    );
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "sh", "args": ["-c", "exit 137"]})),
    );
    assert_eq!((r["exitCode"].clone(), r["signal"].clone()), (json!(137), Value::Null));
    let r = w.ok("environmentExecute", on_lease(&lease, json!({"command": "/workspace"})));
    assert_eq!(
        (r["exitCode"].clone(), r["stderr"].clone()),
        (json!(126), json!("/workspace: permission denied\n"))
    );
}

#[test]
fn timeout_kills_the_whole_tree_and_keeps_partial_output() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let mark = marker("timeout");
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "echo start; (trap '' TERM; sleep 60) & sleep 60 & wait"],
                "env": {"MARK": mark}, "timeoutMs": 300}),
        ),
    );
    assert_eq!(r["timedOut"], true, "{r}");
    assert_eq!(r["exitCode"], Value::Null);
    assert!(["SIGTERM", "SIGKILL"].contains(&r["signal"].as_str().unwrap()), "{r}");
    assert_eq!(r["stdout"], "start\n");
    assert_eq!(
        processes_with(&mark),
        Vec::<u32>::new(),
        "nothing survives once the reply is sent"
    );
    // A command that ignores SIGTERM is killed after the grace.
    let mark = marker("timeout-stubborn");
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "trap '' TERM; echo stubborn; sleep 60; sleep 60"],
            "env": {"MARK": mark}, "timeoutMs": 200}),
        ),
    );
    assert_eq!(
        (r["timedOut"].clone(), r["signal"].clone(), r["stdout"].clone()),
        (json!(true), json!("SIGKILL"), json!("stubborn\n"))
    );
    assert_eq!(processes_with(&mark), Vec::<u32>::new());
}

#[test]
fn returns_when_the_command_exits_even_if_a_grandchild_holds_stdout() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let mark = marker("grandchild");
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "sleep 60 & echo done"], "env": {"MARK": mark}}),
        ),
    );
    assert_eq!(
        (r["exitCode"].clone(), r["stdout"].clone(), r["timedOut"].clone()),
        (json!(0), json!("done\n"), json!(false))
    );
    assert_eq!(
        survivors_after_wait(&mark),
        Vec::<u32>::new(),
        "the grandchild died with the sandbox"
    );
}

#[test]
fn each_stream_is_capped_and_flagged() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let r = w.ok(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "head -c 100000 /dev/zero | tr '\\0' a; echo tail >&2"],
            "maxOutputBytes": 1000}),
        ),
    );
    assert_eq!(r["stdout"].as_str().unwrap(), "a".repeat(1000));
    assert_eq!(r["metadata"]["stdoutTruncated"], true);
    assert_eq!(r["stderr"], "tail\n");
    assert_eq!(r["metadata"]["stderrTruncated"], false);
    assert_eq!(r["exitCode"], 0);
}

#[test]
fn environment_is_isolated() {
    let mut w = Worker::start_with_env(&[("ENVRT_HOST_SECRET", "hunter2")]);
    w.ok("initialize", init_params());
    let lease = w.acquire();
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "env", "env": {"FOO": "bar"}})),
    );
    // The defaults PATH and HOME and the request's variables; not the PWD bwrap sets for
    // the init (a shell sets its own, as on local).
    let mut vars: Vec<&str> = r["stdout"].as_str().unwrap().lines().collect();
    vars.sort();
    assert_eq!(
        vars,
        [
            "FOO=bar",
            "HOME=/workspace",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ]
    );
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "env", "env": {"PATH": "/usr/bin"}})),
    );
    assert!(r["stdout"].as_str().unwrap().contains("PATH=/usr/bin\n"), "{r}");
    assert_eq!(
        w.err(
            "environmentExecute",
            on_lease(&lease, json!({"command": "env", "env": {"A=B": "x"}}))
        ),
        (
            -32602,
            "Invalid input: environment variable name \"A=B\" is not valid".into()
        )
    );
}

#[test]
fn env_values_stay_off_command_lines() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let secret = marker("secret-value");
    let id = w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sh", "args": ["-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; echo \"$TOKEN\""],
            "env": {"TOKEN": secret}, "stdin": ""}),
        ),
    );
    let r = w.wait_response(id);
    let lines: Vec<&str> = r["result"]["stdout"].as_str().unwrap().lines().collect();
    assert!(lines[0].contains("bwrap") && !lines[0].contains(&secret), "{r}");
    assert_eq!(lines[1], secret);
    // On the host too: no command line carries the value while a command holds it.
    let mark = marker("secret-holder");
    let id = w.send(
        "environmentExecute",
        on_lease(
            &lease,
            json!({"command": "sleep", "args": ["30"], "env": {"TOKEN": secret, "MARK": mark}, "timeoutMs": 20000}),
        ),
    );
    wait_for_processes(&mark, 1);
    let holders = processes_with(&secret);
    assert_eq!(holders.len(), 1, "sleep alone holds it: {holders:?}");
    for pid in holders {
        // bwrap (outside the sandbox) never holds a request variable
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        assert!(!exe.ends_with("bwrap"), "pid {pid} ({exe:?}) holds the value");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        // nor the sandbox init, which hands the variables to the command only
        assert!(cmdline.starts_with(b"sleep\0"), "pid {pid} is not the command");
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(&secret),
            "pid {pid} shows the value in its command line"
        );
    }
    w.close_stdin();
    assert_eq!(w.wait_exit(), Some(0));
    let _ = id;
}

#[test]
fn cwd_is_any_sandbox_directory_but_never_dot_dot() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "mkdir", "args": ["-p", "sub/dir"]})),
    );
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "pwd", "cwd": "sub/dir"})),
    );
    assert_eq!(r["stdout"], "/workspace/sub/dir\n");
    let r = w.ok("environmentExecute", on_lease(&lease, json!({"command": "pwd"})));
    assert_eq!(r["stdout"], "/workspace\n");
    // Any directory of the sandbox is a cwd (the sandbox is the boundary); `..` is not.
    let r = w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "pwd", "cwd": "/etc"})),
    );
    assert_eq!(r["stdout"], "/etc\n");
    for bad in ["../x", "/workspace/../etc"] {
        assert_eq!(
            w.err(
                "environmentExecute",
                on_lease(&lease, json!({"command": "pwd", "cwd": bad}))
            ),
            (-32602, format!("Path \"{bad}\" is outside the lease workspace."))
        );
    }
    // A link made inside the sandbox cannot lead the cwd out either.
    w.ok(
        "environmentExecute",
        on_lease(&lease, json!({"command": "ln", "args": ["-s", "/etc", "out"]})),
    );
    assert_eq!(
        w.err(
            "environmentExecute",
            on_lease(&lease, json!({"command": "pwd", "cwd": "out"}))
        ),
        (-32602, "Path \"out\" is outside the lease workspace.".into())
    );
    assert_eq!(
        w.err(
            "environmentExecute",
            on_lease(&lease, json!({"command": "pwd", "cwd": "missing"}))
        ),
        (
            -32602,
            "Invalid input: cwd \"missing\" is not a directory in the environment.".into()
        )
    );
}

#[test]
fn many_concurrent_executes_keep_their_own_output() {
    let mut w = Worker::ready();
    let lease = w.acquire();
    let ids: Vec<(u64, usize)> = (0..24)
        .map(|i| {
            let id = w.send(
                "environmentExecute",
                on_lease(&lease, json!({"command": "sh", "args": ["-c", format!("sleep 0.{}; echo out-{i}; echo err-{i} >&2; exit {i}", (24 - i) % 4)]})),
            );
            (id, i)
        })
        .collect();
    for (id, i) in ids {
        let r = w.wait_response(id);
        assert_eq!(r["result"]["stdout"], format!("out-{i}\n"), "{r}");
        assert_eq!(r["result"]["stderr"], format!("err-{i}\n"));
        assert_eq!(r["result"]["exitCode"], i);
        let inv = format!("inv-{id}");
        assert_eq!(logs(&w, &inv, "stdout"), format!("out-{i}\n"));
    }
    assert_eq!(w.ok("health", json!({}))["details"]["runningSandboxes"], 0);
}
