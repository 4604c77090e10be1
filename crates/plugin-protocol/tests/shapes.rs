//! The typed params and results serialize as the SDK's shapes and read leniently.

use envrt_plugin_protocol::duplex::CloseParams;
use envrt_plugin_protocol::environment::{
    AcquireLeaseParams, DriverBase, EndLeaseParams, EndState, ExecuteParams, LeaseRef, ListLeasesResult,
    TerminationReceipt,
};
use envrt_plugin_protocol::to_value;
use serde_json::json;

fn base() -> DriverBase {
    DriverBase {
        driver_key: "sandbox".into(),
        company_id: "co-1".into(),
        environment_id: "env-1".into(),
        issue_id: None,
        config: serde_json::Map::new(),
    }
}

#[test]
fn execute_params_are_the_sdk_shape_with_absent_options_left_out() {
    let params = ExecuteParams {
        base: base(),
        lease: LeaseRef {
            provider_lease_id: Some("sbx-1".into()),
            metadata: Some(serde_json::Map::new()),
            expires_at: None,
        },
        command: "echo".into(),
        args: vec!["hi".into()],
        timeout_ms: Some(5000),
        ..ExecuteParams::default()
    };
    assert_eq!(
        to_value(&params),
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {},
               "lease": {"providerLeaseId": "sbx-1", "metadata": {}}, "command": "echo", "args": ["hi"],
               "timeoutMs": 5000})
    );
}

#[test]
fn acquire_and_end_params_carry_their_fields_and_extensions() {
    let acquire = AcquireLeaseParams {
        base: base(),
        run_id: "run-1".into(),
        requested_expires_at: Some("2026-01-01T00:00:00Z".into()),
        envrt_lease_id: Some("lease-1".into()),
        ..AcquireLeaseParams::default()
    };
    assert_eq!(
        to_value(&acquire),
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {},
               "runId": "run-1", "requestedExpiresAt": "2026-01-01T00:00:00Z", "envrtLeaseId": "lease-1"})
    );
    let end = EndLeaseParams {
        base: base(),
        provider_lease_id: None,
        lease_metadata: None,
        cancel_active_work: Some(true),
    };
    assert_eq!(
        to_value(&end),
        json!({"driverKey": "sandbox", "companyId": "co-1", "environmentId": "env-1", "config": {},
               "providerLeaseId": null, "cancelActiveWork": true})
    );
}

#[test]
fn driver_fields_read_leniently() {
    let read: EndLeaseParams =
        serde_json::from_value(json!({"driverKey": null, "config": null, "providerLeaseId": "sbx-1"})).unwrap();
    assert_eq!(read.base, DriverBase::default());
    assert_eq!(read.provider_lease_id.as_deref(), Some("sbx-1"));
    let read: EndLeaseParams = serde_json::from_value(json!({})).unwrap();
    assert_eq!(read.provider_lease_id, None);
}

#[test]
fn results_and_acks_have_the_sdk_shapes() {
    let receipt = TerminationReceipt {
        provider_lease_id: "sbx-1".into(),
        state: EndState::Destroyed,
    };
    assert_eq!(
        to_value(&receipt),
        json!({"providerLeaseId": "sbx-1", "state": "destroyed"})
    );
    let close = CloseParams {
        host_route_id: "duplex-route-1".into(),
        worker_session_id: None,
    };
    assert_eq!(to_value(&close), json!({"hostRouteId": "duplex-route-1"}));
    let list: ListLeasesResult =
        serde_json::from_value(json!({"leases": [{"providerLeaseId": "sbx-1", "envrtLeaseId": "l-1"}]})).unwrap();
    assert_eq!(list.leases[0].envrt_lease_id.as_deref(), Some("l-1"));
}
