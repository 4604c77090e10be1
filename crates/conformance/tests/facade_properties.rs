//! Property: over arbitrary driver shapes (which optional groups exist) × declarations ×
//! per-lease narrowing × failing capability resolution, every facade call either succeeds
//! or fails with exactly the refusal the contract names; a refusal never reaches the
//! driver; and the capability snapshot agrees with the outcome.

use std::sync::Arc;

use envrt_runtime_core::testkit::{ProbeDriver, ProbeShape};
use envrt_runtime_core::*;
use proptest::prelude::*;
use serde_json::json;

fn shape() -> impl Strategy<Value = ProbeShape> {
    any::<[bool; 6]>().prop_map(|b| ProbeShape {
        resume: b[0],
        destroy: b[1],
        realize: b[2],
        execute: b[3],
        sync: b[4],
        duplex: b[5],
    })
}

fn declaration() -> impl Strategy<Value = Option<CapabilityDeclaration>> {
    proptest::option::of(any::<[Option<bool>; 9]>().prop_map(|values| {
        CapabilityDeclaration::from_fn(|k| values[CapabilityKey::ALL.iter().position(|x| *x == k).unwrap()])
    }))
}

fn policy() -> impl Strategy<Value = LeasePolicy> {
    prop_oneof![
        Just(LeasePolicy::Ephemeral),
        Just(LeasePolicy::ReuseByEnvironment),
        Just(LeasePolicy::ReuseByExecutionWorkspace),
        Just(LeasePolicy::RetainOnFailure),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    shape: ProbeShape,
    declaration: Option<CapabilityDeclaration>,
    policy: LeasePolicy,
    job_backend: bool,
    sync_unsupported: bool,
    fail_capabilities: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        shape(),
        declaration(),
        policy(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(shape, declaration, policy, job_backend, sync_unsupported, fail_capabilities)| Case {
                shape,
                declaration,
                policy,
                job_backend,
                sync_unsupported,
                fail_capabilities,
            },
        )
}

/// The snapshot the contract's section 4 predicts for the case, computed from the verb
/// table directly rather than through the driver.
fn predicted(case: &Case) -> CapabilitySnapshot {
    let s = case.shape;
    let has = |verb: &str| match verb {
        "environmentResumeLease" => s.resume,
        "environmentReleaseLease" => true,
        "environmentDestroyLease" => s.destroy,
        "environmentExecute" => s.execute,
        "environmentSyncIn" | "environmentSyncOut" => s.sync,
        "duplexChannelOpen" => s.duplex,
        _ => false,
    };
    CapabilitySnapshot::from_fn(|key| {
        let verified = key.verb_groups().iter().all(|g| g.iter().any(|v| has(v)));
        let declared = case.declaration.and_then(|d| d.get(key)).unwrap_or(!key.is_opt_in());
        let narrowed = match key {
            CapabilityKey::ReusableLeases => case.policy == LeasePolicy::ReuseByEnvironment,
            CapabilityKey::NativeSyncIn | CapabilityKey::NativeSyncOut => !(case.job_backend || case.sync_unsupported),
            // The probe has no process group, so it does not support the key at all.
            CapabilityKey::PersistentProcessSessions => false,
            _ => true,
        };
        verified && declared && narrowed
    })
}

fn check(case: Case) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async move {
        let driver = Arc::new(ProbeDriver::new("probe", case.shape, case.declaration));
        let runtime = EnvironmentRuntime::new();
        runtime.register_driver(driver.clone());
        runtime
            .put_environment(Environment::new("e", "E", "probe"))
            .await
            .unwrap();
        let mut request = AcquireRequest::new("e", "acme");
        request.policy = case.policy;
        if case.job_backend {
            request.metadata.insert("backend".into(), json!("job"));
        }
        if case.sync_unsupported {
            request.metadata.insert("nativeFileSyncUnsupported".into(), json!(true));
        }
        let lease = runtime.acquire_lease(request).await.unwrap();
        let expected = predicted(&case);
        let snapshot = runtime.resolve_capabilities(&lease.id).await.unwrap().unwrap();
        prop_assert_eq!(snapshot, expected);
        driver.set_fail_capabilities(case.fail_capabilities);
        let caps_ok = !case.fail_capabilities;
        let id = lease.id.as_str();
        let key = "probe";
        let unsupported = |what: &str| format!("Environment driver \"{key}\" does not support {what}.");

        // Each operation: (outcome, the refusal expected or None, the driver operation).
        let s = case.shape;
        let realize = runtime
            .realize_workspace(id, &WorkspaceRequest::default())
            .await
            .map(|_| ());
        let execute = runtime.execute(id, ExecuteRequest::new("x", ["y"])).await.map(|_| ());
        let sync_in = runtime.sync_in(id, &[]).await.map(|_| ());
        let sync_out = runtime.sync_out(id, &[]).await.map(|_| ());
        let duplex = runtime.open_duplex_channel(id, &["cat".to_string()]).await.map(|_| ());
        let resume = runtime.resume_lease(id).await.map(|_| ());
        let destroy = runtime.destroy_lease(id).await.map(|_| ());
        let granted = "Sandbox lease does not grant the duplex command stream capability.".to_string();
        let table: Vec<(&str, Result<(), RuntimeError>, Option<String>)> = vec![
            (
                "realize_workspace",
                realize,
                (!s.realize).then(|| unsupported("workspace realization")),
            ),
            (
                "execute",
                execute,
                (!s.execute).then(|| unsupported("command execution")),
            ),
            (
                "sync_in",
                sync_in,
                (!(s.sync && caps_ok && expected.native_sync_in)).then(|| unsupported("native file sync")),
            ),
            (
                "sync_out",
                sync_out,
                (!(s.sync && caps_ok && expected.native_sync_out)).then(|| unsupported("native file sync")),
            ),
            (
                "open_duplex_channel",
                duplex,
                if !s.duplex {
                    Some(unsupported("duplex channels"))
                } else if !(caps_ok && expected.duplex_command_stream) {
                    Some(granted.clone())
                } else {
                    None
                },
            ),
            (
                "resume_lease",
                resume,
                (!(s.resume && caps_ok && expected.reusable_leases)).then(|| unsupported("lease resume")),
            ),
            (
                "destroy_lease",
                destroy,
                (!s.destroy).then(|| unsupported("lease destroy")),
            ),
        ];
        for (operation, outcome, refusal) in table {
            match (outcome, refusal) {
                (Ok(()), None) => prop_assert_eq!(driver.calls(operation), 1, "{} called once", operation),
                (Err(e), Some(text)) => {
                    prop_assert_eq!(e.to_string(), text, "{}", operation);
                    prop_assert_eq!(driver.calls(operation), 0, "{} reached the driver", operation);
                }
                (Ok(()), Some(text)) => prop_assert!(false, "{} succeeded; expected {}", operation, text),
                (Err(e), None) => prop_assert!(false, "{} failed unexpectedly: {}", operation, e),
            }
        }
        // The snapshot agrees with the outcome where resolution works.
        if caps_ok {
            prop_assert_eq!(
                runtime.supports_sync(id).await,
                s.sync && expected.native_sync_in && expected.native_sync_out
            );
        } else {
            prop_assert!(!runtime.supports_sync(id).await);
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_call_succeeds_or_gives_exactly_the_contract_refusal(case in case()) {
        check(case)?;
    }
}
