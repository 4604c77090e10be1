//! Egress promises that need more than one request: a live policy update that narrows a
//! lease's policy (the removed destination is refused to new connections and a tunnel
//! already open to it is cut, contract section 10), and brokered credentials (the lease
//! holds only the placeholder; the credentialed test host receives the real secret; another
//! host, also allowed, never does). Both go over TLS to the test host's HTTPS server, whose
//! request log is the evidence, with the byte-exact client of
//! [`egress_client`](super::egress_client). Not checked without a test host or its HTTPS
//! server, where the lease has no `python3`, on a driver that enforces no policy, and (the
//! credential check) on a driver that says it brokers no credentials.

use std::sync::{Arc, Mutex};

use envrt_runtime_core::network::{Egress, PLACEHOLDER, Policy, RawCredential};
use envrt_runtime_core::{AcquireRequest, ExecuteRequest, LeaseStatus, OutputStream};
use serde_json::json;

use super::egress::{prepare_with, run_script as run};
use super::egress_client::{NO_PYTHON, describe, results, script, seen};
use super::{Check, Checked, has_execute};
use crate::context::{Ctx, ensure};

pub(super) const CHECKS: &[Check] = &[
    Check::maybe("egress_live_update_cuts_removed_destination", has_execute, live_update).promise(
        "A live update that removes a destination cuts the tunnel open to it and refuses new connections to it, while the destination kept stays reachable.",
    ),
    Check::maybe("egress_brokered_credential_stays_out_of_the_lease", has_execute, credential).promise(
        "A brokered credential reaches its allowed host as the real secret; the lease sees only the placeholder (environment, processes, files, answers) and another allowed host never gets the secret.",
    ),
];

fn live_update(ctx: &Ctx) -> Result<Checked, String> {
    let allow = ["web.test:443", "other.test:443"];
    let (host, environment) = match prepare_with(ctx, "live", Egress::Allow, &allow, &[])? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let Some(https) = host.https_seen.clone() else {
        return Ok(Checked::NotChecked(
            "the test host has no HTTPS server (openssl and python3 are needed)".into(),
        ));
    };
    let marker = ctx.marker("live");
    let path = |n: usize| format!("/{marker}-{n}");
    let ops = json!([
        ["hold", "other.test:443", "other.test", path(0)],
        ["tls", "other.test:443", "other.test", path(1)],
        ["tls", "web.test:443", "web.test", path(2)],
    ]);
    let narrowed = Policy::new(Egress::Allow, &["web.test:443"]).map_err(|e| e.to_string())?;
    let (out, updated) = ctx.block_on(async {
        let lease = ctx
            .runtime
            .acquire_lease(AcquireRequest::new(&environment, &ctx.company_id))
            .await
            .map_err(|e| format!("acquire_lease under the policy failed: {e}"))?;
        // The sink says when the client has its tunnel to other.test open.
        let (open_tx, open_rx) = tokio::sync::oneshot::channel::<()>();
        let open_tx = Mutex::new(Some(open_tx));
        let printed = Arc::new(Mutex::new(Vec::new()));
        let seen_so_far = printed.clone();
        let mut request = ExecuteRequest::new("sh", ["-c", &script(&ops)]);
        request.sink = Some(Arc::new(move |stream: OutputStream, chunk: &[u8]| {
            if stream != OutputStream::Stdout {
                return;
            }
            let mut all = seen_so_far.lock().unwrap();
            all.extend_from_slice(chunk);
            if all.windows(6).any(|w| w == b"@open\n")
                && let Some(tx) = open_tx.lock().unwrap().take()
            {
                let _ = tx.send(());
            }
        }));
        let exec = ctx.exec(&lease, request);
        tokio::pin!(exec);
        let mut updated = None;
        let result = tokio::select! {
            result = &mut exec => result,
            Ok(()) = open_rx => {
                updated = Some(ctx.runtime.update_network_policy(&lease.id, &narrowed).await.map_err(|e| e.to_string()));
                exec.await
            }
        };
        let _ = ctx.runtime.release_lease(&lease.id, LeaseStatus::Released).await;
        let out = String::from_utf8_lossy(&result?.stdout).into_owned();
        Ok::<_, String>((out, updated))
    })?;
    if out.trim() == NO_PYTHON {
        return Ok(Checked::NotChecked(
            "the lease has no python3 for the byte-exact client".into(),
        ));
    }
    let results = results(&out, 3)?;
    ensure(results[0]["first"] == "200", || {
        format!(
            "before the update, other.test (allowed) was not reached over a tunnel: {}",
            describe(&results[0])
        )
    })?;
    match updated {
        Some(Ok(_)) => {}
        Some(Err(e)) => return Err(format!("the update narrowing the policy was refused: {e}")),
        None => return Err("the client ended before its tunnel was open; nothing was updated".into()),
    }
    let received = seen(&https());
    ensure(!received.iter().any(|(_, p, _)| *p == path(1)), || {
        "after the update removed other.test, a new connection to it reached the test host".to_owned()
    })?;
    ensure(results[1]["connect"] == "403", || {
        format!(
            "after the update removed other.test, a new CONNECT to it was not refused with 403: {}",
            describe(&results[1])
        )
    })?;
    ensure(results[0]["held"] == "cut", || {
        format!(
            "after the update removed other.test, the tunnel already open to it was not cut (within 30 s): {}",
            describe(&results[0])
        )
    })?;
    ensure(received.iter().any(|(_, p, _)| *p == path(2)), || {
        format!(
            "after the update, web.test (still allowed) was not reached: {}",
            describe(&results[2])
        )
    })?;
    Ok(Checked::Yes)
}

/// The variable the lease's placeholder is in.
const PLACEHOLDER_ENV: &str = "ENVRT_KIT_TOKEN";

/// What the lease shows of itself, each part after its `@` marker: its variables, every
/// process's variables and command line, the small files of its usual places.
const SCAN: &str = "echo @environment; env; echo @processes; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\000' '\\n'; \
     echo @files; find \"$PWD\" \"$HOME\" /etc /tmp /root /home /.envrt -maxdepth 3 -xdev -type f -size -256k 2>/dev/null | head -n 4000 | \
     while read -r f; do cat \"$f\" 2>/dev/null; done | head -c 16777216; echo; ";

fn credential(ctx: &Ctx) -> Result<Checked, String> {
    if ctx.egress_host.as_ref().is_ok_and(|host| host.https_seen.is_none()) {
        return Ok(Checked::NotChecked(
            "the test host has no HTTPS server (openssl and python3 are needed)".into(),
        ));
    }
    // The secret lives in a file on the host, outside every place the scan looks.
    let parent = ["/var/tmp", "/tmp"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_dir())
        .unwrap_or("/tmp");
    let store = tempfile::Builder::new()
        .prefix("envrt-kit-secret-")
        .tempdir_in(parent)
        .map_err(|e| e.to_string())?;
    let secret = format!(
        "kit-secret-{}",
        ctx.marker("s").replace(|c: char| !c.is_ascii_alphanumeric(), "")
    );
    let file = store.path().join("token");
    std::fs::write(&file, &secret).map_err(|e| e.to_string())?;
    let credentials = [RawCredential {
        host: "web.test".into(),
        header: "Authorization".into(),
        value: "Bearer {secret}".into(),
        secret: format!("file:{}", file.display()),
        placeholder_env: Some(PLACEHOLDER_ENV.into()),
    }];
    let allow = ["web.test:443", "other.test:443"];
    let (host, environment) = match prepare_with(ctx, "credential", Egress::Allow, &allow, &credentials)? {
        Ok(ready) => ready,
        Err(why) => return Ok(Checked::NotChecked(why)),
    };
    let https = host.https_seen.clone().ok_or("the test host lost its HTTPS server")?;
    let marker = ctx.marker("cred");
    let path = |n: usize| format!("/{marker}-{n}");
    let bearer = format!("Bearer {PLACEHOLDER}");
    let ops = json!([
        ["tls", "web.test:443", "web.test", path(0), null, bearer],
        ["tls", "other.test:443", "other.test", path(1), null, bearer],
        // Fronting on the credentialed connection: its Host names the other host.
        ["tls", "web.test:443", "web.test", path(2), "other.test", bearer],
    ]);
    let lease_script = format!("{SCAN}echo \"@placeholder ${{{PLACEHOLDER_ENV}:-}}\"; {}", script(&ops));
    let out = run(ctx, &environment, &lease_script)?;
    if out.lines().any(|line| line.trim() == NO_PYTHON) {
        return Ok(Checked::NotChecked(
            "the lease has no python3 for the byte-exact client".into(),
        ));
    }
    let leaked: Vec<&str> = out
        .split("\n@")
        .filter(|part| part.contains(&secret))
        .map(
            |part| match part.split_whitespace().next().unwrap_or("").trim_start_matches('@') {
                "result" => "answers",
                "processes" => "processes (variables or command lines)",
                "environment" => "environment",
                "files" => "files",
                _ => "output",
            },
        )
        .collect();
    ensure(leaked.is_empty(), || {
        format!("the secret reached the lease: in its {}", leaked.join(", "))
    })?;
    let placeholder = out
        .lines()
        .find_map(|line| line.strip_prefix("@placeholder"))
        .map(str::trim)
        .unwrap_or_default();
    ensure(placeholder == PLACEHOLDER, || {
        format!("the lease's {PLACEHOLDER_ENV} is {placeholder:?}, not the placeholder {PLACEHOLDER:?}")
    })?;
    let results = results(&out, 3)?;
    let received = seen(&https());
    let auth_of = |n: usize| {
        received
            .iter()
            .find(|(_, p, _)| *p == path(n))
            .map(|(_, _, auth)| auth.clone().unwrap_or_default())
    };
    let real = format!("Bearer {secret}");
    match auth_of(0) {
        None => {
            return Err(format!(
                "the credentialed host web.test was not reached through the proxy: {}",
                describe(&results[0])
            ));
        }
        Some(auth) => ensure(auth == real, || {
            format!("the credentialed host web.test did not receive the secret: its Authorization was {auth:?}")
        })?,
    }
    for (n, what) in [
        (1, "other.test, which carries no credential"),
        (2, "a request naming other.test in its Host header"),
    ] {
        ensure(!auth_of(n).is_some_and(|auth| auth.contains(&secret)), || {
            format!("the secret was put on {what}")
        })?;
    }
    ensure(auth_of(1).as_deref() == Some(bearer.as_str()), || {
        format!(
            "other.test (allowed, no credential) did not receive the lease's request as it was sent: {}",
            describe(&results[1])
        )
    })?;
    Ok(Checked::Yes)
}
