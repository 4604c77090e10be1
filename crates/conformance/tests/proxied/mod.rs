//! A local driver whose leases go out through an egress proxy of the test's own, for the
//! bypass checks: honest, it runs the real `envrt_egress::EgressProxy` per lease on a
//! loopback port (named in each command's proxy variables), applies updates, and brokers
//! the environment's credentials through it, so it passes every bypass check without
//! Docker. Each fault breaks one promise the way a real proxy or driver could: a proxy
//! that judges a request by a name the client chose ([`naive`]), one that follows
//! redirects, updates that are not applied or that leave open connections alone, a secret
//! in the lease's environment, a credential put on every host. Its commands still share
//! the host's network (only the checks under test here are run on it).

mod naive;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use envrt_conformance::{EgressHost, Target};
use envrt_driver_local::{LocalConfig, LocalDriver};
use envrt_egress::{Broker, Brokered, EgressProxy, Limits, Resolver};
use envrt_runtime_core::driver::*;
use envrt_runtime_core::network::{EnvironmentNetwork, NetworkBoundary, PLACEHOLDER, Policy};
use envrt_runtime_core::{CapabilitySnapshot, DriverError, Environment, ExecuteRequest, ExecuteResult};

/// One broken promise of the proxied driver, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProxyFault {
    /// The real proxy, applied and updated as the contract says.
    Honest,
    /// A proxy that judges a CONNECT by the TLS server name and connects to the CONNECT host.
    TrustsSni,
    /// A proxy that judges a plain request by its `Host` header and connects to its URI.
    TrustsHostHeader,
    /// A proxy that follows a redirect itself, to wherever it points.
    FollowsRedirects,
    /// Answers an update with success and keeps the old policy.
    IgnoresUpdates,
    /// Applies an update to new connections only: open ones stay with the old policy.
    KeepsOpenConnections,
    /// Gives the lease the credential's real value in its placeholder variable.
    SecretInLeaseEnv,
    /// Brokers each credential to every allowed host, not only its own.
    BrokersToEveryHost,
}

/// One lease's proxy: its port, what serves it, and how an update reaches it.
struct Running {
    accept: tokio::task::JoinHandle<()>,
    current: Arc<Mutex<Current>>,
    env: Vec<(String, String)>,
}

/// What serves a new connection.
#[derive(Clone)]
enum Current {
    Real(EgressProxy),
    Naive(Arc<naive::Naive>),
}

pub(crate) struct Proxied {
    inner: LocalDriver,
    fault: ProxyFault,
    key: String,
    dns: SocketAddr,
    roots: Option<PathBuf>,
    state: PathBuf,
    leases: Mutex<HashMap<String, Running>>,
}

/// A target for `fault`: workspaces under `root`, names resolved by the test host's DNS
/// server `dns`, brokered hosts verified against `roots`; only the egress checks run.
pub(crate) async fn target(
    fault: ProxyFault,
    root: &Path,
    dns: SocketAddr,
    roots: Option<PathBuf>,
    host: Result<EgressHost, String>,
) -> Result<Target, String> {
    let inner = LocalDriver::new(LocalConfig {
        root: Some(root.join("leases")),
        ..LocalConfig::default()
    })
    .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(root.join("proxies")).map_err(|e| e.to_string())?;
    let driver = Proxied {
        inner,
        fault,
        key: format!("proxied_{fault:?}").to_lowercase(),
        dns,
        roots,
        state: root.join("proxies"),
        leases: Mutex::new(HashMap::new()),
    };
    Ok(Target::new(Arc::new(driver))
        .with_cases(1)
        .with_egress_host(host)
        .only(&["egress_host_", "egress_redirect_", "egress_live_", "egress_brokered_"]))
}

impl Proxied {
    fn resolver(&self) -> Resolver {
        Resolver::new(self.dns, Duration::from_secs(5))
    }

    /// Starts the proxy of lease `id` under `policy` with `environment`'s credentials.
    async fn start(&self, id: &str, environment: &Environment, policy: &Policy) -> Result<(), DriverError> {
        let credentials = match &environment.network {
            Some(EnvironmentNetwork::Policy(config)) => config.credentials().to_vec(),
            _ => Vec::new(),
        };
        let mut env = Vec::new();
        let mut brokered: Vec<Brokered> = Vec::new();
        for (i, credential) in credentials.iter().enumerate() {
            let resolved = credential
                .resolve(i, |name| std::env::var(name).ok())
                .map_err(|e| DriverError::other(format!("cannot broker the lease's credentials: {e}")))?;
            if let Some(name) = &credential.placeholder_env {
                let value = match self.fault {
                    ProxyFault::SecretInLeaseEnv => resolved.value.expose().to_owned(),
                    _ => PLACEHOLDER.to_owned(),
                };
                env.push((name.clone(), value));
            }
            if self.fault == ProxyFault::BrokersToEveryHost {
                for rule in policy.allow() {
                    if let envrt_egress::Host::Name(other) = &rule.host {
                        let mut copy = resolved.clone();
                        copy.host = other.clone();
                        brokered.push(copy);
                    }
                }
            }
            brokered.push(resolved);
        }
        brokered.sort_by(|a, b| (&a.host, a.port, &a.header).cmp(&(&b.host, b.port, &b.header)));
        brokered.dedup_by(|a, b| (&a.host, a.port, &a.header) == (&b.host, b.port, &b.header));
        let current = match self.fault {
            ProxyFault::TrustsSni | ProxyFault::TrustsHostHeader | ProxyFault::FollowsRedirects => {
                Current::Naive(Arc::new(naive::Naive::new(policy.clone(), self.resolver(), self.fault)))
            }
            _ if brokered.is_empty() => {
                Current::Real(EgressProxy::new(policy.clone(), self.resolver(), Limits::default()))
            }
            _ => {
                let broker = Broker::new(brokered, self.roots.as_deref())
                    .map_err(|e| DriverError::other(format!("cannot make the lease's CA: {e}")))?;
                let bundle = self.state.join(format!("{id}.pem"));
                std::fs::write(&bundle, broker.ca_pem()).map_err(|e| DriverError::io("write the CA bundle", e))?;
                for name in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"] {
                    env.push((name.to_owned(), bundle.display().to_string()));
                }
                Current::Real(EgressProxy::with_broker(
                    policy.clone(),
                    self.resolver(),
                    Limits::default(),
                    broker,
                ))
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| DriverError::io("bind the lease's proxy", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| DriverError::io("proxy address", e))?
            .port();
        let current = Arc::new(Mutex::new(current));
        let serving = current.clone();
        let accept = tokio::spawn(async move {
            while let Ok((io, _)) = listener.accept().await {
                let now = serving.lock().unwrap().clone();
                tokio::spawn(async move {
                    match now {
                        Current::Real(proxy) => proxy.serve_io(io).await,
                        Current::Naive(naive) => naive.serve(io).await,
                    }
                });
            }
        });
        let proxy = format!("http://127.0.0.1:{port}");
        for name in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
            env.push((name.to_owned(), proxy.clone()));
        }
        self.leases
            .lock()
            .unwrap()
            .insert(id.to_owned(), Running { accept, current, env });
        Ok(())
    }
}

#[async_trait]
impl EnvironmentDriver for Proxied {
    fn key(&self) -> &str {
        &self.key
    }
    fn network_boundary(&self, _environment: &Environment) -> NetworkBoundary {
        NetworkBoundary::Proxied
    }
    fn brokers_credentials(&self) -> bool {
        true
    }
    async fn acquire_lease(&self, input: &AcquireInput) -> Result<LeaseGrant, DriverError> {
        let mut grant = self.inner.acquire_lease(input).await?;
        grant.metadata.insert("driver".into(), self.key().into());
        if let Some(policy) = &input.network {
            self.start(&input.lease_id, &input.environment, policy).await?;
        }
        Ok(grant)
    }
    async fn release_lease(&self, input: &ReleaseInput) -> Result<(), DriverError> {
        if let Some(running) = self.leases.lock().unwrap().remove(&input.context.lease.id) {
            running.accept.abort();
            let _ = std::fs::remove_file(self.state.join(format!("{}.pem", input.context.lease.id)));
        }
        self.inner.release_lease(input).await
    }
    async fn update_network_policy(&self, context: &LeaseContext, policy: &Policy) -> Result<(), DriverError> {
        let leases = self.leases.lock().unwrap();
        let running = leases
            .get(&context.lease.id)
            .ok_or_else(|| DriverError::other("the lease has no proxy"))?;
        let mut current = running.current.lock().unwrap();
        match (&*current, self.fault) {
            (_, ProxyFault::IgnoresUpdates) => {}
            // A new proxy for new connections; the old one keeps serving its own.
            (Current::Real(_), ProxyFault::KeepsOpenConnections) => {
                *current = Current::Real(EgressProxy::new(policy.clone(), self.resolver(), Limits::default()));
            }
            (Current::Real(proxy), _) => proxy.update_policy(policy.clone()),
            (Current::Naive(naive), _) => naive.update(policy.clone()),
        }
        Ok(())
    }
    async fn resolve_capabilities(&self, input: &CapabilityInput) -> Result<CapabilitySnapshot, DriverError> {
        self.inner.resolve_capabilities(input).await
    }
    fn as_execute(&self) -> Option<&dyn Execute> {
        Some(self)
    }
}

#[async_trait]
impl Execute for Proxied {
    async fn execute(&self, context: &LeaseContext, mut request: ExecuteRequest) -> Result<ExecuteResult, DriverError> {
        let env = self
            .leases
            .lock()
            .unwrap()
            .get(&context.lease.id)
            .map(|running| running.env.clone())
            .unwrap_or_default();
        for (name, value) in env {
            request.env.insert(name, value.into());
        }
        self.inner
            .as_execute()
            .expect("local executes")
            .execute(context, request)
            .await
    }
}
