//! [`AgentHost`], what a driver says about its leases' supervisors, and the process verbs
//! over it that [`process_sessions!`](crate::process_sessions) wires into a driver.

use std::time::Duration;

use async_trait::async_trait;
use envrt_agent::client::{Client, ClientError};
use envrt_agent::proto;
use envrt_driver_api::process::{Offsets, ProcessError, ProcessInfo, ProcessStatus, SpawnRequest, StdinMode};
use envrt_driver_api::{DriverError, LeaseContext, ProcessOutput};

use crate::map::{AgentOutput, info_of, lift, local_boot_time, status_of};

/// What differs between drivers that run one supervisor per lease.
#[async_trait]
pub trait AgentHost: Send + Sync {
    /// A connection to the lease's supervisor. With `start`, one is started (once, even
    /// when several programs ask at the same time) when none answers; without, `Ok(None)`
    /// when the lease has none yet (it spawned nothing).
    async fn agent(&self, context: &LeaseContext, start: bool) -> Result<Option<Client>, DriverError>;

    /// The supervisor's spawn request for `request`: the working directory resolved and
    /// confined inside the lease (a missing one refused with
    /// [`DriverError::missing_cwd`], here where the host can look, else by the supervisor,
    /// whose refusal [`spawn`] maps onto the same error), the lease's own environment under
    /// the request's. [`request_of`] does the rest.
    async fn spawn_request(
        &self,
        context: &LeaseContext,
        request: SpawnRequest,
    ) -> Result<proto::SpawnRequest, DriverError>;

    /// Where the supervisor looks users up, as a refusal of a spawn's `user` names it:
    /// the noun (`container`, `sandbox`, `host`) and the place (`in the container`,
    /// `on this host`); `("lease", "in the lease")` by default.
    fn user_site(&self) -> (&'static str, &'static str) {
        ("lease", "in the lease")
    }

    /// The boot time (seconds since the epoch) of the machine the supervisor runs on, to
    /// turn its start ticks into a timestamp; this machine's by default.
    async fn boot_time(&self, _context: &LeaseContext) -> u64 {
        local_boot_time()
    }
}

/// The supervisor's form of `request`, run in `cwd` with `env` under the request's own
/// variables (`clear_env`: the supervisor's own environment is not inherited).
pub fn request_of(
    request: SpawnRequest,
    cwd: Option<String>,
    env: Vec<(String, String)>,
    clear_env: bool,
) -> proto::SpawnRequest {
    let mut merged: std::collections::BTreeMap<String, String> = env.into_iter().collect();
    merged.extend(
        request
            .env
            .iter()
            .map(|(name, value)| (name.clone(), value.expose().to_owned())),
    );
    proto::SpawnRequest {
        argv: request.argv,
        cwd,
        env: merged,
        clear_env,
        stdin: match request.stdin {
            StdinMode::Null => proto::StdinMode::Null,
            StdinMode::Piped => proto::StdinMode::Piped,
        },
        tty: request.tty.map(|size| proto::TtySize {
            rows: size.rows,
            cols: size.cols,
        }),
        keep: request.keep,
        timeout_ms: request
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        idempotency_key: request.idempotency_key,
        hold: false,
        user: request.user,
        replay_bound: None,
    }
}

/// A supervisor's refusal of a spawn's `user` (`user "{user}": {why}`) as the contract's
/// [`DriverError::UserRefused`], in the words of the driver's `site`; `None` for any
/// other refusal. `asked` is the user as the caller wrote it (a driver may have handed
/// the supervisor its resolved `UID:GID`).
pub(crate) fn user_refusal(text: &str, asked: &str, (noun, place): (&str, &str)) -> Option<DriverError> {
    let rest = text.strip_prefix("user \"")?;
    let (_, why) = rest.split_once("\": ")?;
    let reason = match why {
        "no such user" => format!("no such user {place}."),
        "no such group" => format!("no such group {place}."),
        "it is not UID, UID:GID, NAME or NAME:GROUP" => format!("the {noun} takes UID, UID:GID, NAME or NAME:GROUP."),
        other => {
            let uid = other
                .strip_prefix("the supervisor runs as uid ")?
                .strip_suffix(" and cannot start a process as another user")?;
            uid.parse::<u32>().ok()?;
            format!("the process supervisor runs as uid {uid}, which cannot start a process as another user.")
        }
    };
    Some(DriverError::UserRefused {
        user: asked.to_owned(),
        reason,
    })
}

/// The lease's running supervisor; an unreachable one is the backend's failure.
async fn running<H: AgentHost + ?Sized>(host: &H, context: &LeaseContext, number: u64) -> Result<Client, DriverError> {
    match host.agent(context, false).await? {
        Some(client) => Ok(client),
        None => Err(lift(
            &context.lease.id,
            Some(number),
            ClientError::Broken("no process supervisor runs in the lease".into()),
        )),
    }
}

/// [`ProcessSessions::spawn`](envrt_driver_api::ProcessSessions::spawn).
pub async fn spawn<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
    request: SpawnRequest,
) -> Result<ProcessInfo, DriverError> {
    let lease = &context.lease.id;
    let asked_cwd = request.cwd.clone();
    let asked_user = request.user.clone();
    let settings = context
        .environment
        .as_ref()
        .and_then(|environment| environment.processes)
        .unwrap_or_default();
    let mut request = host.spawn_request(context, request).await?;
    // The environment's `keep` for a spawn that names none, and its bound on the lease's
    // replay bytes, which the supervisor checks with the spawn.
    request.keep = request.keep.or(settings.keep);
    request.replay_bound = Some(
        settings
            .replay_bound
            .unwrap_or(envrt_driver_api::process::DEFAULT_REPLAY_BOUND),
    );
    let key = request.idempotency_key.clone();
    let Some(client) = host.agent(context, true).await? else {
        return Err(lift(
            lease,
            None,
            ClientError::Broken("the process supervisor did not start".into()),
        ));
    };
    let info = client.spawn(request).await.map_err(|e| match (&e, key) {
        (ClientError::Refused(text), _) if asked_user.is_some() && text.starts_with("user \"") => {
            let asked = asked_user.as_deref().unwrap_or_default();
            user_refusal(text, asked, host.user_site()).unwrap_or_else(|| lift(lease, None, e.clone()))
        }
        // The supervisor found no directory there (the host could not look inside the lease).
        (ClientError::Refused(text), _) if text.starts_with("cwd \"") && text.ends_with("\" is not a directory") => {
            let named = &text["cwd \"".len()..text.len() - "\" is not a directory".len()];
            DriverError::missing_cwd(asked_cwd.as_deref().unwrap_or(named))
        }
        (ClientError::Refused(text), Some(key)) if text.ends_with(" with a different request") => {
            match text
                .rsplit_once(" for process ")
                .and_then(|(_, rest)| rest.split_once(' '))
            {
                Some((number, _)) if number.parse::<u64>().is_ok() => ProcessError::IdempotencyConflict {
                    key,
                    id: format!("{lease}/{number}"),
                }
                .into(),
                _ => lift(lease, None, e),
            }
        }
        _ => lift(lease, None, e),
    })?;
    Ok(info_of(lease, host.boot_time(context).await, info))
}

/// [`ProcessSessions::processes`](envrt_driver_api::ProcessSessions::processes).
pub async fn processes<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
) -> Result<Vec<ProcessInfo>, DriverError> {
    let lease = &context.lease.id;
    // No supervisor yet: the lease has spawned nothing.
    let Some(client) = host.agent(context, false).await? else {
        return Ok(Vec::new());
    };
    let list = client.list().await.map_err(|e| lift(lease, Some(0), e))?;
    let boot = host.boot_time(context).await;
    Ok(list.into_iter().map(|info| info_of(lease, boot, info)).collect())
}

/// [`ProcessSessions::process`](envrt_driver_api::ProcessSessions::process).
pub async fn process<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
    number: u64,
) -> Result<Option<ProcessInfo>, DriverError> {
    let lease = &context.lease.id;
    let Some(client) = host.agent(context, false).await? else {
        return Ok(None);
    };
    match client.info(number).await {
        Ok(info) if info.id == number => Ok(Some(info_of(lease, host.boot_time(context).await, info))),
        Ok(other) => Err(DriverError::other(format!(
            "the process supervisor of lease {lease} answered process {} for process {number}",
            other.id
        ))),
        // One it evicted (it ended, and the table was full) is reported as such.
        Err(ClientError::Refused(text)) if crate::map::evicted_refusal(lease, &text).is_some() => {
            Err(lift(lease, Some(number), ClientError::Refused(text)))
        }
        // The supervisor refuses `info` otherwise only for a process it does not hold.
        Err(ClientError::Refused(_)) => Ok(None),
        Err(error) => Err(lift(lease, Some(number), error)),
    }
}

/// [`ProcessSessions::output`](envrt_driver_api::ProcessSessions::output).
pub async fn output<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
    number: u64,
    from: &Offsets,
) -> Result<Box<dyn ProcessOutput>, DriverError> {
    let lease = &context.lease.id;
    let client = running(host, context, number).await?;
    let from = proto::Offsets {
        stdout: from.stdout,
        stderr: from.stderr,
        tty: from.tty,
    };
    let output = client
        .output(number, from)
        .await
        .map_err(|e| lift(lease, Some(number), e))?;
    Ok(Box::new(AgentOutput {
        lease: lease.clone(),
        number,
        boot: host.boot_time(context).await,
        _client: client,
        output,
        ended: false,
    }))
}

/// [`ProcessSessions::write_stdin`](envrt_driver_api::ProcessSessions::write_stdin).
pub async fn write_stdin<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
    number: u64,
    bytes: &[u8],
) -> Result<(), DriverError> {
    let client = running(host, context, number).await?;
    client
        .write_stdin(number, bytes)
        .await
        .map_err(|e| lift(&context.lease.id, Some(number), e))
}

/// [`ProcessSessions::close_stdin`](envrt_driver_api::ProcessSessions::close_stdin).
pub async fn close_stdin<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
    number: u64,
) -> Result<(), DriverError> {
    let client = running(host, context, number).await?;
    client
        .close_stdin(number)
        .await
        .map_err(|e| lift(&context.lease.id, Some(number), e))
}

/// [`ProcessSessions::signal`](envrt_driver_api::ProcessSessions::signal).
pub async fn signal<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
    number: u64,
    signal: &str,
) -> Result<ProcessInfo, DriverError> {
    let lease = &context.lease.id;
    let client = running(host, context, number).await?;
    let info = client
        .signal(number, signal)
        .await
        .map_err(|e| lift(lease, Some(number), e))?;
    Ok(info_of(lease, host.boot_time(context).await, info))
}

/// [`ProcessSessions::resize`](envrt_driver_api::ProcessSessions::resize).
pub async fn resize<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
    number: u64,
    rows: u16,
    cols: u16,
) -> Result<(), DriverError> {
    let client = running(host, context, number).await?;
    client
        .resize(number, rows, cols)
        .await
        .map_err(|e| lift(&context.lease.id, Some(number), e))
}

/// [`ProcessSessions::wait`](envrt_driver_api::ProcessSessions::wait).
pub async fn wait<H: AgentHost + ?Sized>(
    host: &H,
    context: &LeaseContext,
    number: u64,
    timeout: Option<Duration>,
) -> Result<ProcessStatus, DriverError> {
    let client = running(host, context, number).await?;
    let status = client
        .wait(number, timeout)
        .await
        .map_err(|e| lift(&context.lease.id, Some(number), e))?;
    Ok(status_of(status))
}
