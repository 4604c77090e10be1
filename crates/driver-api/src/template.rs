//! Lease templates (Paperclip's "custom images"): a lease's state captured under an id,
//! from which new leases start. An optional driver group, [`Templates`], reached through
//! [`EnvironmentDriver::as_templates`](crate::EnvironmentDriver::as_templates).
//!
//! The driver is the one source of truth about its templates (a directory, an image, a
//! provider snapshot), as its [`Recovery`](crate::Recovery) inventory is about leases: the
//! facade keeps no template records of its own, so nothing can drift between a store and
//! the backend.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::driver::LeaseContext;
use crate::error::DriverError;
use crate::model::{Environment, JsonMap, Timestamp};

/// The lease metadata key that records the template a lease was started from (the
/// runtime writes it at acquire; a driver reads it to know a lease's source template).
pub const SOURCE_TEMPLATE_KEY: &str = "sourceTemplateRef";

/// A captured template, as its driver reports it (Paperclip's capture result
/// `{templateRef, templateKind, metadata}`, plus what envrt lists).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRef {
    /// The template's id (Paperclip's `templateRef`); what `AcquireRequest::template`
    /// names. Unique within its environment's driver.
    pub id: String,
    /// What it is (Paperclip's `templateKind`): `snapshot` (a copy of files), `image` (a
    /// container image), `provider_template`, ...
    pub kind: String,
    /// The environment it was captured in; leases start from it in that environment only.
    pub environment_id: String,
    /// The tenant of the lease it was captured from; only that tenant sees and uses it.
    pub company_id: String,
    /// A human label given at capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The lease it was captured from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_lease_id: Option<String>,
    /// When it was captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    /// Provider facts (an image id, a path, a size).
    #[serde(default, skip_serializing_if = "JsonMap::is_empty")]
    pub metadata: JsonMap,
}

/// The templates group: capture a lease's state, list what was captured, delete it. A
/// lease is started from a template by [`acquire_lease`](crate::EnvironmentDriver::acquire_lease)
/// with [`AcquireInput::template`](crate::AcquireInput::template) set.
#[async_trait]
pub trait Templates: Send + Sync {
    /// Captures the lease's state (its workspace, its container) as a new template.
    ///
    /// Needs no capability key (templates are a group, not a key; contract section 8).
    /// Before the call the facade has checked that the driver has the group (else
    /// `Environment driver "{key}" does not support template capture.`), that the lease is
    /// not past its expiry and that it is active (section 3).
    ///
    /// - What the lease changes afterwards MUST NOT reach the template. The lease stays
    ///   usable.
    /// - The template MUST belong to the lease's tenant and environment.
    async fn capture_template(&self, context: &LeaseContext, label: Option<&str>) -> Result<TemplateRef, DriverError>;

    /// Every template of `environment` for tenant `company_id` this driver holds.
    ///
    /// Before the call the facade has checked the runtime's tenant (`Tenant "{company_id}"
    /// is not this runtime's tenant "{tenant}".`), the environment and that the driver has
    /// the group (`Environment driver "{key}" does not support templates.`).
    ///
    /// - MUST list oldest first, from the backend itself (the facade keeps no records).
    /// - Templates of other tenants MUST NOT be listed.
    async fn list_templates(
        &self,
        environment: &Environment,
        company_id: &str,
    ) -> Result<Vec<TemplateRef>, DriverError>;

    /// The template `id` of `environment` for tenant `company_id`, or `None` when the driver has no such template.
    /// The facade looks templates up through this before an acquire and a delete. The
    /// default searches [`list_templates`](Self::list_templates); a driver whose backend
    /// cannot list (a plugin worker without the listing verb) may vouch for the id and let
    /// the backend refuse it.
    async fn find_template(
        &self,
        environment: &Environment,
        company_id: &str,
        id: &str,
    ) -> Result<Option<TemplateRef>, DriverError> {
        Ok(self
            .list_templates(environment, company_id)
            .await?
            .into_iter()
            .find(|t| t.id == id))
    }

    /// Deletes a template (one [`find_template`](Self::find_template) returned).
    ///
    /// Before the call the facade has checked the runtime's tenant, that the driver has the
    /// group (`Environment driver "{key}" does not support template deletion.`), that the id
    /// is valid (`Invalid input: template id "{id}" is not valid ...`) and found it; an id
    /// not found is `Ok(false)` without this call.
    ///
    /// - Returns whether something was deleted; MUST be idempotent: a template already
    ///   gone is `Ok(false)`, not an error.
    /// - Leases already started from it MUST NOT be affected.
    async fn delete_template(&self, environment: &Environment, template: &TemplateRef) -> Result<bool, DriverError>;
}

/// Checks a template id given by a caller before it names a directory or an image: ASCII
/// letters, digits, `-`, `_` and `.` (not leading), at most 128 bytes.
pub fn check_template_id(id: &str) -> Result<(), DriverError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(DriverError::invalid(format!(
            "template id {id:?} is not valid (allowed: ASCII letters, digits, '-', '_' and '.')"
        )))
    }
}

/// A fresh template id: `tpl-` and 16 lowercase hex digits (valid as a directory name
/// and as a Docker image tag).
pub fn new_template_id() -> String {
    let unique = uuid::Uuid::new_v4().simple().to_string();
    format!("tpl-{}", &unique[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_and_fresh_ids_pass() {
        let fresh = new_template_id();
        assert!(check_template_id(&fresh).is_ok(), "{fresh}");
        assert_eq!(fresh.len(), 20);
        for bad in ["", "../x", "a/b", ".hidden", "a b", "é"] {
            assert_eq!(
                check_template_id(bad).unwrap_err().to_string(),
                format!(
                    "Invalid input: template id {bad:?} is not valid (allowed: ASCII letters, digits, '-', '_' and '.')"
                )
            );
        }
    }

    #[test]
    fn a_template_ref_serializes_in_camel_case() {
        let t = TemplateRef {
            id: "tpl-1".into(),
            kind: "snapshot".into(),
            environment_id: "env".into(),
            company_id: "acme".into(),
            label: Some("base".into()),
            source_lease_id: None,
            created_at: Some(Timestamp(5)),
            metadata: JsonMap::new(),
        };
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"id": "tpl-1", "kind": "snapshot", "environmentId": "env", "companyId": "acme", "label": "base", "createdAt": 5})
        );
        assert_eq!(serde_json::from_value::<TemplateRef>(json).unwrap(), t);
    }
}
