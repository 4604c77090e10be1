//! The `envrt` binary on the sandbox driver (the reference `envrt-sandbox-worker`, a new
//! worker per invocation): leases survive a restart of the tool, and gc cleans up after a
//! killed holder. Skips loudly without the worker (fails with `ENVRT_REQUIRE_SANDBOX=1`).

mod common;

use std::path::PathBuf;

use common::*;

/// A site with an environment `box` on the sandbox driver, or `None` (skipped).
fn sandbox_site() -> Option<(Site, PathBuf)> {
    let worker = envrt_test_support::sandbox::worker_beside_or_skip(BIN)?;
    let site = Site::new();
    std::fs::write(
        site.path().join("envrt.toml"),
        "[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n",
    )
    .unwrap();
    Some((site, worker))
}

#[test]
fn sandbox_leases_survive_a_restart_of_the_tool() {
    let Some((s, _)) = sandbox_site() else { return };
    let id = s
        .run(&["lease", "acquire", "--env-id", "box"])
        .stdout_text()
        .trim()
        .to_owned();
    let wrote = s.run(&["exec", "--lease", &id, "--", "sh", "-c", "echo kept > note; pwd"]);
    assert_eq!(wrote.code, Some(0), "{}", wrote.stderr);
    assert_eq!(wrote.stdout_text(), "/workspace\n");
    let read = s.run(&["exec", "--lease", &id, "--", "cat", "note"]);
    assert_eq!(read.stdout_text(), "kept\n");
    let three = s.run(&["exec", "--lease", &id, "--", "sh", "-c", "exit 3"]);
    assert_eq!(three.code, Some(3));
    std::fs::create_dir_all(s.path().join("src")).unwrap();
    std::fs::write(s.path().join("src/a.txt"), b"alpha").unwrap();
    let cp = s.run(&["cp", "-q", "src", &format!("lease:{id}:/workspace/src")]);
    assert_eq!(cp.code, Some(0), "{}", cp.stderr);
    assert_eq!(
        s.run(&["exec", "--lease", &id, "--", "cat", "src/a.txt"]).stdout_text(),
        "alpha"
    );
    assert_eq!(
        s.run(&["lease", "release", &id]).stdout_text(),
        format!("{id} released\n")
    );
}

#[test]
fn gc_cleans_up_after_a_killed_holder_on_the_sandbox() {
    let Some((s, _)) = sandbox_site() else { return };
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    let (mut holder, lease) = s.start_holder(&["--env-id", "box"], &mark);
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The worker dies with its host, and its sandboxes with it.
    assert_eq!(
        survivors(&mark),
        Vec::<u32>::new(),
        "the sandboxed command outlived its holder"
    );
    let gc = s.run(&["gc"]);
    assert_eq!(gc.code, Some(0), "{}", gc.stderr);
    let id = lease["id"].as_str().unwrap();
    assert_eq!(
        gc.stdout_text(),
        format!(
            "released lease {id} (its holder, pid {}, is gone)\ngc: 1 released, 0 failed\n",
            holder.id()
        )
    );
    let after = s.leases_json();
    assert_eq!(
        (after[0]["status"].as_str(), after[0]["failureReason"].as_str()),
        (Some("failed"), Some("holder_gone"))
    );
}

#[test]
fn sandbox_refusals_exit_2_as_on_local() {
    let Some((s, _)) = sandbox_site() else { return };
    let id = s
        .run(&["lease", "acquire", "--env-id", "box"])
        .stdout_text()
        .trim()
        .to_owned();
    // the same refusals and texts as the local driver's (tests/cli.rs)
    let outside = s.run(&["exec", "--lease", &id, "--cwd", "../..", "--", "pwd"]);
    assert_eq!(
        (outside.code, outside.stderr.as_str()),
        (Some(2), "Path \"../..\" is outside the lease workspace.\n")
    );
    std::fs::create_dir_all(s.path().join("src")).unwrap();
    let escape = s.run(&["cp", "-q", "src", &format!("lease:{id}:../../x")]);
    assert_eq!(
        (escape.code, escape.stderr.as_str()),
        (Some(2), "Path \"../../x\" is outside the lease workspace.\n")
    );
    let missing = s.run(&["cp", "-q", &format!("lease:{id}:/workspace/nope"), "back"]);
    assert_eq!(
        (missing.code, missing.stderr.as_str()),
        (Some(2), "Sync source \"/workspace/nope\" does not exist.\n")
    );
    s.run(&["lease", "release", &id]);
}

#[test]
fn a_single_file_copies_out_of_a_sandbox_lease() {
    // Used to fail with `Sync source "f.txt" is not a directory.`: cp retries as a file only
    // on the typed error, which the worker's refusal now comes back as.
    let Some((s, _)) = sandbox_site() else { return };
    let id = s
        .run(&["lease", "acquire", "--env-id", "box"])
        .stdout_text()
        .trim()
        .to_owned();
    let made = s.run(&["exec", "--lease", &id, "--", "sh", "-c", "printf 'one file' > f.txt"]);
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    for (source, local) in [("f.txt", "got.txt"), ("/workspace/f.txt", "got2.txt")] {
        let out = s.run(&["cp", "-q", &format!("lease:{id}:{source}"), local]);
        assert_eq!(out.code, Some(0), "{source}: {}", out.stderr);
        assert_eq!(std::fs::read(s.path().join(local)).unwrap(), b"one file", "{source}");
    }
    s.run(&["lease", "release", &id]);
}

#[test]
fn a_sandbox_lease_with_a_ttl_ends_at_expiry_after_its_holder_is_sigkilled() {
    let Some((s, _)) = sandbox_site() else { return };
    let mark = marker();
    let _reaper = Reaper(mark.clone());
    let (mut holder, lease) = s.start_holder(&["--env-id", "box", "--ttl", "2s"], &mark);
    let dir = s
        .state()
        .join("sandbox")
        .join(lease["providerLeaseId"].as_str().unwrap());
    assert!(dir.is_dir(), "{}", dir.display());
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(
        survivors(&mark),
        Vec::<u32>::new(),
        "the sandboxed command outlived its holder"
    );
    let id = lease["id"].as_str().unwrap();
    let at = envrt::Timestamp(lease["expiresAt"].as_u64().unwrap());
    // Past the expiry: the lease refuses with its text, and gc (whose worker re-arms the
    // recorded expiry) records it expired and leaves no directory.
    while envrt::Timestamp::now() <= at {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let refused = s.run(&["exec", "--lease", id, "--", "true"]);
    assert_eq!(
        (refused.code, refused.stderr),
        (Some(2), format!("Lease \"{id}\" expired at {}.\n", at.to_rfc3339()))
    );
    let gc = s.run(&["gc"]);
    assert_eq!(gc.code, Some(0), "{}", gc.stderr);
    assert_eq!(
        gc.stdout_text(),
        format!("released lease {id} (it expired)\ngc: 1 released, 0 failed\n")
    );
    assert!(!dir.exists(), "the sandbox directory outlived gc");
}
