//! Templates of the reference worker (Paperclip's `environmentCaptureTemplate` and
//! `environmentDeleteTemplate`, plus our `environmentListTemplates` extension): a template
//! is a snapshot of a lease's `/workspace` kept under `{root}/.templates/{ref}/tree`, with
//! `template.json` beside it naming its tenant and environment. `environmentAcquireLease`
//! with `sourceTemplateRef` seeds the new lease's workspace with a copy of it.
//!
//! Both copies go through the worker's own sync (`environmentSyncOut` from `/workspace`,
//! `environmentSyncIn` to it), so they carry its guarantees: links in the workspace are
//! read in sandbox terms and must stay inside the copied tree (a capture of a workspace
//! with a link that leads out is refused), nothing is half-written, and what lands in a
//! workspace belongs to the sandbox user. Templates are kept per tenant and environment:
//! another tenant's template is not listed, cannot be deleted and does not seed a lease.
//!
//! Interactive setup (Paperclip's `environmentStartInteractiveSetup` / `Get` / `Cancel`):
//! start makes a setup lease (from `sourceTemplateRef` when given) and answers
//! `waiting_for_user` with a connection of type `duplex` (no host or port to hide: the user
//! reaches the lease with `duplexChannelOpen` on its `providerLeaseId`); capturing it is
//! `environmentCaptureTemplate` on that id; cancel kills its sandboxes and removes it
//! (`cancelled`; `missing` when there is none).

use std::path::{Path, PathBuf};

use envrt_driver_api::template::{check_template_id, new_template_id};
use envrt_driver_api::{DriverError, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use envrt_plugin_protocol::methods;

use super::rpc::RpcError;
use super::sync::{self, Direction, SyncParams};
use super::{Worker, parse};

const CAPTURE: &str = methods::CAPTURE_TEMPLATE;
const DELETE: &str = methods::DELETE_TEMPLATE;
const LIST: &str = methods::LIST_TEMPLATES;
const SETUP_START: &str = methods::START_INTERACTIVE_SETUP;
const SETUP_GET: &str = methods::GET_INTERACTIVE_SETUP;
const SETUP_CANCEL: &str = methods::CANCEL_INTERACTIVE_SETUP;

/// Whether `method` is one of this module's verbs.
pub(super) fn handles(method: &str) -> bool {
    [CAPTURE, DELETE, LIST, SETUP_START, SETUP_GET, SETUP_CANCEL].contains(&method)
}

/// The directory under the root holding every template.
const TEMPLATES_DIR: &str = ".templates";
/// The description of one template.
const RECORD: &str = "template.json";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Scope {
    company_id: String,
    environment_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CaptureParams {
    #[serde(flatten)]
    scope: Scope,
    provider_lease_id: Option<String>,
    #[serde(default)]
    template_label: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteParams {
    #[serde(flatten)]
    scope: Scope,
    template_ref: String,
}

/// What `template.json` holds, and what listing answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    template_ref: String,
    template_kind: String,
    company_id: String,
    environment_id: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    source_lease_id: Option<String>,
    created_at: String,
    files: u64,
    bytes: u64,
}

impl Record {
    fn listed(&self) -> Value {
        json!({
            "templateRef": self.template_ref,
            "templateKind": self.template_kind,
            "label": self.label,
            "sourceLeaseId": self.source_lease_id,
            "createdAt": self.created_at,
            "metadata": {"files": self.files, "bytes": self.bytes},
        })
    }

    fn belongs_to(&self, scope: &Scope) -> bool {
        self.company_id == scope.company_id && self.environment_id == scope.environment_id
    }
}

fn templates_dir(worker: &Worker) -> PathBuf {
    worker.leases.root.join(TEMPLATES_DIR)
}

fn read_record(dir: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(dir.join(RECORD)).ok()?).ok()
}

/// The record of template `reference` when it exists and belongs to `scope`.
fn find(worker: &Worker, reference: &str, scope: &Scope) -> Option<(PathBuf, Record)> {
    check_template_id(reference).ok()?;
    let dir = templates_dir(worker).join(reference);
    let record = read_record(&dir)?;
    (record.template_ref == reference && record.belongs_to(scope)).then_some((dir, record))
}

fn copy_params(lease_id: &str, source: &str, target: &str) -> Result<SyncParams, RpcError> {
    serde_json::from_value(json!({
        "lease": {"providerLeaseId": lease_id},
        "operations": [{
            "operationId": "template",
            "files": [{"sourcePath": source, "targetPath": target, "kind": "directory"}],
        }],
    }))
    .map_err(|e| RpcError::worker(format!("building a template copy failed: {e}")))
}

fn counted(result: &Value, key: &str) -> u64 {
    result["operations"][0][key].as_u64().unwrap_or(0)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetupParams {
    #[serde(default)]
    provider_lease_id: Option<String>,
    #[serde(default)]
    source_template_ref: Option<String>,
}

/// A setup session's answer for the lease `id` in `status`.
fn session(id: Option<&str>, status: &str) -> Value {
    let summary = id.map(|_| json!({"type": "duplex", "hostRedacted": true, "portRedacted": true}));
    json!({
        "providerLeaseId": id,
        "status": status,
        "connectionSummary": summary,
        "metadata": {"remoteCwd": super::sandbox::WORKSPACE, "sandbox": "bwrap"},
    })
}

async fn setup(worker: &Worker, method: &str, params: Value) -> Result<Value, RpcError> {
    let p: SetupParams = parse(method, params.clone())?;
    match method {
        SETUP_START => {
            let (id, dir) = worker.leases.create()?;
            if let Some(reference) = &p.source_template_ref
                && let Err(e) = seed(worker, &id, &dir, &params, reference).await
            {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
            Ok(session(Some(&id), "waiting_for_user"))
        }
        SETUP_GET => {
            let live = p
                .provider_lease_id
                .as_deref()
                .filter(|id| worker.leases.existing(id).is_ok());
            Ok(match live {
                Some(id) => session(Some(id), "waiting_for_user"),
                None => session(None, "missing"),
            })
        }
        _ => {
            let Some(dir) = p
                .provider_lease_id
                .as_deref()
                .and_then(|id| worker.leases.existing(id).ok())
            else {
                return Ok(json!({"status": "missing"}));
            };
            worker.expiries.forget(&dir);
            worker.sandbox.kill_lease(&dir);
            std::fs::remove_dir_all(&dir)
                .map_err(|e| DriverError::io(format!("Removing lease directory {}", dir.display()), e))?;
            Ok(json!({"status": "cancelled"}))
        }
    }
}

/// Answers the template and setup verbs.
pub(super) async fn handle(worker: &Worker, method: &str, params: Value) -> Result<Value, RpcError> {
    match method {
        SETUP_START | SETUP_GET | SETUP_CANCEL => setup(worker, method, params).await,
        CAPTURE => capture(worker, parse(method, params)?).await,
        DELETE => {
            let p: DeleteParams = parse(method, params)?;
            let Some((dir, _)) = find(worker, &p.template_ref, &p.scope) else {
                return Ok(json!({"deleted": false}));
            };
            // Renamed away first: it is no longer listed even if the removal is cut short.
            let doomed = templates_dir(worker).join(format!(".old-{}", p.template_ref));
            std::fs::rename(&dir, &doomed)
                .map_err(|e| DriverError::io(format!("Removing template {}", dir.display()), e))?;
            std::fs::remove_dir_all(&doomed)
                .map_err(|e| DriverError::io(format!("Removing template {}", doomed.display()), e))?;
            // The last template gone: nothing of templates is left under the root.
            let _ = std::fs::remove_dir(templates_dir(worker));
            Ok(json!({"deleted": true}))
        }
        _ => {
            let scope: Scope = parse(method, params)?;
            let mut records: Vec<Record> = match std::fs::read_dir(templates_dir(worker)) {
                Ok(entries) => entries
                    .flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .filter_map(|e| read_record(&e.path()))
                    .filter(|r| r.belongs_to(&scope) && check_template_id(&r.template_ref).is_ok())
                    .collect(),
                Err(_) => Vec::new(),
            };
            records.sort_by(|a, b| (&a.created_at, &a.template_ref).cmp(&(&b.created_at, &b.template_ref)));
            Ok(json!({"templates": records.iter().map(Record::listed).collect::<Vec<_>>()}))
        }
    }
}

async fn capture(worker: &Worker, p: CaptureParams) -> Result<Value, RpcError> {
    let lease_id = p
        .provider_lease_id
        .ok_or_else(|| RpcError::invalid_params("providerLeaseId is required"))?;
    worker.leases.existing(&lease_id)?;
    let parent = templates_dir(worker);
    let reference = new_template_id();
    let staging = parent.join(format!(".new-{reference}"));
    let tree = staging.join("tree");
    let done = parent.join(&reference);
    let result = async {
        // The sync creates the parents; a deletion of the last template may remove the
        // templates directory meanwhile, which the sync then creates again.
        let staged_tree = tree
            .to_str()
            .ok_or_else(|| RpcError::worker("the worker root is not UTF-8"))?;
        let copied = sync::sync(
            &worker.sandbox,
            &worker.leases.existing(&lease_id)?,
            copy_params(&lease_id, super::sandbox::WORKSPACE, staged_tree)?,
            Direction::Out,
        )
        .await?;
        let record = Record {
            template_ref: reference.clone(),
            template_kind: "snapshot".into(),
            company_id: p.scope.company_id.clone(),
            environment_id: p.scope.environment_id.clone(),
            label: p.template_label.clone().filter(|l| !l.is_empty()),
            source_lease_id: Some(lease_id.clone()),
            created_at: Timestamp::now().to_rfc3339(),
            files: counted(&copied, "filesTransferred"),
            bytes: counted(&copied, "bytesTransferred"),
        };
        let text = serde_json::to_vec_pretty(&record).map_err(|e| RpcError::worker(e.to_string()))?;
        std::fs::write(staging.join(RECORD), text)
            .map_err(|e| DriverError::io(format!("Writing {}", staging.display()), e))?;
        std::fs::rename(&staging, &done).map_err(|e| DriverError::io(format!("Placing {}", done.display()), e))?;
        Ok::<Record, RpcError>(record)
    }
    .await;
    let record = match result {
        Ok(record) => record,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            let _ = std::fs::remove_dir(&parent);
            return Err(e);
        }
    };
    let mut answer = record.listed();
    answer["metadata"]["label"] = json!(record.label);
    answer["metadata"]["createdAt"] = json!(record.created_at);
    Ok(answer)
}

/// `environmentAcquireLease`: the life-cycle verb, then, with `sourceTemplateRef`, the
/// new workspace filled from that template (checked first, so a refused template makes no
/// lease; a failed copy removes the lease again).
pub(super) async fn acquire(worker: &Worker, params: Value) -> Result<Value, RpcError> {
    let Some(reference) = params
        .get("sourceTemplateRef")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return super::lifecycle::acquire(worker, params);
    };
    let scope: Scope = parse(methods::ACQUIRE_LEASE, params.clone())?;
    if find(worker, &reference, &scope).is_none() {
        return Err(not_found(&reference, &scope));
    }
    let answer = super::lifecycle::acquire(worker, params.clone())?;
    let id = answer["providerLeaseId"].as_str().unwrap_or_default().to_owned();
    let dir = worker.leases.existing(&id)?;
    if let Err(e) = seed(worker, &id, &dir, &params, &reference).await {
        worker.expiries.forget(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok(answer)
}

fn not_found(reference: &str, scope: &Scope) -> RpcError {
    RpcError::invalid_params(format!(
        "Template \"{reference}\" was not found in environment \"{}\".",
        scope.environment_id
    ))
}

/// Fills the new lease `lease_id` (directory `dir`) from template `reference` of the
/// acquire's tenant and environment (`params`), or refuses with the facade's words.
pub(super) async fn seed(
    worker: &Worker,
    lease_id: &str,
    dir: &Path,
    params: &Value,
    reference: &str,
) -> Result<(), RpcError> {
    let scope: Scope = parse("environmentAcquireLease", params.clone())?;
    let Some((template, _)) = find(worker, reference, &scope) else {
        return Err(not_found(reference, &scope));
    };
    let tree = template.join("tree");
    let source = tree
        .to_str()
        .ok_or_else(|| RpcError::worker("the worker root is not UTF-8"))?;
    sync::sync(
        &worker.sandbox,
        dir,
        copy_params(lease_id, source, super::sandbox::WORKSPACE)?,
        Direction::In,
    )
    .await?;
    Ok(())
}
