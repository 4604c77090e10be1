//! The extension `envrtStartEgress`: a lease's network under a policy (contract section
//! 10). Without it every sandbox has a network namespace of its own with loopback only
//! (`bwrap --unshare-all`). With it the lease gets one network namespace of its own, shared
//! by all its sandboxes, with loopback only and no route out, where a forwarder (the
//! supervisor binary, `envrt-agent --forward`) relays `127.0.0.1:3128` (TCP) to the egress
//! proxy's `proxy.sock` and `127.0.0.1:53` (UDP DNS) to its `dns.sock`, both in a host
//! directory the host made and named; the proxy itself runs on the host, one per lease.
//!
//! - **The namespace.** The worker starts its own binary in the role [`EGRESS_FLAG`] as
//!   root: it unshares a network namespace, brings loopback up, lets unprivileged users
//!   bind low ports in that namespace only (`net.ipv4.ip_unprivileged_port_start = 0`, so
//!   the forwarder can listen on 53), then executes `bwrap` running the forwarder as the
//!   lease's host user, in a session of its own, out of the worker's cgroup: it outlives
//!   the worker, as the lease's supervisor does. Its sandbox keeps the network namespace
//!   and unshares every other one; it sees `/usr` and the root links, its binary and the
//!   host's sockets directory read-only, and its run directory (all three bound by
//!   descriptor: the lease's user may not reach their paths). It is outside every
//!   command's pid namespace, so no command can see or signal it. The record names the
//!   init of its pid namespace, whose end ends it.
//! - **Every sandbox of the lease** (commands, duplex routes, the process supervisor) is
//!   spawned into that namespace (`setns` before `bwrap`, which then unshares every other
//!   namespace but not the network), with `/etc/resolv.conf` naming `127.0.0.1` and the
//!   proxy variables (`http_proxy`, `https_proxy`, `HTTP_PROXY`, `HTTPS_PROXY`,
//!   `no_proxy`, `NO_PROXY`) set unless the request sets them. The namespace's owner is the
//!   host's initial user namespace: nothing in a sandbox can change its interfaces, routes
//!   or sysctls. Programs that ignore the proxy variables reach nothing (fail closed).
//! - **The record** `{root}/.egress-{lease id}/` (0711, the worker's, out of the
//!   workspace): `sockets` (the host's directory), `resolv.conf`, `forwarder` (the boot
//!   id, the forwarder's pid and start time: a recycled pid is never trusted or signalled)
//!   and `run/` (the lease user's, the forwarder's working directory, where its own
//!   control socket `fwd.sock` is: out of every sandbox's reach). A lease
//!   with a record whose forwarder is gone runs nothing (`The network of lease {id} is
//!   not running (its egress forwarder ended); update the lease's network policy to start
//!   it again`) until the extension is called again: never a sandbox with no policy.
//! - **The end.** Release, destroy and expiry kill the forwarder (its namespace goes with
//!   it once no sandbox is in it) and remove the record.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use envrt_driver_agent::egress::credentials::LEASE_CA_BUNDLE;
use envrt_driver_api::DriverError;
use envrt_plugin_protocol::environment::{MAX_LEASE_ENV, MAX_LEASE_ENV_VALUE, StartEgressParams};
use tokio::io::AsyncBufReadExt;

use super::rpc::RpcError;
use super::supervisor::Identity;
use super::uids::Owner;

/// The flag selecting the worker binary's network-namespace role (first argument):
/// `--egress-net UID GID -- FORWARDER ARGS...`.
pub(crate) const EGRESS_FLAG: &str = "--egress-net";
/// Prefix of a lease's egress record in the root.
pub(crate) const RECORD_PREFIX: &str = ".egress-";
/// How long a starting forwarder has to say it listens.
const START_BOUND: Duration = Duration::from_secs(10);
/// How much of a failed forwarder's stderr a refusal quotes.
const WHY_BYTES: usize = 2048;

/// The egress record of the lease at `lease_dir`: `{root}/.egress-{lease id}`.
pub(crate) fn record_dir(lease_dir: &Path) -> Option<PathBuf> {
    let name = lease_dir.file_name()?.to_str()?;
    Some(lease_dir.parent()?.join(format!("{RECORD_PREFIX}{name}")))
}

fn lease_name(lease_dir: &Path) -> String {
    lease_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The role: runs as root, makes the namespace, then becomes the forwarder.
pub(crate) fn run_role(args: &[String]) -> ExitCode {
    let usage = || {
        eprintln!("usage: {EGRESS_FLAG} UID GID -- FORWARDER [ARGS...]");
        ExitCode::from(2)
    };
    let [uid, gid, dashes, program, rest @ ..] = args else {
        return usage();
    };
    let (Ok(uid), Ok(gid), "--") = (uid.parse::<u32>(), gid.parse::<u32>(), dashes.as_str()) else {
        return usage();
    };
    if let Err(e) = make_namespace() {
        eprintln!("envrt sandbox egress: {e}");
        return ExitCode::from(126);
    }
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(program)
        .args(rest)
        .env_clear()
        .uid(uid)
        .gid(gid)
        .exec();
    eprintln!("envrt sandbox egress: cannot run {program}: {e}");
    ExitCode::from(126)
}

/// A new network namespace for this process: loopback up, low ports open to its users.
fn make_namespace() -> Result<(), String> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("cannot make a network namespace: {e}"))?;
    loopback_up().map_err(|e| format!("cannot bring the loopback interface up: {e}"))?;
    // Read through this process's own namespace (net sysctls are per namespace).
    std::fs::write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0")
        .map_err(|e| format!("cannot open low ports in the lease's namespace: {e}"))
}

#[allow(unsafe_code)]
fn loopback_up() -> std::io::Result<()> {
    use nix::libc;
    // SAFETY: plain system calls on a socket this function owns and an `ifreq` it
    // zero-initialises and names ("lo", NUL-terminated) before each ioctl.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req);
        if rc == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req);
        }
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 { Err(error) } else { Ok(()) }
    }
}

/// What a sandbox of a lease under a policy joins: its namespace and resolver, and when
/// its proxy brokers credentials, the CA bundle and the lease's variables.
pub(crate) struct Joined {
    pub(crate) netns: OwnedFd,
    pub(crate) resolv: OwnedFd,
    /// The CA bundle the host's proxy wrote, opened from the host's sockets directory.
    pub(crate) ca_bundle: Option<OwnedFd>,
    /// Variables every sandbox of the lease gets unless the request sets them.
    pub(crate) env: Vec<(String, String)>,
}

/// Makes `bwrap` options (built by the sandbox for a lease without a network) those of a
/// sandbox that joins the lease's namespace: every namespace but the network unshared,
/// and the lease's resolver bound read-only at `/etc/resolv.conf` (before the final
/// `--remount-ro /`, which must stay where it is).
pub(crate) fn join_args(args: &mut Vec<String>, joined: &Joined) {
    if let Some(at) = args.iter().position(|a| a == "--unshare-all") {
        args.splice(
            at..=at,
            [
                "--unshare-user",
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-uts",
                "--unshare-cgroup-try",
            ]
            .map(str::to_owned),
        );
    }
    if let Some(at) = args.iter().position(|a| a == "--remount-ro") {
        let mut binds = vec![
            "--ro-bind-fd".to_owned(),
            joined.resolv.as_raw_fd().to_string(),
            "/etc/resolv.conf".to_owned(),
        ];
        if let Some(bundle) = &joined.ca_bundle {
            binds.extend([
                "--ro-bind-fd".to_owned(),
                bundle.as_raw_fd().to_string(),
                LEASE_CA_BUNDLE.to_owned(),
            ]);
        }
        args.splice(at..at, binds);
    }
}

/// Writes (or removes) the record's bundle name and variables from `params`.
fn write_extras(record: &Path, params: &StartEgressParams) -> std::io::Result<()> {
    match &params.ca_bundle {
        Some(name) => std::fs::write(record.join(CA_RECORD), name)?,
        None => remove_if_there(&record.join(CA_RECORD))?,
    }
    if params.env.is_empty() {
        remove_if_there(&record.join(ENV_RECORD))
    } else {
        let pairs: Vec<(&String, &String)> = params.env.iter().collect();
        std::fs::write(record.join(ENV_RECORD), serde_json::to_vec(&pairs)?)
    }
}

fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The text of the refusal for a lease whose forwarder is gone.
fn not_running(lease_dir: &Path) -> String {
    format!(
        "The network of lease {} is not running (its egress forwarder ended); update the lease's network policy to start it again",
        lease_name(lease_dir)
    )
}

/// The namespace and resolver of the lease at `lease_dir`: `None` for a lease without a
/// policy, an error for one whose forwarder is gone (nothing runs without its policy).
pub(crate) fn joined(lease_dir: &Path) -> std::io::Result<Option<Joined>> {
    let Some(record) = record_dir(lease_dir) else {
        return Ok(None);
    };
    if !record.exists() {
        return Ok(None);
    }
    let Some(forwarder) = forwarder(&record) else {
        return Err(std::io::Error::other(not_running(lease_dir)));
    };
    let open = |path: &Path| {
        rustix::fs::open(
            path,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(std::io::Error::from)
    };
    let netns = open(Path::new(&format!("/proc/{}/ns/net", forwarder.pid)))?;
    // The pid was checked before the open: checked again after, so a recycled pid's
    // namespace is never joined.
    if !forwarder.alive() {
        return Err(std::io::Error::other(not_running(lease_dir)));
    }
    let resolv = open(&record.join("resolv.conf"))?;
    let ca_bundle = match std::fs::read_to_string(record.join(CA_RECORD)) {
        Ok(name) => Some(open_bundle(&record, &name).map_err(|why| {
            std::io::Error::other(format!(
                "The CA bundle of lease {} cannot be opened: {why}",
                lease_name(lease_dir)
            ))
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let env = match std::fs::read(record.join(ENV_RECORD)) {
        Ok(json) => serde_json::from_slice::<Vec<(String, String)>>(&json).map_err(std::io::Error::other)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(Some(Joined {
        netns,
        resolv,
        ca_bundle,
        env,
    }))
}

/// Opens the bundle `name` in the record's sockets directory: a regular file, never
/// through a link.
fn open_bundle(record: &Path, name: &str) -> Result<OwnedFd, String> {
    let sockets = std::fs::read_to_string(record.join("sockets")).map_err(|e| e.to_string())?;
    let path = Path::new(&sockets).join(name);
    let fd = rustix::fs::open(
        &path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NOFOLLOW,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| format!("{}: {e}", path.display()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(format!("{} is not a regular file", path.display()));
    }
    Ok(fd)
}

/// The record's file naming the lease's CA bundle in the sockets directory.
const CA_RECORD: &str = "ca-bundle";
/// The record's file holding the lease's variables (JSON pairs).
const ENV_RECORD: &str = "env.json";

/// `caBundle`, checked: a plain file name (the file is in `socketDir`).
fn check_bundle_name(name: &str) -> Result<(), RpcError> {
    let plain = !name.is_empty() && name.len() <= 255 && !name.contains(['/', '\0']) && name != "." && name != "..";
    if plain {
        Ok(())
    } else {
        Err(RpcError::invalid_params(format!(
            "caBundle {name:?} is not the name of a file in socketDir"
        )))
    }
}

/// `env`, checked: at most [`MAX_LEASE_ENV`] shell variable names, values of at most
/// [`MAX_LEASE_ENV_VALUE`] bytes without NUL.
fn check_env(env: &std::collections::BTreeMap<String, String>) -> Result<(), RpcError> {
    if env.len() > MAX_LEASE_ENV {
        return Err(RpcError::invalid_params(format!(
            "env has {} variables; at most {MAX_LEASE_ENV} are allowed",
            env.len()
        )));
    }
    for (name, value) in env {
        let mut chars = name.chars();
        let named = name.len() <= 128
            && chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
        if !named {
            return Err(RpcError::invalid_params(format!(
                "env name {name:?} is not a variable name"
            )));
        }
        if value.len() > MAX_LEASE_ENV_VALUE || value.contains('\0') {
            return Err(RpcError::invalid_params(format!(
                "env value of {name} holds a NUL or is longer than {MAX_LEASE_ENV_VALUE} bytes"
            )));
        }
    }
    Ok(())
}

/// The record's forwarder, while it runs (this boot, the same start time).
fn forwarder(record: &Path) -> Option<Identity> {
    let text = std::fs::read_to_string(record.join("forwarder")).ok()?;
    let [boot, pid, start] = text.split_whitespace().collect::<Vec<_>>()[..] else {
        return None;
    };
    if boot != super::supervisor::boot_id() {
        return None;
    }
    let named = Identity::new(pid.parse().ok()?, start.parse().ok()?);
    named.alive().then_some(named)
}

/// Ends the lease's forwarder, if one runs, and removes its record.
pub(crate) fn end(lease_dir: &Path) {
    let Some(record) = record_dir(lease_dir) else { return };
    if let Some(forwarder) = forwarder(&record) {
        forwarder.kill();
    }
    let _ = std::fs::remove_dir_all(&record);
}

/// The host's sockets directory, checked: absolute, a directory (not a link) of the
/// worker's own user that nobody else may write.
fn check_sockets(dir: &str) -> Result<PathBuf, RpcError> {
    let path = PathBuf::from(dir);
    let bad = |why: &str| RpcError::invalid_params(format!("socketDir {dir:?} {why}"));
    if !path.is_absolute() {
        return Err(bad("is not absolute"));
    }
    let meta = std::fs::symlink_metadata(&path).map_err(|_| bad("does not exist"))?;
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(bad("is not a directory of the worker's user that only it may write"));
    }
    Ok(path)
}

/// Serves `envrtStartEgress` (advertised only with the supervisor binary, which forwards).
pub(crate) async fn handle(worker: &super::Worker, params: serde_json::Value) -> Result<serde_json::Value, RpcError> {
    let method = envrt_plugin_protocol::methods::START_EGRESS;
    let p: StartEgressParams = super::parse(method, params)?;
    let dir = super::lease_dir(worker, &p.lease)?;
    let Some(agent) = worker.agent.as_deref() else {
        return Err(RpcError::new(
            envrt_plugin_protocol::codes::METHOD_NOT_FOUND,
            format!("Unknown method: {method}"),
        ));
    };
    let exe = std::env::current_exe().map_err(|e| DriverError::io("Finding the worker's own binary", e))?;
    let owner = worker.leases.owner(&dir)?;
    start(&exe, &worker.sandbox, agent, &dir, owner, p).await
}

/// `envrtStartEgress`: starts the lease's forwarder in a namespace of its own, or answers
/// at once when it runs for the same sockets.
pub(crate) async fn start(
    worker_exe: &Path,
    sandbox: &super::sandbox::Sandbox,
    agent: &Path,
    lease_dir: &Path,
    owner: Owner,
    params: StartEgressParams,
) -> Result<serde_json::Value, RpcError> {
    let sockets = check_sockets(&params.socket_dir)?;
    if let Some(name) = &params.ca_bundle {
        check_bundle_name(name)?;
    }
    check_env(&params.env)?;
    let lease = lease_name(lease_dir);
    let record = record_dir(lease_dir).ok_or_else(|| RpcError::invalid_params("the lease directory has no name"))?;
    let io = |what: &str, e: std::io::Error| RpcError::from(DriverError::io(format!("{what} {}", record.display()), e));
    let same_sockets = std::fs::read_to_string(record.join("sockets")).ok().as_deref() == sockets.to_str();
    if same_sockets && forwarder(&record).is_some() {
        // The forwarder runs on: what new sandboxes get is replaced (a proxy started anew
        // wrote a new bundle).
        write_extras(&record, &params).map_err(|e| io("Writing", e))?;
        return Ok(serde_json::json!({ "started": false }));
    }
    end(lease_dir);
    std::fs::DirBuilder::new()
        .mode(0o711)
        .create(&record)
        .map_err(|e| io("Creating", e))?;
    std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o711)).map_err(|e| io("Opening", e))?;
    std::fs::write(record.join("sockets"), sockets.as_os_str().as_encoded_bytes()).map_err(|e| io("Writing", e))?;
    std::fs::write(record.join("resolv.conf"), "nameserver 127.0.0.1\noptions ndots:0\n")
        .map_err(|e| io("Writing", e))?;
    std::fs::set_permissions(record.join("resolv.conf"), std::fs::Permissions::from_mode(0o644))
        .map_err(|e| io("Writing", e))?;
    write_extras(&record, &params).map_err(|e| io("Writing", e))?;
    if params.ca_bundle.is_some() {
        // Checked once here, so a lease never starts with a bundle its sandboxes cannot get.
        let name = params.ca_bundle.as_deref().unwrap_or_default();
        if let Err(why) = open_bundle(&record, name) {
            let _ = std::fs::remove_dir_all(&record);
            return Err(RpcError::invalid_params(format!(
                "caBundle {name:?} cannot be opened: {why}"
            )));
        }
    }
    let run = record.join("run");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&run)
        .map_err(|e| io("Creating", e))?;
    let (uid, gid) = owner
        .0
        .unwrap_or_else(|| (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()));
    owner.hand_over(&run).map_err(|e| io("Handing", e))?;
    // Bound into the forwarder's sandbox by descriptor: bwrap runs as the lease's user,
    // who may not reach these paths by name.
    let opened = |path: &Path, flags: rustix::fs::OFlags| {
        rustix::fs::open(
            path,
            flags | rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| RpcError::from(DriverError::io(format!("Opening {}", path.display()), e.into())))
    };
    let dir = rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW;
    let (agent_fd, sockets_fd, run_fd) = (
        opened(agent, rustix::fs::OFlags::empty())?,
        opened(&sockets, dir)?,
        opened(&run, dir)?,
    );
    let (bwrap, options) = sandbox.forwarder_command(agent_fd.as_raw_fd(), sockets_fd.as_raw_fd(), run_fd.as_raw_fd());
    let inside = |name: &str| format!("{}/{name}", super::sandbox::FORWARDER_SOCKETS);
    let mut command = std::process::Command::new(worker_exe);
    command
        .arg(EGRESS_FLAG)
        .arg(uid.to_string())
        .arg(gid.to_string())
        .arg("--")
        .arg(bwrap)
        .args(options)
        .arg(super::sandbox::FORWARDER_AGENT)
        // relative to its working directory, its run directory
        .arg("--socket")
        .arg("fwd.sock")
        .current_dir(&run)
        .arg("--forward")
        .arg(format!(
            "tcp:{}={}",
            envrt_driver_agent::egress::PROXY_ADDRESS,
            inside(envrt_driver_agent::egress::PROXY_SOCKET)
        ))
        .arg("--forward")
        .arg(format!(
            "dns:{}={}",
            envrt_driver_agent::egress::DNS_ADDRESS,
            inside(envrt_driver_agent::egress::DNS_SOCKET)
        ))
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    super::fds::inherit_only(
        &mut command,
        &[agent_fd.as_raw_fd(), sockets_fd.as_raw_fd(), run_fd.as_raw_fd()],
    );
    let escape = super::sandbox::escape_cgroup();
    super::fds::detach(&mut command, escape.as_ref().map(|fd| fd.as_raw_fd()));
    let mut child = tokio::process::Command::from(command)
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| DriverError::io(format!("Starting the egress forwarder of lease {lease}"), e))?;
    drop((escape, agent_fd, sockets_fd, run_fd));
    let (stdout, mut stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let mut line = String::new();
    let said = tokio::time::timeout(START_BOUND, tokio::io::BufReader::new(stdout).read_line(&mut line)).await;
    // The role became bwrap; the forwarder is the init of bwrap's pid namespace, whose
    // end ends everything in it (and then bwrap).
    let pid = child.id().and_then(super::sandbox::ns_init).unwrap_or(0);
    if matches!(said, Ok(Ok(_))) && line.starts_with("envrt-agent listening on ") {
        let Some(identity) = Identity::of(pid) else {
            return Err(
                DriverError::other(format!("The egress forwarder of lease {lease} ended as it started")).into(),
            );
        };
        std::fs::write(
            record.join("forwarder"),
            format!("{} {} {}\n", super::supervisor::boot_id(), identity.pid, identity.start),
        )
        .map_err(|e| io("Writing", e))?;
        // Nobody waits for it: its stderr drains to nowhere, and it is reaped as an orphan
        // once the worker is gone, or by this task while the worker runs.
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
            let _ = child.wait().await;
        });
        return Ok(serde_json::json!({ "started": true }));
    }
    // bwrap's end would not end what runs in its sandbox: its init first.
    if let Some(init) = Identity::of(pid) {
        init.kill();
    }
    let _ = child.start_kill();
    let mut why = Vec::new();
    let _ = tokio::time::timeout(
        START_BOUND,
        tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::AsyncReadExt::take(stderr, WHY_BYTES as u64), &mut why),
    )
    .await;
    let _ = child.wait().await;
    let _ = std::fs::remove_dir_all(&record);
    let why = String::from_utf8_lossy(&why).trim().to_owned();
    let why = match (said, why.is_empty()) {
        (_, false) => why,
        (Err(_), true) => format!("it did not listen within {} s", START_BOUND.as_secs()),
        (Ok(_), true) => format!("it said {:?}", line.trim_end()),
    };
    Err(DriverError::other(format!("The egress forwarder of lease {lease} did not start: {why}")).into())
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
