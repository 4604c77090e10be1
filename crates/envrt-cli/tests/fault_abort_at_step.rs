//! Kill at step N: an `envrt` process aborted (the `ENVRT_TEST_ABORT_AT` test hook,
//! contract section 3) at every fault point of acquire, release and destroy, on local,
//! Docker and the sandbox; after each abort `envrt gc`, run by another process, leaves
//! nothing the soak's leak counter finds (processes, containers, sandboxes, workspaces,
//! active rows). N rises from 1 until the operation completes without reaching it, so
//! every step the code has is covered. Docker and the sandbox skip loudly without their
//! component (fail with `ENVRT_REQUIRE_*=1`).

mod faults;

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Output, Stdio};

use faults::{Scratch, environment, run_bounded};

/// More steps than any operation has: a hook never reached by then is a bug of the test.
const MAX_STEPS: u32 = 20;

/// A process standing in for the program that holds a lease: `gc` releases the lease
/// once it is gone.
struct Holder(Child);

impl Holder {
    fn start() -> Holder {
        Holder(Command::new("sleep").arg("600").stdin(Stdio::null()).spawn().unwrap())
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `envrt ARGS` with the hook set to `operation:n`: whether it aborted there (SIGABRT and
/// the hook's line), else the output of a run that completed.
fn run_hooked(s: &Scratch, args: &[&str], operation: &str, n: u32) -> Result<(), Output> {
    let mut command = s.command(args);
    command.env(envrt::core::fault::ABORT_VAR, format!("{operation}:{n}"));
    let out = run_bounded(command);
    let line = envrt::core::fault::ABORT_LINE
        .replace("{n}", &n.to_string())
        .replace("{operation}", operation);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.signal() == Some(libc_sigabrt()) {
        assert!(stderr.contains(&line), "aborted without the hook's line: {stderr}");
        return Ok(());
    }
    assert!(!stderr.contains(&line), "the hook's line without an abort: {stderr}");
    Err(out)
}

fn libc_sigabrt() -> i32 {
    nix::sys::signal::Signal::SIGABRT as i32
}

/// `envrt gc` from another process, then the soak's count: nothing left.
fn gc_leaves_nothing(s: &Scratch, key: &str, what: &str) {
    let out = s.run(&["gc"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: gc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let leaks = s.leaks(key);
    assert_eq!(leaks.total(), 0, "{what}: leaks after gc: {:#?}", leaks.details);
}

/// A lease of `env` held by `holder`, with a long-running process in it where the driver
/// keeps processes (so a release cut short leaves one for gc to kill).
fn held_lease(s: &Scratch, env: &str, holder: &Holder, spawn: bool) -> String {
    let out = s.run(&["lease", "acquire", "--env-id", env, "--holder-pid", &holder.pid()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    if spawn {
        let out = s.run(&["spawn", "--lease", &id, "--", "sleep", "600"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    id
}

/// Aborts `operation` (`acquire`, `release` or `destroy`) at every step in turn on
/// environment `env` of driver `key`; returns how many steps it has.
fn every_step(s: &Scratch, key: &str, env: &str, operation: &str, spawn: bool) -> u32 {
    for n in 1..=MAX_STEPS {
        let holder = Holder::start();
        let (args, lease) = match operation {
            "acquire" => (
                vec![
                    "lease".to_owned(),
                    "acquire".into(),
                    "--env-id".into(),
                    env.into(),
                    "--holder-pid".into(),
                    holder.pid(),
                ],
                None,
            ),
            verb => {
                let id = held_lease(s, env, &holder, spawn);
                (vec!["lease".to_owned(), verb.into(), id.clone()], Some(id))
            }
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match run_hooked(s, &args, operation, n) {
            Ok(()) => {
                // The program that held the lease is gone too.
                drop(holder);
                gc_leaves_nothing(s, key, &format!("{operation} aborted at step {n}"));
            }
            Err(out) => {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{operation} with the hook past its last step: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                if let Some(id) = lease.or_else(|| Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())) {
                    let _ = s.run(&["lease", "release", &id]);
                }
                drop(holder);
                gc_leaves_nothing(s, key, &format!("{operation} completed"));
                return n - 1;
            }
        }
    }
    panic!("{operation} still reached a fault point at step {MAX_STEPS}");
}

/// The three operations on one environment; each has at least the facade's steps.
fn all_operations(s: &Scratch, key: &str, env: &str, spawn: bool) {
    let acquire = every_step(s, key, env, "acquire", spawn);
    assert!(acquire >= 3, "acquire has only {acquire} steps");
    let release = every_step(s, key, env, "release", spawn);
    assert!(release >= 2, "release has only {release} steps");
    let destroy = every_step(s, key, env, "destroy", spawn);
    assert!(destroy >= 2, "destroy has only {destroy} steps");
    eprintln!("{key}: acquire {acquire} steps, release {release}, destroy {destroy}");
}

#[test]
fn local_gc_collects_after_an_abort_at_every_step() {
    let s = Scratch::new(&environment("loc", "local", ""));
    all_operations(&s, "local", "loc", true);
}

#[test]
fn docker_gc_collects_after_an_abort_at_every_step() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Scratch::new(&environment("ctr", "docker", &format!("image = \"{image}\"\n")));
    all_operations(&s, "docker", "ctr", false);
}

#[test]
fn sandbox_gc_collects_after_an_abort_at_every_step() {
    if envrt_test_support::sandbox::worker_beside_or_skip(faults::BIN).is_none() {
        return;
    }
    let s = Scratch::new(&environment("box", "sandbox", ""));
    all_operations(&s, "sandbox", "box", true);
}

/// Template ids in `envrt template list --env-id ENV --json`.
fn templates(s: &Scratch, env: &str) -> Vec<String> {
    let out = s.run(&["template", "list", "--env-id", env, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Aborts `envrt template capture` at every step on `env`; after each, gc leaves no leak,
/// the templates that exist are whole (listed, and deletable), and once they are deleted
/// `leftovers()` (what the driver stores templates in) is empty. Returns the step count.
fn capture_every_step(s: &Scratch, key: &str, env: &str, leftovers: impl Fn() -> Vec<String>) -> u32 {
    for n in 1..=MAX_STEPS {
        let holder = Holder::start();
        let id = held_lease(s, env, &holder, false);
        let write = s.run(&["exec", "--lease", &id, "--", "sh", "-c", "echo kept > note"]);
        assert_eq!(
            write.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&write.stderr)
        );
        let outcome = run_hooked(s, &["template", "capture", &id], "capture", n);
        drop(holder);
        let out = s.run(&["gc"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "gc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A whole template is the user's (listed, deletable), not a leak.
        for template in templates(s, env) {
            let out = s.run(&["template", "delete", &template, "--env-id", env]);
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        }
        gc_leaves_nothing(s, key, &format!("capture aborted at step {n}"));
        let left = leftovers();
        assert!(
            left.is_empty(),
            "capture step {n}: left after gc and deleting every template: {left:?}"
        );
        if let Err(out) = outcome {
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            return n - 1;
        }
    }
    panic!("capture still reached a fault point at step {MAX_STEPS}");
}

/// Every entry of `dir` (none when it is missing).
fn entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path().display().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn local_gc_collects_after_a_capture_aborted_at_every_step() {
    let s = Scratch::new(&environment("loc", "local", ""));
    let store = s.state().join("workspaces").join(".templates");
    let steps = capture_every_step(&s, "local", "loc", || entries(&store));
    assert!(steps >= 4, "capture has only {steps} steps");
}

#[test]
fn docker_gc_collects_after_a_capture_aborted_at_every_step() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Scratch::new(&environment("ctr", "docker", &format!("image = \"{image}\"\n")));
    let label = format!("label=envrt.cli-state={}", s.state().display());
    let steps = capture_every_step(&s, "docker", "ctr", || {
        let out = Command::new("docker")
            .args(["images", "-q", "--no-trunc", "--filter", &label])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    });
    assert!(steps >= 2, "capture has only {steps} steps");
}

/// Active lease rows of the scratch's store.
fn active_rows(s: &Scratch) -> usize {
    let out = s.run(&["lease", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
        .unwrap()
        .iter()
        .filter(|l| l["status"] == "active")
        .count()
}

/// `envrt serve` keeps a warm pool of 2 filled; aborted at every refill step in turn,
/// then gc from another process leaves nothing. A run that fills the pool without
/// reaching step N is stopped with SIGTERM (it then releases its pool itself); if the abort
/// comes first all the same, that counts as an abort at N.
#[test]
fn pool_refill_aborted_at_every_step_is_collected_by_gc() {
    let s = Scratch::new(&format!(
        "{}[environment.pool]\nsize = 2\n",
        environment("warm", "local", "")
    ));
    let socket = s.path().join("serve.sock");
    let line = |n: u32| {
        envrt::core::fault::ABORT_LINE
            .replace("{n}", &n.to_string())
            .replace("{operation}", "pool_refill")
    };
    for n in 1..=MAX_STEPS {
        let mut command = s.command(&["serve", "--socket", socket.to_str().unwrap()]);
        command.env(envrt::core::fault::ABORT_VAR, format!("pool_refill:{n}"));
        let mut serve = command.spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(status) = serve.try_wait().unwrap() {
                break status;
            }
            if active_rows(&s) == 2 {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(serve.id() as i32), nix::sys::signal::SIGTERM)
                    .unwrap();
                break faults::wait_bounded(&mut serve);
            }
            assert!(std::time::Instant::now() < deadline, "the pool never filled");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(serve.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        let aborted = status.signal() == Some(libc_sigabrt());
        assert_eq!(aborted, stderr.contains(&line(n)), "{status:?}: {stderr}");
        gc_leaves_nothing(&s, "local", &format!("pool refill aborted at step {n}"));
        if !aborted {
            assert_eq!(status.code(), Some(0), "{stderr}");
            assert!(n > 2, "the refill has only {} steps", n - 1);
            eprintln!("pool refill: {} steps", n - 1);
            return;
        }
    }
    panic!("the refill still reached a fault point at step {MAX_STEPS}");
}
