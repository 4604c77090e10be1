//! The bypasses users report against egress proxies, each tried from inside a lease with
//! the byte-exact client of [`egress_client`](super::egress_client): a name the policy
//! allows put where the proxy might judge it (a `Host` header, a TLS server name) while the
//! connection goes somewhere the policy denies, and a redirect from an allowed host to a
//! denied one. The evidence is what the test host received (its HTTP body in the lease's
//! output, its HTTPS server's request log), and each check first shows that the allowed
//! way works, so a proxy that refuses everything cannot pass. Not checked without a test
//! host, on a driver that enforces no policy, where the lease has no `python3`, and (for
//! the TLS parts) without the test host's HTTPS server.

use serde_json::{Value, json};

use super::egress::{prepare_with, run_script as run};
use super::egress_client::{NO_PYTHON, describe, results, script, seen, status};
use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure};
use envrt_runtime_core::network::Egress;

pub(super) const CHECKS: &[Check] = &[
    Check::maybe("egress_host_and_sni_mismatch_refused", has_execute, host_and_sni).promise(
        "An allowed name in a Host header or a TLS server name does not open a denied destination: plain HTTP to a denied address, CONNECT to a denied name or address, and a server name that differs from the CONNECT host are refused.",
    ),
    Check::maybe("egress_redirect_to_denied_host_not_followed", has_execute, redirect).promise(
        "A redirect from an allowed host to a denied one comes back to the lease as it is, and the request that follows it is refused by the policy (plain HTTP and over TLS).",
    ),
];

/// The allow list of both checks: the test host's allowed name, plain and over TLS.
const ALLOW: &[&str] = &["web.test:80", "web.test:443"];

/// The HTTPS log of the test host, or why the TLS parts cannot look.
type Seen = std::sync::Arc<dyn Fn() -> Vec<String> + Send + Sync>;

fn https_of(host: &crate::EgressHost) -> Result<Seen, Checked> {
    host.https_seen
        .clone()
        .ok_or_else(|| Checked::NotChecked("the test host has no HTTPS server (openssl and python3 are needed)".into()))
}

fn host_and_sni(ctx: &Ctx) -> Result<Checked, String> {
    let (host, environment) = match prepare_with(ctx, "mismatch", Egress::Allow, ALLOW, &[])? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let https = match https_of(&host) {
        Ok(https) => https,
        Err(not) => return Ok(not),
    };
    let address = &host.address;
    let marker = ctx.marker("sni");
    let path = |n: usize| format!("/{marker}-{n}");
    // Operation 0 is the allowed way; each other one must reach nothing.
    let ops = json!([
        ["tls", "web.test:443", "web.test", path(0)],
        ["plain", format!("http://{address}/"), "web.test"],
        ["tls", "web.test:443", "other.test", path(2)],
        ["tls", "other.test:443", "web.test", path(3)],
        ["tls", format!("{address}:443"), "web.test", path(4)],
    ]);
    let cases = [
        "",
        "plain HTTP to a denied address with the allowed name in its Host header",
        "CONNECT to the allowed name with a TLS server name naming a denied one",
        "CONNECT to a denied name with a TLS server name naming the allowed one",
        "CONNECT to a denied address with a TLS server name naming the allowed one",
    ];
    let out = run(ctx, &environment, &script(&ops))?;
    if out.trim() == NO_PYTHON {
        return Ok(Checked::NotChecked(
            "the lease has no python3 for the byte-exact client".into(),
        ));
    }
    let results = results(&out, cases.len())?;
    let received = seen(&https());
    let reached_path = |n: usize| received.iter().any(|(_, p, _)| *p == path(n));
    ensure(reached_path(0), || {
        format!(
            "the allowed name web.test was not reached over TLS through the proxy, so no refusal can be told apart: {}",
            describe(&results[0])
        )
    })?;
    let mut reached = Vec::new();
    let plain = results[1]["response"].as_str().unwrap_or_default();
    if plain.contains(host.body.as_str()) {
        reached.push(cases[1]);
    }
    for (n, case) in cases.iter().enumerate().skip(2) {
        if reached_path(n) {
            reached.push(*case);
        }
    }
    ensure(reached.is_empty(), || {
        format!(
            "the policy allows only web.test, yet the test host was reached by: {}",
            reached.join("; ")
        )
    })?;
    // Refused, not lost: the CONNECTs to a denied destination get the proxy's 403.
    for n in [3, 4] {
        ensure(results[n]["connect"] == "403", || {
            format!("{} was not refused with 403: {}", cases[n], describe(&results[n]))
        })?;
    }
    ensure(status(plain) == Some(403), || {
        format!("{} was not refused with 403: {}", cases[1], describe(&results[1]))
    })?;
    Ok(Checked::Yes)
}

fn redirect(ctx: &Ctx) -> Result<Checked, String> {
    let (host, environment) = match prepare_with(ctx, "redirect", Egress::Allow, ALLOW, &[])? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let https = host.https_seen.clone();
    let before = https.as_ref().map(|seen| seen().len()).unwrap_or(0);
    // Other checks reach other.test on the same test host at the same time: this one's
    // redirect names a path of its own.
    let marker = ctx.marker("redirect");
    let redirect_path = format!("/redirect/{marker}");
    let redirected_path = format!("/{marker}");
    let mut ops = vec![json!([
        "follow",
        "plain",
        "http://web.test/cgi-bin/redirect",
        "web.test"
    ])];
    if https.is_some() {
        ops.push(json!([
            "follow",
            "tls",
            "web.test:443",
            "web.test",
            redirect_path.as_str()
        ]));
    }
    let out = run(ctx, &environment, &script(&Value::Array(ops.clone())))?;
    if out.trim() == NO_PYTHON {
        return Ok(Checked::NotChecked(
            "the lease has no python3 for the byte-exact client".into(),
        ));
    }
    let results = results(&out, ops.len())?;
    let plain = &results[0];
    let first = plain["first"]["response"].as_str().unwrap_or_default();
    ensure(!out.contains(host.body.as_str()), || {
        "the plain redirect from web.test to other.test (denied) reached other.test: its body came back to the lease"
            .to_owned()
    })?;
    ensure(
        status(first) == Some(302) && plain["location"] == "http://other.test/",
        || {
            format!(
                "the allowed host's redirect did not come back to the lease as it is (302 to http://other.test/): {}",
                describe(plain)
            )
        },
    )?;
    let then = plain["then"]["response"].as_str().unwrap_or_default();
    ensure(status(then) == Some(403), || {
        format!(
            "the request following the redirect to the denied http://other.test/ was not refused with 403: {}",
            describe(&plain["then"])
        )
    })?;
    let Some(https) = https else {
        return Ok(Checked::NotChecked(
            "plain HTTP passed; the TLS redirect needs the test host's HTTPS server (openssl and python3)".into(),
        ));
    };
    let tls = &results[1];
    let received = seen(&https());
    let fresh = received.get(before..).unwrap_or_default();
    ensure(
        fresh.iter().any(|(h, p, _)| h == "web.test" && *p == redirect_path),
        || {
            format!(
                "the allowed host web.test was not reached over TLS through the proxy: {}",
                describe(tls)
            )
        },
    )?;
    ensure(
        !fresh.iter().any(|(h, p, _)| h == "other.test" && *p == redirected_path),
        || "the TLS redirect from web.test to other.test (denied) reached other.test's server".to_owned(),
    )?;
    ensure(
        tls["location"] == format!("https://other.test{redirected_path}").as_str() && tls["then"]["connect"] == "403",
        || {
            format!(
                "over TLS, the redirect did not come back as it is or the CONNECT that follows it was not refused with 403: {}",
                describe(tls)
            )
        },
    )?;
    Ok(Checked::Yes)
}
