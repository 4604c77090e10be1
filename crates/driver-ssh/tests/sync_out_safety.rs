//! Sync out from a hostile remote side, against real `sshd`s: a remote account's
//! `~/.ssh/rc` that writes its own archive onto the channel, set-uid files made on the
//! remote host, sparse files and the per-entry byte bound.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use envrt_runtime_core::sync::{SyncFile, SyncOperation};
use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeaseStatus};

use common::{Server, acquire, runtime, server};

fn state_dir() -> PathBuf {
    let env = std::env::var("ENVRT_TEST_SSH_ENV").unwrap_or_else(|_| "/var/lib/envrt-test-ssh/env".into());
    Path::new(&env).parent().unwrap().to_path_buf()
}

/// A second `sshd` on a free port with the test server's keys and OpenSSH's default
/// `PermitUserRC yes` (a remote host as most are configured); killed on drop.
struct RcServer {
    child: Child,
    /// Its configuration, pid file and log (removed with it).
    _dir: tempfile::TempDir,
    server: Server,
}

impl Drop for RcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rc_server(base: &Server) -> RcServer {
    let state = state_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let shared = std::fs::read_to_string(state.join("sshd_config")).unwrap();
    let mut config: Vec<String> = shared
        .lines()
        .filter(|l| !l.starts_with("Port ") && !l.starts_with("PidFile ") && !l.starts_with("PermitUserRC "))
        .map(str::to_owned)
        .collect();
    config.push(format!("Port {port}"));
    config.push(format!("PidFile {}/sshd.pid", dir.path().display()));
    config.push("PermitUserRC yes".into());
    let config_path = dir.path().join("sshd_config");
    std::fs::write(&config_path, config.join("\n") + "\n").unwrap();
    let child = Command::new("/usr/sbin/sshd")
        .arg("-D")
        .arg("-f")
        .arg(&config_path)
        .arg("-E")
        .arg(dir.path().join("sshd.log"))
        .spawn()
        .unwrap();
    let key = std::fs::read_to_string(state.join("ssh_host_ed25519_key.pub")).unwrap();
    let key: Vec<&str> = key.split_whitespace().take(2).collect();
    let known = dir.path().join("known_hosts");
    std::fs::write(&known, format!("[127.0.0.1]:{port} {}\n", key.join(" "))).unwrap();
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let server = Server {
        host: "127.0.0.1".into(),
        port,
        user: base.user.clone(),
        key: base.key.clone(),
        known_hosts: known.to_string_lossy().into_owned(),
    };
    RcServer {
        child,
        _dir: dir,
        server,
    }
}

/// The remote user's `~/.ssh/rc`: on a session of a server whose port has a marker file
/// (which a lease command creates), it removes the marker and writes the archive planted
/// for that port onto the channel. Removed on drop.
struct PlantedRc {
    path: PathBuf,
}

impl Drop for PlantedRc {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn plant_rc(server: &Server) -> PlantedRc {
    let home = PathBuf::from(server.home());
    let meta = std::fs::metadata(&home).unwrap();
    let ssh = home.join(".ssh");
    if !ssh.exists() {
        std::fs::create_dir(&ssh).unwrap();
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&ssh, Some(meta.uid()), Some(meta.gid())).unwrap();
    }
    let path = ssh.join("rc");
    std::fs::write(
        &path,
        "p=${SSH_CONNECTION##* }\nm=/tmp/envrt-rc-marker-$p\n\
         if [ -e \"$m\" ]; then rm -f \"$m\"; cat \"/tmp/envrt-rc-archive-$p\"; fi\n",
    )
    .unwrap();
    std::os::unix::fs::chown(&path, Some(meta.uid()), Some(meta.gid())).unwrap();
    PlantedRc { path }
}

async fn runtime_on(server: &Server, root: &str) -> EnvironmentRuntime {
    let driver = std::sync::Arc::new(
        envrt_driver_ssh::SshDriver::new(envrt_driver_ssh::SshConfig {
            root: root.to_owned(),
            ..Default::default()
        })
        .unwrap(),
    );
    let rt = EnvironmentRuntime::new();
    rt.register_driver(driver);
    rt.put_environment(Environment::new("env-ssh", "Remote", "ssh").with_config(server.config()))
        .await
        .unwrap();
    rt
}

/// Every path below `dir` with its mode and content, links not followed.
fn listing(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            let content = if meta.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            out.push((e.path(), meta.mode(), content));
            if meta.is_dir() {
                pending.push(e.path());
            }
        }
    }
    out.sort();
    out
}

fn op(files: Vec<SyncFile>) -> [SyncOperation; 1] {
    [SyncOperation {
        operation_id: "out".into(),
        files,
        post_upload_commands: vec![],
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_written_by_a_remote_rc_file_leaves_the_host_untouched() {
    let Some(base) = server() else { return };
    let rc = rc_server(&base);
    let _planted = plant_rc(&rc.server);
    let host = tempfile::tempdir().unwrap();
    let victim = host.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(victim.join("keep"), b"keep").unwrap();
    std::fs::create_dir(host.path().join("place")).unwrap();
    // The archive the rc file sends ahead of tar's: a link to the victim, then a file and
    // a chmod-ed directory through it.
    let mut hostile = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    hostile.append_data(&mut h, "src/", std::io::empty()).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    hostile.append_link(&mut h, "src/l", &victim).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(5);
    hostile.append_data(&mut h, "src/l/evil", &b"evil\n"[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o777);
    h.set_size(0);
    hostile.append_data(&mut h, "src/l/", std::io::empty()).unwrap();
    let archive = format!("/tmp/envrt-rc-archive-{}", rc.server.port);
    std::fs::write(&archive, hostile.into_inner().unwrap()).unwrap();
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = listing(host.path());

    let root = common::unique_root("rc");
    let rt = runtime_on(&rc.server, &root).await;
    let lease = rt.acquire_lease(AcquireRequest::new("env-ssh", "acme")).await.unwrap();
    // The first capability resolution for a host probes it for the process supervisor (a
    // session of its own, once per driver): done before the rc file is armed, so that the
    // armed session is the sync out's.
    rt.resolve_capabilities(&lease.id).await.unwrap();
    // The lease's command (as the remote account) arms the rc file for the next session.
    let armed = rt
        .execute(
            &lease.id,
            ExecuteRequest::new(
                "sh",
                [
                    "-c".to_string(),
                    format!(
                        "mkdir src && echo hi > src/a && touch /tmp/envrt-rc-marker-{}",
                        rc.server.port
                    ),
                ],
            ),
        )
        .await
        .unwrap();
    assert_eq!(armed.exit_code, Some(0));
    let target = host.path().join("place/out");
    let err = rt
        .sync_out(
            &lease.id,
            &op(vec![SyncFile::directory("src", target.to_str().unwrap())]),
        )
        .await
        .unwrap_err();
    assert!(
        !Path::new(&format!("/tmp/envrt-rc-marker-{}", rc.server.port)).exists(),
        "the rc file ran for the sync out's session"
    );
    assert_eq!(listing(host.path()), before, "nothing on the host changed");
    assert_eq!(
        err.to_string(),
        format!(
            "Entry \"l -> {}\" would be written outside the target \"{}\".",
            victim.display(),
            target.display()
        )
    );
    // The next sync (no rc archive) is the source's own.
    rt.sync_out(
        &lease.id,
        &op(vec![SyncFile::directory("src", target.to_str().unwrap())]),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(target.join("a")).unwrap(), b"hi\n");
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    let _ = std::fs::remove_file(&archive);
    let _ = std::fs::remove_dir_all(format!("{}/{root}", rc.server.home()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_sshd_runs_no_user_rc_file() {
    let Some(server) = server() else { return };
    let _planted = plant_rc(&server);
    let marker = format!("/tmp/envrt-rc-marker-{}", server.port);
    let archive = format!("/tmp/envrt-rc-archive-{}", server.port);
    std::fs::write(&archive, "RC-RAN\n").unwrap();
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (_driver, rt, _root) = runtime(&server, "norc", |_| {}).await;
    let lease = acquire(&rt).await;
    // Owned by the remote account, so an rc file that ran could remove it.
    std::fs::write(&marker, "").unwrap();
    let home = std::fs::metadata(server.home()).unwrap();
    std::os::unix::fs::chown(&marker, Some(home.uid()), Some(home.gid())).unwrap();
    let r = rt
        .execute(&lease.id, ExecuteRequest::new("echo", ["hi"]))
        .await
        .unwrap();
    let rc_ran = !Path::new(&marker).exists();
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(&archive);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "hi\n");
    assert!(!rc_ran, "PermitUserRC is on: ~/.ssh/rc ran");
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_bits_made_on_the_remote_host_are_cleared_unless_kept() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "bits", |_| {}).await;
    let lease = acquire(&rt).await;
    let r = rt
        .execute(
            &lease.id,
            ExecuteRequest::new(
                "sh",
                [
                    "-c",
                    "mkdir -p d/shared && cp /bin/true d/su && chmod 4755 d/su && chmod 2777 d/shared && chmod 1777 d",
                ],
            ),
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    let host = tempfile::tempdir().unwrap();
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    let out = host.path().join("out");
    rt.sync_out(&lease.id, &op(vec![SyncFile::directory("d", out.to_str().unwrap())]))
        .await
        .unwrap();
    assert_eq!(
        (mode(&out), mode(&out.join("shared")), mode(&out.join("su"))),
        (0o777, 0o777, 0o755)
    );
    let kept = host.path().join("kept");
    let mut file = SyncFile::directory("d", kept.to_str().unwrap());
    file.keep_special_bits = Some(true);
    rt.sync_out(&lease.id, &op(vec![file])).await.unwrap();
    assert_eq!(
        (mode(&kept), mode(&kept.join("shared")), mode(&kept.join("su"))),
        (0o1777, 0o2777, 0o4755)
    );
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_gigabyte_comes_out_sparse_and_a_small_bound_is_refused() {
    let Some(server) = server() else { return };
    let (_driver, rt, _root) = runtime(&server, "sparse", |_| {}).await;
    let lease = acquire(&rt).await;
    let r = rt
        .execute(
            &lease.id,
            ExecuteRequest::new(
                "sh",
                [
                    "-c",
                    "truncate -s 1G big && mkdir d && head -c 2097152 /dev/urandom > d/two",
                ],
            ),
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    let host = tempfile::tempdir().unwrap();
    let big = host.path().join("big");
    let result = rt
        .sync_out(&lease.id, &op(vec![SyncFile::file("big", big.to_str().unwrap())]))
        .await
        .unwrap();
    assert_eq!(result.operations[0].bytes_transferred, 1 << 30);
    let meta = std::fs::metadata(&big).unwrap();
    assert_eq!(meta.len(), 1 << 30);
    assert!(meta.blocks() * 512 < 1 << 20, "allocated {} bytes", meta.blocks() * 512);
    let out = host.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("old"), b"old").unwrap();
    let mut file = SyncFile::directory("d", out.to_str().unwrap());
    file.max_bytes = Some(1 << 20);
    let err = rt.sync_out(&lease.id, &op(vec![file])).await.unwrap_err();
    assert_eq!(err.to_string(), "Sync out of \"d\" exceeds the limit of 1048576 bytes.");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    assert_eq!(std::fs::read(out.join("old")).unwrap(), b"old");
    let mut names: Vec<_> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["big", "out"], "no staging left behind");
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
}
