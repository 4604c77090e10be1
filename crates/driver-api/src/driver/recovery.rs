//! The recovery group: what a driver really holds in its backend (its inventory), and
//! removing what no lease keeps.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::DriverError;
use crate::model::Lease;

/// One backend resource a driver made for a lease, as its [`Recovery::inventory`] finds it
/// in the real backend (not in the store).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryItem {
    /// What it is, in the driver's words: `container`, `workspace`, `sandbox`, `process`.
    pub kind: String,
    /// The driver's handle for it: a container id, a path, a sandbox id, a pid.
    pub id: String,
    /// The lease it was made for, when the resource records it. An item with none is
    /// never reaped by reconciliation (nothing proves it is the driver's to remove).
    pub lease_id: Option<String>,
}

/// The recovery group: what a driver really holds in its backend, and removing what no
/// lease keeps. Reconciliation keeps every item whose lease is active, retained, pending
/// clean-up, or released but reusable; it reaps the rest.
#[async_trait]
pub trait Recovery: Send + Sync {
    /// Every resource this driver instance made, as the backend (not the store) holds it.
    ///
    /// Needs no capability: recovery is not a contract verb. Called by
    /// `EnvironmentRuntime::reconcile` and `envrt gc`
    /// for every registered driver that has the group (section 8, "Reconciliation").
    ///
    /// - MUST be scoped by the driver's own configuration (a state directory, a label set,
    ///   a worker), and find what any process made, not only this one.
    /// - SHOULD name the lease of each item ([`InventoryItem::lease_id`]); an item with none
    ///   is never reaped.
    /// - An error is reported as `envrt: gc could not reconcile driver "{key}": {error}`;
    ///   the other drivers are still reconciled.
    async fn inventory(&self) -> Result<Vec<InventoryItem>, DriverError>;
    /// Removes one item of [`inventory`](Self::inventory) that no lease keeps.
    ///
    /// The facade calls it only for an item whose lease is not active, retained, pending
    /// clean-up or released under `reuse_by_environment`, and, when the store did not know
    /// the lease, only after a second look `RECONCILE_SETTLE` (envrt-runtime-core)
    /// later; never on a dry run.
    ///
    /// - MUST be idempotent: an item already gone is success.
    /// - MUST refuse an item that is not this driver's to remove (section 8 lists the local
    ///   and Docker texts: `Invalid input: ...`).
    async fn reap(&self, item: &InventoryItem) -> Result<(), DriverError>;
    /// Kills what an active lease whose holder died left running, before the runtime
    /// releases it (the holder's process table died with it).
    ///
    /// - Returns how many processes were killed (`Ok(0)` when nothing is left). The
    ///   default has nothing to kill.
    async fn kill_leftovers(&self, _lease: &Lease) -> Result<usize, DriverError> {
        Ok(0)
    }
    /// Whether an active lease is lost: the backend resource its operations need (its
    /// workspace, container, sandbox) is gone, removed behind envrt's back, so every
    /// operation on it would answer [`DriverError::ResourceGone`]. `envrt gc` ends such
    /// leases (records them `failed`, reason `lease_lost`) with the driver's release,
    /// which cleans what is left.
    ///
    /// - MUST answer `Ok(true)` only when the backend says the resource does not exist;
    ///   a backend that cannot be reached is an error, never `true`.
    /// - MUST be cheap and change nothing. The default cannot tell and answers `false`.
    async fn lost(&self, _lease: &Lease) -> Result<bool, DriverError> {
        Ok(false)
    }
}
