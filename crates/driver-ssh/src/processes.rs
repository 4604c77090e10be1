//! Persistent process sessions on the SSH driver (contract section 9): one supervisor
//! (`envrt-agent`) per lease on the remote host, holding the lease's processes, their
//! replay buffers and exit statuses, reached from this host through a unix socket that the
//! master connection forwards. Every verb is one request to it
//! ([`envrt_driver_agent::process_sessions!`]).
//!
//! - **Where it can run** ([`SshDriver::process_support`], probed once per host and
//!   remembered until its connection is replaced): this host's supervisor binary ([`SshConfig::agent`](crate::SshConfig::agent),
//!   else `ENVRT_AGENT`, next to the executable, `PATH`) is built for the remote
//!   architecture (its ELF machine against `uname -m`), the host has `setsid` and `flock`,
//!   the socket path fits, and the binary, copied over the master when missing (see
//!   [`supervisor`]), runs there. Only then does a lease on that host get
//!   `persistentProcessSessions`.
//! - **Started once per lease**, on the first spawn, under the lease's remote `flock`,
//!   detached from the channel (`setsid`, no descriptor of the channel), with `--subreaper`,
//!   in the workspace with a command's environment (`HOME` = the workspace): it outlives the
//!   connection and the program that started it.
//! - **Reached through a forward**: `ssh -O forward -L LOCAL:REMOTE` on the master (the
//!   mux protocol's forward request), `LOCAL` in a private (`0700`) directory of the lease
//!   under the control directory, one socket per master connection (a restarted program or
//!   a replaced master adds its own; nothing is shared between two programs' masters).
//! - **Ended with the lease**: release, destroy and `gc` kill the supervisor and everything
//!   below it (see `remote::AGENT_KILL_FN`), remove its socket, cancel this program's
//!   forward and remove the lease's forward directory.
//!
//! The supervisor is inside the boundary (the remote account) and as untrusted as the
//! command: the agent's client bounds its frames, and nothing it says is trusted beyond
//! the lease.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use envrt_driver_agent::{AgentHost, AgentSpawnRequest, Client, ClientError, lift, request_of};
use envrt_driver_api::process::SpawnRequest;
use envrt_driver_api::sync::confine_to_workspace;
use envrt_driver_api::{DriverError, LeaseContext};
use openssh::{ForwardType, Session, Socket};

use crate::SshDriver;
use crate::connection::Host;
use crate::driver::Place;
use crate::remote::{self, short_hash};

pub(crate) mod supervisor;

use supervisor::{Binary, Site};

/// How long connecting to the supervisor (through the forward, hello included) may take.
const CONNECT_BOUND: Duration = Duration::from_secs(15);
/// How long one of the supervisor's remote scripts may take (the probe runs the remote
/// binary, which the remote account could make hang; the start waits at most 40 s).
const SCRIPT_BOUND: Duration = Duration::from_secs(60);
/// How long copying the supervisor binary may take.
const COPY_BOUND: Duration = Duration::from_secs(600);

/// Runs `script` on `host` (with `input` on its stdin) for `what` within `bound`: its exit
/// code and outputs, or why not.
async fn bounded_run(
    host: &Host,
    what: &str,
    script: &str,
    input: &[u8],
    bound: Duration,
) -> Result<(i32, Vec<u8>, Vec<u8>), DriverError> {
    match tokio::time::timeout(bound, host.run(script, input)).await {
        Ok(result) => result,
        Err(_) => Err(host.unavailable(
            &format!("cannot {what}"),
            format!("no answer within {} s", bound.as_secs()),
        )),
    }
}

/// [`bounded_run`] with no stdin, failing unless the script exits 0.
async fn bounded_ok(host: &Host, what: &str, script: &str) -> Result<Vec<u8>, DriverError> {
    let (code, out, err) = bounded_run(host, what, script, &[], SCRIPT_BOUND).await?;
    if code == 0 {
        Ok(out)
    } else {
        Err(DriverError::other(format!(
            "cannot {what} on {}: exit code {code}: {}",
            host.target().shown(),
            String::from_utf8_lossy(&err).trim()
        )))
    }
}

/// A host's supervisor site as probed: fit (`Ok`), or the exact text of why not. A probe
/// that could not reach the host is not remembered.
pub(crate) type SiteSlot = tokio::sync::Mutex<Option<Result<Arc<Site>, String>>>;

envrt_driver_agent::process_sessions!(SshDriver);

impl SshDriver {
    /// This host's supervisor binary, found and hashed once (a failure is not remembered).
    async fn binary(&self) -> Result<Binary, String> {
        let mut slot = self.agent_binary.lock().await;
        if let Some(binary) = slot.as_ref() {
            return Ok(binary.clone());
        }
        let configured = self.config.agent.clone();
        let found =
            tokio::task::spawn_blocking(move || supervisor::local_binary(configured.as_deref()).map(|(b, _)| b))
                .await
                .unwrap_or_else(|e| Err(format!("the supervisor lookup failed: {e}")))?;
        *slot = Some(found.clone());
        Ok(found)
    }

    /// Whether leases on `host` can have persistent process sessions: `Ok` with where the
    /// supervisor runs from, `Err(Ok(text))` with the exact reason they cannot, or
    /// `Err(Err(error))` when the host could not be asked. Neither that nor this host's
    /// binary missing is remembered.
    async fn site(&self, host: &Arc<Host>) -> Result<Arc<Site>, Result<String, DriverError>> {
        let mut slot = host.site.lock().await;
        if let Some(known) = slot.as_ref() {
            return known.clone().map_err(Ok);
        }
        // This host's binary missing is not remembered for the host: one built later counts.
        let binary = self.binary().await.map_err(Ok)?;
        let found = self.probe_site(host, binary).await;
        match found {
            Ok(site) => {
                *slot = Some(Ok(site.clone()));
                Ok(site)
            }
            Err(Ok(text)) => {
                *slot = Some(Err(text.clone()));
                Err(Ok(text))
            }
            Err(Err(error)) => Err(Err(error)),
        }
    }

    async fn probe_site(&self, host: &Arc<Host>, binary: Binary) -> Result<Arc<Site>, Result<String, DriverError>> {
        let shown = host.target().shown();
        let ask = |name: String| async move {
            let out = bounded_ok(host, "probe for the process supervisor", &supervisor::probe(&name))
                .await
                .map_err(Err)?;
            supervisor::parse_probe(&String::from_utf8_lossy(&out))
                .ok_or_else(|| Ok(supervisor::unrecognised(&host.target().shown(), &out)))
        };
        let mut name = binary.name.clone();
        let mut probe = ask(name.clone()).await?;
        if let Some(text) = supervisor::unfit(&shown, &binary, &probe) {
            return Err(Ok(text));
        }
        if !probe.binary {
            let path = binary.path.clone();
            let bytes = tokio::task::spawn_blocking(move || std::fs::read(path))
                .await
                .map_err(|e| Ok(format!("the supervisor read failed: {e}")))?
                .map_err(|e| {
                    Ok(format!(
                        "Process supervisor \"{}\" cannot be read: {e}.",
                        binary.path.display()
                    ))
                })?;
            // Named by what is sent, should the file have been rebuilt meanwhile.
            name = supervisor::remote_name(&bytes);
            let (code, _, err) = bounded_run(
                host,
                "copy the process supervisor",
                &supervisor::install(&name, bytes.len()),
                &bytes,
                COPY_BOUND,
            )
            .await
            .map_err(Err)?;
            if code != 0 {
                return Err(Ok(supervisor::not_copied(&shown, code, &err)));
            }
            probe = ask(name.clone()).await?;
        }
        let binary_path = format!("{}/{}/{name}", probe.home, remote::AGENT_CACHE);
        if !probe.binary || probe.fails.is_some() {
            // A copy that does not run is no use to anyone: not left in the account's cache.
            let _ = bounded_ok(host, "remove the process supervisor", &supervisor::uninstall(&name)).await;
            return Err(Ok(supervisor::does_not_run(
                &shown,
                &binary_path,
                probe.fails.as_deref().unwrap_or("it is not there"),
            )));
        }
        Ok(Arc::new(Site {
            home: probe.home,
            binary: binary_path,
            boot_time: probe.boot_time,
        }))
    }

    /// Whether leases on the host of `target` can have persistent process sessions
    /// (`envrt doctor`): `Ok`, or the exact text of why not (this host's supervisor binary
    /// is missing or built for another architecture, the remote host lacks `setsid` or
    /// `flock`, the copied binary does not run there, the host cannot be reached). The
    /// first call for a host copies the binary there when it is missing.
    pub async fn process_support(&self, target: &crate::SshTarget) -> Result<(), String> {
        let host = self.host(target);
        match self.site(&host).await {
            Ok(_) => Ok(()),
            Err(Ok(text)) => Err(text),
            Err(Err(error)) => Err(error.to_string()),
        }
    }

    /// Whether `host` serves persistent process sessions (for capability resolution).
    pub(crate) async fn serves_processes(&self, host: &Arc<Host>) -> bool {
        self.site(host).await.is_ok()
    }

    /// The lease's supervisor site, as the process verbs need it.
    async fn site_for(&self, host: &Arc<Host>) -> Result<Arc<Site>, DriverError> {
        self.site(host).await.map_err(|e| match e {
            Ok(message) => DriverError::Unavailable { message, source: None },
            Err(error) => error,
        })
    }

    /// This host's private directory of the lease's forwards.
    fn forward_dir(&self, host: &Host, lease_dir: &str) -> PathBuf {
        let key = format!("{}:{lease_dir}", host.target().shown());
        self.control_dir.join(format!("p-{}", short_hash(key.as_bytes())))
    }

    /// The local end of the lease's forward on the master `session`.
    fn forward_path(&self, host: &Host, lease_dir: &str, session: &Session) -> PathBuf {
        let master = short_hash(session.control_socket().as_os_str().as_encoded_bytes());
        self.forward_dir(host, lease_dir).join(master)
    }

    /// A connection to the lease's supervisor through this program's forward (added on the
    /// current master when missing); the error says why not. A master that stopped
    /// answering is replaced once.
    async fn connect(&self, lease: &str, place: &Place, socket: &str) -> Result<Client, DriverError> {
        let mut last = String::new();
        for _ in 0..2 {
            let session = place.host.session().await?;
            let local = self.forward_path(&place.host, &place.lease_dir, &session);
            if !local.exists() {
                if let Err(error) = forward(&session, &local, socket).await {
                    if !place.host.alive(&session).await {
                        place.host.forget(&session).await;
                    }
                    last = error;
                    continue;
                }
            }
            match tokio::time::timeout(CONNECT_BOUND, Client::connect(&local)).await {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(ClientError::Broken(why) | ClientError::Refused(why))) => last = why,
                Err(_) => last = format!("no answer within {} s", CONNECT_BOUND.as_secs()),
            }
            if place.host.alive(&session).await {
                break;
            }
            place.host.forget(&session).await;
        }
        Err(lift(lease, Some(0), ClientError::Broken(last)))
    }

    /// Removes the local ends of every forward of the master `session` (it is closing:
    /// they would be dead files), and each lease's forward directory left empty.
    pub(crate) fn forget_forwards(&self, session: &Session) {
        let master = short_hash(session.control_socket().as_os_str().as_encoded_bytes());
        let Ok(entries) = std::fs::read_dir(&self.control_dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("p-") {
                let _ = std::fs::remove_file(entry.path().join(&master));
                let _ = std::fs::remove_dir(entry.path());
            }
        }
    }

    /// Ends this program's forward of the lease at `lease_dir` on `host` (when its master
    /// is up) and removes the lease's forward directory (every program's forward of it).
    pub(crate) async fn drop_forwards(&self, host: &Arc<Host>, lease_dir: &str) {
        let dir = self.forward_dir(host, lease_dir);
        if !dir.exists() {
            return;
        }
        if let Some(session) = host.current().await {
            let local = self.forward_path(host, lease_dir, &session);
            if local.exists() {
                let remote_socket = host
                    .site
                    .lock()
                    .await
                    .as_ref()
                    .and_then(|s| s.as_ref().ok().map(|site| site.socket(lease_dir)));
                if let Some(remote_socket) = remote_socket {
                    let _ = session
                        .close_port_forward(
                            ForwardType::Local,
                            Socket::UnixSocket {
                                path: Cow::Borrowed(local.as_path()),
                            },
                            Socket::UnixSocket {
                                path: Cow::Borrowed(Path::new(&remote_socket)),
                            },
                        )
                        .await;
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Asks the master of `session` to forward `local` (created in a private directory) to
/// the remote `socket`.
async fn forward(session: &Session, local: &Path, socket: &str) -> Result<(), String> {
    let dir = local.parent().expect("a forward path has a directory");
    crate::connection::prepare_control_dir(dir).map_err(|e| e.to_string())?;
    // A file left at this name by a master that is gone: nobody listens on it.
    let _ = std::fs::remove_file(local);
    session
        .request_port_forward(
            ForwardType::Local,
            Socket::UnixSocket {
                path: Cow::Borrowed(local),
            },
            Socket::UnixSocket {
                path: Cow::Borrowed(Path::new(socket)),
            },
        )
        .await
        .map_err(|e| format!("the master connection refused to forward {}: {e}", local.display()))
}

#[async_trait]
impl AgentHost for SshDriver {
    async fn agent(&self, context: &LeaseContext, start: bool) -> Result<Option<Client>, DriverError> {
        let place = self.place(context).await?;
        let site = self.site_for(&place.host).await?;
        let socket = site.socket(&place.lease_dir);
        let lease = context.lease.id.as_str();
        let first = match self.connect(lease, &place, &socket).await {
            Ok(client) => return Ok(Some(client)),
            Err(error) => error,
        };
        if !start {
            let exists = bounded_ok(
                &place.host,
                "look for the process supervisor",
                &supervisor::socket_exists(&socket),
            )
            .await?;
            // No supervisor: the lease has spawned nothing (or it ended with the lease).
            if exists.is_empty() {
                return Ok(None);
            }
            return Err(first);
        }
        let env = remote::clean_env(&self.config.env_allowlist, &place.workspace);
        let out = bounded_ok(
            &place.host,
            "start the process supervisor",
            &supervisor::start(&place.lease_dir, &socket, &site.binary, &env),
        )
        .await?;
        let said = String::from_utf8_lossy(&out);
        match said.trim() {
            supervisor::STARTED | supervisor::RUNNING => self.connect(lease, &place, &socket).await.map(Some),
            supervisor::GONE => Err(DriverError::ResourceGone {
                id: context
                    .lease
                    .provider_lease_id
                    .clone()
                    .unwrap_or_else(|| context.lease.id.clone()),
            }),
            other => Err(DriverError::other(format!(
                "the process supervisor's start answered {other:?}"
            ))),
        }
    }

    async fn spawn_request(
        &self,
        context: &LeaseContext,
        request: SpawnRequest,
    ) -> Result<AgentSpawnRequest, DriverError> {
        if let Some(user) = &request.user {
            return Err(user_refused(user));
        }
        let place = self.place(context).await?;
        let cwd = match &request.cwd {
            None => place.workspace.clone(),
            Some(cwd) => {
                let lexical = confine_to_workspace(&place.workspace, cwd)?;
                let out = bounded_ok(
                    &place.host,
                    "resolve the working directory",
                    &supervisor::resolve_cwd(&place.workspace, &lexical),
                )
                .await?;
                let out = String::from_utf8_lossy(&out).into_owned();
                match out.split_once('\n') {
                    Some((supervisor::CWD_OK, path)) if path.starts_with('/') => path.to_owned(),
                    _ if out.trim() == "outside" => {
                        return Err(DriverError::PathOutsideWorkspace { path: cwd.clone() });
                    }
                    _ => return Err(DriverError::missing_cwd(cwd)),
                }
            }
        };
        // The supervisor's environment (a command's) is inherited under the request's.
        Ok(request_of(request, Some(cwd), Vec::new(), false))
    }

    async fn boot_time(&self, context: &LeaseContext) -> u64 {
        let Ok(place) = self.place(context).await else {
            return 0;
        };
        match place.host.site.lock().await.as_ref() {
            Some(Ok(site)) => site.boot_time,
            _ => 0,
        }
    }
}

/// Refusal reason of a `user` on ssh: every command runs as the login user.
pub(crate) const USER_REFUSED: &str = "the ssh driver runs every command as the remote login user.";

/// The refusal of a request's `user` (an execute's or a spawn's): the driver logs in as
/// one user and has no way to become another.
pub(crate) fn user_refused(user: &str) -> DriverError {
    DriverError::UserRefused {
        user: user.to_owned(),
        reason: USER_REFUSED.to_owned(),
    }
}
