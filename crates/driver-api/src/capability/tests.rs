//! Unit tests of the capability classifier: support sets, verified verbs, declarations, narrowing and wire names.

use super::*;
use serde_json::json;

fn all_supported() -> SupportSet {
    CapabilityKey::ALL.into_iter().collect()
}

fn all_verbs() -> VerbSet {
    [
        verbs::RESUME_LEASE,
        verbs::RELEASE_LEASE,
        verbs::DESTROY_LEASE,
        verbs::REALIZE_WORKSPACE,
        verbs::EXECUTE,
        verbs::SYNC_IN,
        verbs::SYNC_OUT,
        verbs::DUPLEX_OPEN,
        verbs::RUNNER_INGRESS,
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

fn declare_all(value: bool) -> CapabilityDeclaration {
    CapabilityDeclaration::from_fn(|_| Some(value))
}

#[test]
fn no_verified_verbs_means_all_false_even_with_everything_declared() {
    let declaration = declare_all(true);
    let none = VerbSet::new();
    for verified in [None, Some(&none)] {
        let snap = classify(&ClassifierInput {
            supported: all_supported(),
            verified,
            declaration: Some(&declaration),
            narrowing: None,
        });
        assert_eq!(snap, CapabilitySnapshot::default());
    }
}

#[test]
fn a_declaration_never_grants_an_unverified_key() {
    let declaration = declare_all(true);
    for key in CapabilityKey::ALL {
        // Verify every verb except the ones this key needs.
        let needed: BTreeSet<&str> = key.verb_groups().iter().flat_map(|g| g.iter().copied()).collect();
        let verified: VerbSet = all_verbs()
            .into_iter()
            .filter(|v| !needed.contains(v.as_str()))
            .collect();
        let snap = classify(&ClassifierInput {
            supported: all_supported(),
            verified: Some(&verified),
            declaration: Some(&declaration),
            narrowing: None,
        });
        assert!(!snap.get(key), "{} granted without its verbs", key.as_str());
    }
}

#[test]
fn a_declaration_never_grants_an_unsupported_key() {
    let declaration = declare_all(true);
    let verified = all_verbs();
    for key in CapabilityKey::ALL {
        let supported: SupportSet = CapabilityKey::ALL.into_iter().filter(|k| *k != key).collect();
        let snap = classify(&ClassifierInput {
            supported,
            verified: Some(&verified),
            declaration: Some(&declaration),
            narrowing: None,
        });
        assert!(!snap.get(key));
        assert!(snap.entries().filter(|(k, _)| *k != key).all(|(_, v)| v));
    }
}

#[test]
fn opt_in_keys_stay_false_without_a_positive_declaration() {
    let verified = all_verbs();
    let empty = CapabilityDeclaration::default();
    for declaration in [None, Some(&empty)] {
        let snap = classify(&ClassifierInput {
            supported: all_supported(),
            verified: Some(&verified),
            declaration,
            narrowing: None,
        });
        for (key, value) in snap.entries() {
            assert_eq!(value, !key.is_opt_in(), "{}", key.as_str());
        }
    }
    let opt_in: Vec<_> = CapabilityKey::ALL.into_iter().filter(|k| k.is_opt_in()).collect();
    assert_eq!(
        opt_in,
        [
            CapabilityKey::IncrementalSessionOutput,
            CapabilityKey::ConcurrentSyncOperations,
            CapabilityKey::DuplexCommandStream,
            CapabilityKey::RunnerWebSocketIngress
        ]
    );
}

#[test]
fn a_declaration_can_remove_a_default_key() {
    let verified = all_verbs();
    let declaration = CapabilityDeclaration {
        native_sync_in: Some(false),
        ..Default::default()
    };
    let snap = classify(&ClassifierInput {
        supported: all_supported(),
        verified: Some(&verified),
        declaration: Some(&declaration),
        narrowing: None,
    });
    assert!(!snap.native_sync_in);
    assert!(snap.native_sync_out);
}

#[test]
fn multi_verb_keys_need_every_verb() {
    let declaration = declare_all(true);
    let cases: [(CapabilityKey, &[&str]); 2] = [
        (
            CapabilityKey::ReusableLeases,
            &[verbs::RESUME_LEASE, verbs::RELEASE_LEASE, verbs::DESTROY_LEASE],
        ),
        (
            CapabilityKey::ConcurrentSyncOperations,
            &[verbs::SYNC_IN, verbs::SYNC_OUT],
        ),
    ];
    for (key, needed) in cases {
        let full: VerbSet = needed.iter().map(|s| s.to_string()).collect();
        let classify_with = |verified: &VerbSet| {
            classify(&ClassifierInput {
                supported: all_supported(),
                verified: Some(verified),
                declaration: Some(&declaration),
                narrowing: None,
            })
            .get(key)
        };
        assert!(classify_with(&full), "{} with all verbs", key.as_str());
        for missing in needed {
            let partial: VerbSet = full.iter().filter(|v| v != missing).cloned().collect();
            assert!(!classify_with(&partial), "{} without {missing}", key.as_str());
        }
    }
}

fn snapshot_with(narrowing: &Narrowing) -> CapabilitySnapshot {
    let verified = all_verbs();
    let declaration = declare_all(true);
    classify(&ClassifierInput {
        supported: all_supported(),
        verified: Some(&verified),
        declaration: Some(&declaration),
        narrowing: Some(narrowing),
    })
}

#[test]
fn narrowing_by_policy() {
    for policy in [
        LeasePolicy::Ephemeral,
        LeasePolicy::ReuseByEnvironment,
        LeasePolicy::ReuseByExecutionWorkspace,
        LeasePolicy::RetainOnFailure,
    ] {
        let snap = snapshot_with(&narrow_for_lease(Some(policy), None, true));
        assert_eq!(snap.reusable_leases, policy == LeasePolicy::ReuseByEnvironment);
        assert!(snap.native_sync_in && snap.duplex_command_stream);
    }
}

#[test]
fn narrowing_by_job_backend_and_sync_unsupported() {
    let cases = [
        (json!({"backend": "job"}), false),
        (json!({"nativeFileSyncUnsupported": true}), false),
        (json!({"backend": "vm", "nativeFileSyncUnsupported": false}), true),
        (json!({"nativeFileSyncUnsupported": "true"}), true),
    ];
    for (meta, sync) in cases {
        let meta = meta.as_object().unwrap().clone();
        let snap = snapshot_with(&narrow_for_lease(None, Some(&meta), true));
        assert_eq!(snap.native_sync_in, sync, "{meta:?}");
        assert_eq!(snap.native_sync_out, sync, "{meta:?}");
        assert!(snap.concurrent_sync_operations, "only the two native sync keys narrow");
        assert!(snap.persistent_process_sessions);
    }
}

#[test]
fn narrowing_by_failed_configuration() {
    let snap = snapshot_with(&narrow_for_lease(None, None, false));
    assert!(!snap.persistent_process_sessions);
    assert!(!snap.incremental_session_output);
    assert!(!snap.duplex_command_stream);
    assert!(snap.independent_control_commands);
    assert!(snap.native_sync_in && snap.reusable_leases && snap.runner_web_socket_ingress);
}

#[test]
fn the_snapshot_always_has_exactly_nine_keys() {
    let snap = snapshot_with(&narrow_for_lease(Some(LeasePolicy::Ephemeral), None, false));
    let json = serde_json::to_value(snap).unwrap();
    let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected: Vec<&str> = CapabilityKey::ALL.iter().map(|k| k.as_str()).collect();
    expected.sort();
    let mut keys_sorted = keys.clone();
    keys_sorted.sort();
    assert_eq!(keys_sorted, expected);
    assert_eq!(snap.to_json().len(), 9);
    // A partial object deserializes to a full snapshot (missing keys false).
    let partial: CapabilitySnapshot = serde_json::from_value(json!({"nativeSyncIn": true})).unwrap();
    assert_eq!(partial.entries().count(), 9);
    assert!(partial.native_sync_in && !partial.native_sync_out);
}

#[test]
fn wire_names_round_trip() {
    for key in CapabilityKey::ALL {
        assert_eq!(CapabilityKey::from_wire(key.as_str()), Some(key));
        assert_eq!(serde_json::to_value(key).unwrap(), json!(key.as_str()));
    }
    assert_eq!(CapabilityKey::from_wire("bogus"), None);
}
