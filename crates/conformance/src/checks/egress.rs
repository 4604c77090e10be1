//! Egress under a policy (contract section 10), for every driver whose leases the facade
//! says are proxied: through a test host on this machine (the suite's
//! [`EgressHost`](crate::EgressHost)), a lease under `egress = "allow"` reaches an allowed
//! name and nothing else (an unlisted name, a raw address, an allowed name on an unlisted
//! port, also over CONNECT, a name that resolves into a private range, IPv6, a direct
//! connection or datagram that ignores the proxy), its resolver never forwards a query for
//! an unlisted name (seen at the test host's DNS server), and under `"open"` the metadata
//! address is still refused by the proxy. The evidence is what the test host served or was
//! asked, and the proxy's own refusal, never the driver's word: a driver that claims to
//! enforce and does not is failed. Without a test host, or on a driver that enforces no
//! policy (its level says so), each check reports "not checked".

use envrt_runtime_core::network::{Egress, EnvironmentNetwork, NetworkConfig, NetworkLevel, Policy, RawCredential};
use envrt_runtime_core::{AcquireRequest, EnvironmentDriver, ExecuteRequest, Lease, LeaseStatus};

use super::{Check, Checked, has_execute};
use crate::EgressHost;
use crate::context::{Ctx, ensure};

pub(super) const CHECKS: &[Check] = &[
    Check::maybe("egress_allowed_name_reachable", has_execute, allowed_reachable)
        .promise("A lease under egress = \"allow\" reaches a name its policy allows, through the proxy."),
    Check::maybe("egress_unlisted_destinations_refused", has_execute, unlisted_refused).promise(
        "An unlisted name, a raw address, an allowed name on an unlisted port (also over CONNECT), a name resolving into a private range and IPv6 are refused.",
    ),
    Check::maybe("egress_direct_traffic_has_no_route", has_execute, direct_has_no_route).promise(
        "A program that ignores the proxy reaches nothing: no TCP connection and no UDP datagram reaches the test host.",
    ),
    Check::maybe("egress_dns_never_forwards_unlisted_names", has_execute, dns_under_policy).promise(
        "The lease's resolver answers an allowed name and never forwards a query for an unlisted one (seen at the test host's DNS server).",
    ),
    Check::maybe("egress_metadata_refused_under_open", has_execute, metadata_refused).promise(
        "Under egress = \"open\" the proxy still refuses the metadata address, while a public name is reached.",
    ),
];

/// A shell prelude: `get URL...` fetches through the proxy variables with curl or wget,
/// `direct URL` ignores them; both print the body only. (No `-T` for wget: BusyBox 1.35's
/// wget crashes with it.)
const PRELUDE: &str = "if command -v curl >/dev/null; then get() { curl -sS -m 10 \"$@\"; }; \
     direct() { curl -sS -m 5 --noproxy '*' \"$@\"; }; tunnel() { curl -sS -m 10 -p \"$@\"; }; \
     elif command -v wget >/dev/null; then get() { wget -q -O - \"$@\"; }; \
     direct() { wget -q -Y off -O - \"$@\"; }; tunnel() { echo no-curl; }; \
     else echo no-client; exit 0; fi; ";

/// The suite's test host and a lease under `egress`, or why the check cannot look.
fn prepare(ctx: &Ctx, egress: Egress) -> Result<Result<(EgressHost, String), String>, String> {
    let allow: &[&str] = match egress {
        Egress::Open => &[],
        _ => &["web.test:80", "rebind.test"],
    };
    prepare_with(ctx, egress.as_str(), egress, allow, &[])
}

/// The suite's test host and an environment (named after `tag`) whose leases are under
/// `egress` with `allow` and brokered `credentials`, or why the check cannot look.
pub(super) fn prepare_with(
    ctx: &Ctx,
    tag: &str,
    egress: Egress,
    allow: &[&str],
    credentials: &[RawCredential],
) -> Result<Result<(EgressHost, String), String>, String> {
    let host = match &ctx.egress_host {
        Ok(host) => host.clone(),
        Err(why) => return Ok(Err(format!("no test host: {why}"))),
    };
    let id = format!("{}-egress-{tag}", ctx.environment_id);
    ctx.block_on(async {
        let mut environment = ctx
            .runtime
            .environment(&ctx.environment_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("environment {} is gone", ctx.environment_id))?;
        let level = ctx.runtime.network_level(&environment).map_err(|e| e.to_string())?;
        if !matches!(level, NetworkLevel::NoNetwork) {
            return Ok(Err(format!("the driver's leases get {level}")));
        }
        let policy = Policy::new(egress, allow).map_err(|e| e.to_string())?;
        environment.id = id.clone();
        let config = NetworkConfig::new(policy, &[])
            .and_then(|config| config.with_credentials(credentials))
            .map_err(|e| e.to_string())?;
        environment.network = Some(EnvironmentNetwork::Policy(config));
        match ctx.runtime.put_environment(environment.clone()).await {
            Ok(()) => {}
            // A driver that says it brokers no credentials is refused them, in the facade's words.
            Err(e) if !credentials.is_empty() && !ctx.recorder.brokers_credentials() => {
                return Ok(Err(format!("the driver does not broker credentials: {e}")));
            }
            // A driver whose boundary is not proxied refuses the policy, in its words.
            Err(e) => return Ok(Err(format!("the driver enforces no egress policy: {e}"))),
        }
        Ok(Ok((host, id)))
    })
}

/// Runs `script` (after [`PRELUDE`]) in a fresh lease of `environment`; its stdout.
fn run(ctx: &Ctx, environment: &str, script: &str) -> Result<String, String> {
    run_script(ctx, environment, &format!("{PRELUDE}{script}"))
}

/// Runs `sh -c script` in a fresh lease of `environment`; its stdout.
pub(super) fn run_script(ctx: &Ctx, environment: &str, script: &str) -> Result<String, String> {
    ctx.block_on(async {
        let lease: Lease = ctx
            .runtime
            .acquire_lease(AcquireRequest::new(environment, &ctx.company_id))
            .await
            .map_err(|e| format!("acquire_lease under the policy failed: {e}"))?;
        let result = ctx.exec(&lease, ExecuteRequest::new("sh", ["-c", script])).await;
        let _ = ctx.runtime.release_lease(&lease.id, LeaseStatus::Released).await;
        Ok(String::from_utf8_lossy(&result?.stdout).into_owned())
    })
}

fn allowed_reachable(ctx: &Ctx) -> Result<Checked, String> {
    let (host, environment) = match prepare(ctx, Egress::Allow)? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let out = run(ctx, &environment, "get http://web.test/ 2>&1")?;
    if out.trim() == "no-client" {
        return Ok(Checked::NotChecked(
            "the lease has no HTTP client (curl or wget)".into(),
        ));
    }
    ensure(out == host.body, || {
        format!("the allowed name web.test was not reached through the proxy: got {out:?}")
    })?;
    Ok(Checked::Yes)
}

fn unlisted_refused(ctx: &Ctx) -> Result<Checked, String> {
    let (host, environment) = match prepare(ctx, Egress::Allow)? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let address = &host.address;
    let targets = [
        ("an unlisted name", "get http://other.test/".to_owned()),
        ("a raw address", format!("get http://{address}/")),
        (
            "an allowed name on an unlisted port",
            "get http://web.test:8080/".to_owned(),
        ),
        (
            "CONNECT to an allowed name on an unlisted port",
            "tunnel http://web.test:8080/".to_owned(),
        ),
        (
            "a name resolving into a private range",
            "get http://rebind.test/".to_owned(),
        ),
        (
            "an IPv4-mapped IPv6 address",
            format!("get 'http://[::ffff:{address}]/'"),
        ),
    ];
    let script: String = targets
        .iter()
        .enumerate()
        .map(|(i, (_, command))| format!("echo @{i}; {command} 2>/dev/null; echo; "))
        .collect();
    let out = run(ctx, &environment, &script)?;
    if out.trim() == "no-client" {
        return Ok(Checked::NotChecked(
            "the lease has no HTTP client (curl or wget)".into(),
        ));
    }
    let reached: Vec<&str> = out
        .split('@')
        .skip(1)
        .filter(|part| part.contains(host.body.as_str()))
        .filter_map(|part| part.split_whitespace().next()?.parse::<usize>().ok())
        .map(|i| targets[i].0)
        .collect();
    ensure(reached.is_empty(), || {
        format!(
            "the policy allows only web.test:80 and rebind.test, yet the lease reached {}",
            reached.join(", ")
        )
    })?;
    Ok(Checked::Yes)
}

fn direct_has_no_route(ctx: &Ctx) -> Result<Checked, String> {
    let (host, environment) = match prepare(ctx, Egress::Allow)? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let marker = format!(
        "direct-{}.test",
        ctx.marker_prefix
            .to_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "")
    );
    let address = &host.address;
    // A datagram straight to the test host's DNS server: a query it would write down.
    let udp = format!(
        "if command -v nslookup >/dev/null; then nslookup -timeout=3 {marker} {address} >/dev/null 2>&1; \
         elif command -v python3 >/dev/null; then python3 -c 'import socket,sys; q=b\"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\"+b\"\".join(bytes([len(p)])+p.encode() for p in sys.argv[1].split(\".\"))+b\"\\x00\\x00\\x01\\x00\\x01\"; socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(q,(sys.argv[2],53))' {marker} {address}; fi; "
    );
    let out = run(
        ctx,
        &environment,
        &format!("direct http://{address}/ 2>/dev/null; echo; {udp}"),
    )?;
    if out.trim() == "no-client" {
        return Ok(Checked::NotChecked(
            "the lease has no HTTP client (curl or wget)".into(),
        ));
    }
    let asked = (host.asked)();
    let reached_tcp = out.contains(host.body.as_str());
    let reached_udp = asked.iter().any(|name| name == &marker);
    ensure(!reached_tcp && !reached_udp, || {
        format!(
            "a program that ignores the proxy reached the test host {address}:{}{}",
            if reached_tcp {
                " (TCP: its HTTP server answered)"
            } else {
                ""
            },
            if reached_udp {
                " (UDP: its DNS server was asked directly)"
            } else {
                ""
            }
        )
    })?;
    Ok(Checked::Yes)
}

fn dns_under_policy(ctx: &Ctx) -> Result<Checked, String> {
    let (host, environment) = match prepare(ctx, Egress::Allow)? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let secret = format!(
        "exfil-{}",
        ctx.marker_prefix
            .to_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "")
    );
    let resolve = "if command -v getent >/dev/null; then r() { getent hosts \"$1\"; }; \
                   elif command -v nslookup >/dev/null; then r() { nslookup \"$1\"; }; \
                   else echo no-resolver; exit 0; fi; ";
    let out = run(
        ctx,
        &environment,
        &format!("{resolve} r web.test; echo @; r {secret}.other.test; r {secret}.rebind-me.test; true"),
    )?;
    if out.trim() == "no-resolver" {
        return Ok(Checked::NotChecked(
            "the lease has no resolver tool (getent or nslookup)".into(),
        ));
    }
    let (allowed, _) = out.split_once('@').unwrap_or((&out, ""));
    ensure(allowed.contains(host.address.as_str()), || {
        format!(
            "the allowed name web.test did not resolve to the test host {} in the lease: {allowed:?}",
            host.address
        )
    })?;
    let leaked: Vec<String> = (host.asked)()
        .into_iter()
        .filter(|name| name.contains(&secret))
        .collect();
    ensure(leaked.is_empty(), || {
        format!("the test host's DNS server was asked for unlisted names: {leaked:?}")
    })?;
    Ok(Checked::Yes)
}

fn metadata_refused(ctx: &Ctx) -> Result<Checked, String> {
    let (host, environment) = match prepare(ctx, Egress::Open)? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let out = run(
        ctx,
        &environment,
        "get http://other.test/ 2>&1; echo @; get -i http://169.254.169.254/latest/meta-data/ 2>&1 || \
         get http://169.254.169.254/latest/meta-data/ 2>&1; true",
    )?;
    if out.trim() == "no-client" {
        return Ok(Checked::NotChecked(
            "the lease has no HTTP client (curl or wget)".into(),
        ));
    }
    let (public, metadata) = out.split_once('@').unwrap_or((&out, ""));
    ensure(public.contains(host.body.as_str()), || {
        format!("under egress = \"open\" the public name other.test was not reached: {public:?}")
    })?;
    ensure(metadata.contains("403"), || {
        format!("under egress = \"open\" the metadata address was not refused by the proxy (no 403): {metadata:?}")
    })?;
    Ok(Checked::Yes)
}
