//! Capability honesty, both directions, for every optional operation: absent (or not
//! granted on the lease) ⇒ the exact refusal and the driver is never called; present ⇒
//! no refusal.

use envrt_runtime_core::{
    CapabilityKey, ExecuteRequest, Lease, LeasePolicy, RuntimeError, SyncOperation, UnsupportedOperation,
    WorkspaceRequest,
};

use super::{Check, always};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::new("honesty_resume", always, resume)
        .promise("Resume works exactly when the driver has the group and the snapshot grants reusableLeases."),
    Check::new("honesty_destroy", always, destroy)
        .promise("Destroy works exactly when the driver has the group, else the exact refusal."),
    Check::new("honesty_realize", always, realize)
        .promise("Realize works exactly when the driver has the group, else the exact refusal."),
    Check::new("honesty_execute", always, execute)
        .promise("Execute works exactly when the driver has the group, else the exact refusal."),
    Check::new("honesty_sync_in", always, sync_in)
        .promise("Sync in works exactly when the driver has sync and the snapshot grants nativeSyncIn."),
    Check::new("honesty_sync_out", always, sync_out)
        .promise("Sync out works exactly when the driver has sync and the snapshot grants nativeSyncOut."),
    Check::new("honesty_supports_sync", always, supports_sync)
        .promise("supports_sync is true exactly when both sync directions work on the lease."),
    Check::new("honesty_duplex", always, duplex)
        .promise("Duplex opens exactly when the driver has the group and the snapshot grants duplexCommandStream."),
    Check::new("honesty_duplex_shape", always, duplex_shape)
        .promise("Each duplex shape gets its own refusal, and a driver error never reads like one."),
    Check::new("honesty_verbs_match_groups", always, verbs_match_groups)
        .promise("The verified verbs match the optional groups the driver implements."),
    Check::new("honesty_snapshot_has_nine_keys", always, nine_keys)
        .promise("Every snapshot holds exactly the nine capability keys."),
    Check::new("honesty_unknown_lease", always, unknown_lease)
        .promise("Execute on an unknown lease id is refused with the lease not-found text."),
];

/// Asserts that `result` is the refusal `expected` and that `operation` never reached the
/// driver.
fn refused<T>(
    ctx: &Ctx,
    result: Result<T, RuntimeError>,
    expected: &str,
    operation: &str,
    calls_before: usize,
) -> Result<(), String> {
    match result {
        Ok(_) => Err(format!(
            "expected the refusal {expected:?}, but the operation succeeded"
        )),
        Err(error) => {
            ensure_eq(error.to_string().as_str(), expected, "refusal text")?;
            ensure_eq(
                ctx.recorder.calls(operation),
                calls_before,
                "calls that reached the driver",
            )
        }
    }
}

fn unsupported(ctx: &Ctx, what: &str) -> String {
    format!("Environment driver \"{}\" does not support {what}.", ctx.key)
}

fn resume(ctx: &Ctx) -> Result<(), String> {
    for policy in [LeasePolicy::Ephemeral, LeasePolicy::ReuseByEnvironment] {
        ctx.with_lease(policy, |lease| async move {
            let snapshot = ctx
                .runtime
                .resolve_capabilities(&lease.id)
                .await
                .map_err(|e| e.to_string())?;
            let granted = snapshot.map(|s| s.reusable_leases).unwrap_or(false);
            let before = ctx.recorder.calls("resume_lease");
            if ctx.profile.has_resume && granted {
                ctx.runtime
                    .release_lease(&lease.id, envrt_runtime_core::LeaseStatus::Released)
                    .await
                    .map_err(|e| e.to_string())?;
                let resumed = ctx
                    .runtime
                    .resume_lease(&lease.id)
                    .await
                    .map_err(|e| format!("resume: {e}"))?;
                ensure_eq(
                    resumed.status,
                    envrt_runtime_core::LeaseStatus::Active,
                    "status after resume",
                )
            } else {
                let result = ctx.runtime.resume_lease(&lease.id).await;
                refused(ctx, result, &unsupported(ctx, "lease resume"), "resume_lease", before)
            }
        })?;
    }
    Ok(())
}

fn destroy(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let before = ctx.recorder.calls("destroy_lease");
        if ctx.profile.has_destroy {
            for attempt in 1..=2 {
                ctx.runtime
                    .destroy_lease(&lease.id)
                    .await
                    .map_err(|e| format!("destroy #{attempt}: {e}"))?;
            }
            Ok(())
        } else {
            let result = ctx.runtime.destroy_lease(&lease.id).await;
            refused(ctx, result, &unsupported(ctx, "lease destroy"), "destroy_lease", before)
        }
    })
}

fn realize(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let before = ctx.recorder.calls("realize_workspace");
        let result = ctx
            .runtime
            .realize_workspace(&lease.id, &WorkspaceRequest::default())
            .await;
        if ctx.profile.has_realize {
            let workspace = result.map_err(|e| format!("realize: {e}"))?;
            ensure(workspace.cwd.starts_with('/'), || {
                format!("realized cwd {:?} is not absolute", workspace.cwd)
            })
        } else {
            refused(
                ctx,
                result,
                &unsupported(ctx, "workspace realization"),
                "realize_workspace",
                before,
            )
        }
    })
}

fn execute(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let before = ctx.recorder.calls("execute");
        let result = ctx
            .runtime
            .execute(&lease.id, ExecuteRequest::new("true", Vec::<String>::new()))
            .await;
        if ctx.profile.has_execute {
            let result = result.map_err(|e| format!("execute `true`: {e}"))?;
            ensure_eq(result.exit_code, Some(0), "exit code of `true`")
        } else {
            refused(ctx, result, &unsupported(ctx, "command execution"), "execute", before)
        }
    })
}

fn empty_operation() -> Vec<SyncOperation> {
    vec![SyncOperation {
        operation_id: "empty".into(),
        files: Vec::new(),
        post_upload_commands: Vec::new(),
    }]
}

async fn sync_direction(ctx: &Ctx, lease: &Lease, key: CapabilityKey) -> Result<(), String> {
    let (operation, granted) = match key {
        CapabilityKey::NativeSyncIn => ("sync_in", snapshot_of(ctx, lease).await?.native_sync_in),
        _ => ("sync_out", snapshot_of(ctx, lease).await?.native_sync_out),
    };
    let before = ctx.recorder.calls(operation);
    let ops = empty_operation();
    let result = if operation == "sync_in" {
        ctx.runtime.sync_in(&lease.id, &ops).await
    } else {
        ctx.runtime.sync_out(&lease.id, &ops).await
    };
    if ctx.profile.has_sync && granted {
        let result = result.map_err(|e| format!("{operation} with an empty operation: {e}"))?;
        ensure_eq(result.operations.len(), 1, "operations in the result")?;
        ensure_eq(result.operations[0].operation_id.as_str(), "empty", "operation id")?;
        ensure_eq(result.operations[0].files_transferred, 0, "files transferred")
    } else {
        refused(ctx, result, &unsupported(ctx, "native file sync"), operation, before)
    }
}

async fn snapshot_of(ctx: &Ctx, lease: &Lease) -> Result<envrt_runtime_core::CapabilitySnapshot, String> {
    ctx.runtime
        .resolve_capabilities(&lease.id)
        .await
        .map_err(|e| format!("resolve_capabilities: {e}"))?
        .ok_or_else(|| "resolve_capabilities returned none for a registered driver".into())
}

fn sync_in(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        sync_direction(ctx, &lease, CapabilityKey::NativeSyncIn).await
    })
}

fn sync_out(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        sync_direction(ctx, &lease, CapabilityKey::NativeSyncOut).await
    })
}

fn supports_sync(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let snapshot = snapshot_of(ctx, &lease).await?;
        let expected = ctx.profile.has_sync && snapshot.native_sync_in && snapshot.native_sync_out;
        ensure_eq(ctx.runtime.supports_sync(&lease.id).await, expected, "supports_sync")?;
        ensure_eq(
            ctx.runtime.supports_sync("no-such-lease").await,
            false,
            "supports_sync of an unknown lease",
        )
    })
}

fn duplex(ctx: &Ctx) -> Result<(), String> {
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let snapshot = snapshot_of(ctx, &lease).await?;
        let before = ctx.recorder.calls("open_duplex_channel");
        let argv = vec!["cat".to_string()];
        let result = ctx.runtime.open_duplex_channel(&lease.id, &argv).await;
        if !ctx.profile.has_duplex {
            return refused(
                ctx,
                result,
                &unsupported(ctx, "duplex channels"),
                "open_duplex_channel",
                before,
            );
        }
        if !snapshot.duplex_command_stream {
            return refused(
                ctx,
                result,
                "Sandbox lease does not grant the duplex command stream capability.",
                "open_duplex_channel",
                before,
            );
        }
        let channel = result.map_err(|e| format!("open_duplex_channel despite the capability: {e}"))?;
        let outcome = async {
            channel.write(b"ping").await.map_err(|e| format!("write: {e}"))?;
            let got = super::duplex::read_up_to(channel.as_ref(), 4).await?;
            ensure_eq(got.as_slice(), b"ping".as_slice(), "echoed bytes")
        }
        .await;
        let _ = channel.close().await;
        outcome
    })
}

fn nine_keys(ctx: &Ctx) -> Result<(), String> {
    for (what, snapshot) in [
        ("environment", ctx.profile.environment),
        ("ephemeral lease", ctx.profile.ephemeral),
        ("reusable lease", ctx.profile.reusable),
    ] {
        let json = serde_json::to_value(snapshot).map_err(|e| e.to_string())?;
        let keys: Vec<String> = json
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        ensure_eq(keys.len(), 9, &format!("keys in the {what} snapshot"))?;
        for key in CapabilityKey::ALL {
            ensure(keys.iter().any(|k| k == key.as_str()), || {
                format!("{what} snapshot lacks {}", key.as_str())
            })?;
        }
    }
    ensure(!ctx.profile.ephemeral.reusable_leases, || {
        "an ephemeral lease claims reusableLeases".into()
    })
}

fn unknown_lease(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let err = ctx
            .runtime
            .execute("no-such-lease", ExecuteRequest::new("true", Vec::<String>::new()))
            .await
            .err()
            .ok_or("execute on an unknown lease succeeded")?;
        ensure_eq(
            err.to_string().as_str(),
            "Lease \"no-such-lease\" was not found.",
            "error text",
        )
    })
}

/// Pins which refusal each duplex shape must produce, by variant and not only by text:
/// - no duplex group: the method refusal (`Unsupported` with `UnsupportedOperation::Duplex`);
/// - a group whose capability the driver's declaration withholds: the capability refusal
///   (`DuplexNotGranted`, not caused by a failing resolution);
/// - a group the driver verifies but never grants while nothing withholds it: a fault (the
///   caller gets the capability refusal where the contract wants the method refusal);
/// - granted: the channel opens, and a driver error never carries a refusal text of its
///   own (`does not support duplex` / `does not grant the duplex`).
fn duplex_shape(ctx: &Ctx) -> Result<(), String> {
    let inner = ctx.recorder.inner();
    let group = inner.as_duplex().is_some();
    let verified = inner.verified_verbs().contains("duplexChannelOpen");
    ensure(group == verified, || {
        if group {
            "the driver has a duplex group but does not verify duplexChannelOpen, so it can never \
             grant duplexCommandStream: callers get the capability refusal where the contract wants \
             the method refusal"
                .into()
        } else {
            "the driver verifies duplexChannelOpen but has no duplex group".into()
        }
    })?;
    ctx.with_lease(LeasePolicy::Ephemeral, |lease| async move {
        let granted = snapshot_of(ctx, &lease).await?.duplex_command_stream;
        ensure(!group || granted || ctx.profile.duplex_withheld, || {
            "the driver has a duplex group and verifies duplexChannelOpen, but the lease does not \
             grant duplexCommandStream and no declaration withholds it: a driver that never grants \
             duplex must not have the group (the contract wants the method refusal)"
                .into()
        })?;
        let argv = vec!["cat".to_string()];
        match ctx.runtime.open_duplex_channel(&lease.id, &argv).await {
            Err(RuntimeError::Unsupported {
                operation: UnsupportedOperation::Duplex,
                ..
            }) if !group => Ok(()),
            Err(RuntimeError::DuplexNotGranted { cause: None }) if group && !granted => Ok(()),
            Err(RuntimeError::DuplexNotGranted { cause: Some(cause) }) => Err(format!(
                "the capability resolution failed during the duplex gate: {cause}"
            )),
            Err(RuntimeError::Driver(e)) if looks_like_refusal(&e.to_string()) => Err(format!(
                "the driver answered with a refusal text of its own ({:?}) on a lease that {} \
                 duplexCommandStream",
                e.to_string(),
                if granted { "grants" } else { "does not grant" }
            )),
            Err(other) => Err(format!(
                "wrong refusal for this shape (group: {group}, granted: {granted}): {other} ({other:?})"
            )),
            Ok(channel) if group && granted => {
                let _ = channel.close().await;
                Ok(())
            }
            Ok(channel) => {
                let _ = channel.close().await;
                Err(format!(
                    "a channel opened without the group or the grant (group: {group}, granted: {granted})"
                ))
            }
        }
    })
}

fn looks_like_refusal(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("does not support duplex") || text.contains("does not grant the duplex")
}

/// The optional groups and the verified verbs tell the same story: a verified verb with no
/// group behind it (or a group whose verb is not verified) makes the classifier and the
/// facade disagree.
fn verbs_match_groups(ctx: &Ctx) -> Result<(), String> {
    let inner = ctx.recorder.inner();
    let verbs = inner.verified_verbs();
    let groups: [(&str, bool, &[&str]); 6] = [
        ("resume", inner.as_resume().is_some(), &["environmentResumeLease"]),
        ("destroy", inner.as_destroy().is_some(), &["environmentDestroyLease"]),
        ("execute", inner.as_execute().is_some(), &["environmentExecute"]),
        (
            "sync",
            inner.as_sync().is_some(),
            &["environmentSyncIn", "environmentSyncOut"],
        ),
        ("duplex", inner.as_duplex().is_some(), &["duplexChannelOpen"]),
        (
            "runner ingress",
            inner.as_runner_ingress().is_some(),
            &["environmentRunnerIngressEndpoint"],
        ),
    ];
    let mut wrong = Vec::new();
    for (group, present, names) in groups {
        for name in names {
            if verbs.contains(*name) && !present {
                wrong.push(format!("{name} is verified but there is no {group} group"));
            }
            if present && !verbs.contains(*name) {
                wrong.push(format!("the {group} group exists but {name} is not verified"));
            }
        }
    }
    ensure(wrong.is_empty(), || wrong.join("; "))
}
