//! `ExecuteRequest::user` on the local driver: refused with exact texts unless envrt runs
//! as root and the environment's `allowedUsers` lists the user; when allowed, the command
//! really runs as that uid and gid, with no supplementary group of root's left.

mod common;

use common::Harness;
use envrt_runtime_core::{AcquireRequest, DriverError, Environment, ExecuteRequest, Lease, RuntimeError};

async fn lease_on(h: &Harness, allowed: &[&str]) -> Lease {
    let mut config = envrt_runtime_core::JsonMap::new();
    config.insert("allowedUsers".into(), serde_json::json!(allowed));
    h.runtime
        .put_environment(Environment::new("env-users", "Users", "local").with_config(config))
        .await
        .unwrap();
    h.runtime
        .acquire_lease(AcquireRequest::new("env-users", "acme"))
        .await
        .unwrap()
}

fn as_user(user: &str, command: &str, args: &[&str]) -> ExecuteRequest {
    let mut request = ExecuteRequest::new(command, args.iter().copied());
    request.user = Some(user.into());
    request
}

async fn refusal(h: &Harness, lease: &Lease, user: &str) -> String {
    let err = common::bounded(h.runtime.execute(&lease.id, as_user(user, "true", &[])))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Driver(DriverError::UserRefused { user: u, .. }) if u == user),
        "{err:?}"
    );
    err.to_string()
}

#[tokio::test]
async fn another_user_is_refused_unless_root_and_listed_and_runs_as_that_user_when_allowed() {
    let h = Harness::new().await;
    let unlisted = h.lease().await;
    if !nix::unistd::geteuid().is_root() {
        assert_eq!(
            refusal(&h, &unlisted, "nobody").await,
            "Cannot run as user \"nobody\": the local driver runs commands as another user only when envrt runs as root."
        );
        h.finish();
        return;
    }
    assert_eq!(
        refusal(&h, &unlisted, "nobody").await,
        "Cannot run as user \"nobody\": the environment config \"allowedUsers\" does not list it."
    );
    let lease = lease_on(
        &h,
        &[
            "nobody",
            "65534:65534",
            "envrt-no-such-user",
            "nobody:envrt-no-such-group",
        ],
    )
    .await;
    // Listed as another spelling only: the list is matched as written.
    assert_eq!(
        refusal(&h, &lease, "65534").await,
        "Cannot run as user \"65534\": the environment config \"allowedUsers\" does not list it."
    );
    assert_eq!(
        refusal(&h, &lease, "envrt-no-such-user").await,
        "Cannot run as user \"envrt-no-such-user\": no such user on this host."
    );
    assert_eq!(
        refusal(&h, &lease, "nobody:envrt-no-such-group").await,
        "Cannot run as user \"nobody:envrt-no-such-group\": no such group on this host."
    );
    // The workspace is 0700 and root's: the user cannot even enter it until opened up.
    assert_eq!(
        refusal(&h, &lease, "nobody").await,
        "Cannot run as user \"nobody\": it cannot reach the working directory (a directory on the way denies it search permission)."
    );
    let opened = h.run(&lease, "chmod", &["0755", "."]).await;
    assert_eq!(opened.exit_code, Some(0));
    for user in ["nobody", "65534:65534"] {
        let r = h
            .execute(
                &lease,
                as_user(
                    user,
                    "sh",
                    &["-c", "id -u; id -g; id -G; touch f 2>/dev/null || echo ro"],
                ),
            )
            .await;
        assert_eq!(
            String::from_utf8_lossy(&r.stdout),
            "65534\n65534\n65534\nro\n",
            "{user}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
    // Without `user`, still root.
    let r = h.run(&lease, "id", &["-u"]).await;
    assert_eq!(r.stdout, b"0\n");
    h.runtime
        .release_lease(&unlisted.id, envrt_runtime_core::LeaseStatus::Released)
        .await
        .unwrap();
    h.runtime
        .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
        .await
        .unwrap();
    h.finish();
}

/// A descriptor the host program holds without close-on-exec (here to a root-only file
/// and to `/`) reaches no command: not one run as root, not one dropped to `nobody`, which
/// could otherwise read the file and list the host's root through it.
#[tokio::test]
async fn a_command_inherits_no_host_descriptor() {
    let h = Harness::new().await;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: needs root");
        h.finish();
        return;
    }
    let secret = std::env::temp_dir().join(format!("envrt-root-only-{}", std::process::id()));
    std::fs::write(&secret, "root only\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // no O_CLOEXEC: every child inherits them unless the driver closes them
    let file = rustix::fs::open(&secret, rustix::fs::OFlags::RDWR, rustix::fs::Mode::empty()).unwrap();
    let root = rustix::fs::open(
        "/",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    use std::os::fd::AsRawFd;
    let (f, d) = (file.as_raw_fd(), root.as_raw_fd());
    let lease = lease_on(&h, &["nobody"]).await;
    assert_eq!(h.run(&lease, "chmod", &["0755", "."]).await.exit_code, Some(0));
    let script = format!(
        "ls -l /proc/self/fd/; [ -e /proc/self/fd/{f} ] && cat <&{f}; [ -e /proc/self/fd/{d} ] && ls /proc/self/fd/{d}/; echo end"
    );
    for user in [None, Some("nobody")] {
        let mut request = ExecuteRequest::new("sh", ["-c", script.as_str()]);
        request.user = user.map(str::to_owned);
        let r = h.execute(&lease, request).await;
        let out = String::from_utf8_lossy(&r.stdout);
        assert_eq!(out.lines().last(), Some("end"), "{user:?}: {out}");
        assert!(!out.contains("root only") && !out.contains("etc\n"), "{user:?}: {out}");
        // `ls` holds its stdio and the directory it lists, nothing else
        let mut beyond_stdio: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once(" -> "))
            .filter(|(left, _)| {
                left.rsplit(' ')
                    .next()
                    .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n > 2))
            })
            .map(|(_, target)| target)
            .collect();
        beyond_stdio.retain(|t| !(t.starts_with("/proc/") && t.ends_with("/fd")));
        assert!(beyond_stdio.is_empty(), "{user:?}: {beyond_stdio:?} in {out}");
    }
    drop((file, root));
    std::fs::remove_file(&secret).unwrap();
    h.runtime
        .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
        .await
        .unwrap();
    h.finish();
}
