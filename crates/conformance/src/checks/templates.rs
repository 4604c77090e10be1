//! Templates (contract section 8): what a template captured is there in a lease started
//! from it and what the source changed afterwards is not; a deleted template refuses an
//! acquire with the exact text; a driver without the templates group refuses every
//! template operation with its exact text and nothing reaches the driver. A plugin worker
//! that does not capture is refused in Paperclip's words; that is reported as "not
//! checked" for the rest.

use envrt_runtime_core::{AcquireRequest, Lease, RuntimeError, TemplateRef};

use super::{Check, Checked};
use crate::context::{Ctx, ensure, ensure_eq};

pub(super) const CHECKS: &[Check] = &[
    Check::maybe(
        "templates_a_lease_from_a_template_has_its_files_and_not_later_changes",
        has_templates_and_execute,
        captured_not_later,
    )
    .promise("A lease from a template has its files, and not the source lease's later changes."),
    Check::maybe(
        "templates_a_deleted_template_refuses_acquire_with_its_text",
        has_templates_and_execute,
        deleted_refuses,
    )
    .promise("An acquire from a deleted template is refused with the not-found text."),
    Check::new(
        "templates_without_the_group_every_operation_is_refused_with_its_text",
        lacks_templates,
        refused_without_group,
    )
    .promise("Without the templates group every template operation is refused with its text."),
];

fn has_templates_and_execute(p: &crate::Profile) -> bool {
    p.has_templates && p.has_execute
}

fn lacks_templates(p: &crate::Profile) -> bool {
    !p.has_templates
}

fn request_from(ctx: &Ctx, template: &str) -> AcquireRequest {
    let mut request = AcquireRequest::new(&ctx.environment_id, &ctx.company_id);
    request.run_id = Some(format!("{}-run", ctx.marker_prefix));
    request.template = Some(template.to_owned());
    request
}

/// Captures `lease`; `Ok(None)` when the driver refuses in Paperclip's words (checked).
pub(super) async fn capture(ctx: &Ctx, lease: &Lease, label: &str) -> Result<Option<TemplateRef>, String> {
    match ctx.runtime.capture_template(&lease.id, Some(label)).await {
        Ok(template) => Ok(Some(template)),
        Err(RuntimeError::Driver(error @ envrt_runtime_core::DriverError::ProviderUnsupported { .. })) => {
            ensure_eq(
                error.to_string(),
                format!("Sandbox provider \"{}\" does not support template capture.", ctx.key),
                "the refusal of a worker that does not capture",
            )?;
            Ok(None)
        }
        Err(error) => Err(format!("capture_template failed: {error}")),
    }
}

fn not_capturing() -> Checked {
    Checked::NotChecked("the driver does not capture templates (refused with the exact text)".into())
}

fn captured_not_later(ctx: &Ctx) -> Result<Checked, String> {
    ctx.block_on(async {
        let source = ctx.acquire(envrt_runtime_core::LeasePolicy::Ephemeral).await?;
        let m = ctx.marker("tpl");
        let mut started: Vec<Lease> = Vec::new();
        let mut made: Option<TemplateRef> = None;
        let outcome = async {
            ctx.sh(
                &source,
                &format!("mkdir -p {m}-dir && echo captured > {m}-dir/file && echo kept > {m}-top"),
            )
            .await?;
            let Some(template) = capture(ctx, &source, &m).await? else {
                return Ok(not_capturing());
            };
            made = Some(template.clone());
            ensure_eq(template.label.as_deref(), Some(m.as_str()), "the template's label")?;
            ensure_eq(
                template.environment_id.as_str(),
                ctx.environment_id.as_str(),
                "the template's environment",
            )?;
            ctx.sh(
                &source,
                &format!("echo changed > {m}-dir/file && echo later > {m}-later && rm {m}-top"),
            )
            .await?;
            let listed = ctx
                .runtime
                .templates(&ctx.environment_id, &ctx.company_id)
                .await
                .map_err(|e| format!("templates failed: {e}"))?;
            ensure(listed.iter().any(|t| t.id == template.id), || {
                format!("the template {} is not listed: {listed:?}", template.id)
            })?;
            let lease = ctx
                .runtime
                .acquire_lease(request_from(ctx, &template.id))
                .await
                .map_err(|e| format!("acquire from the template failed: {e}"))?;
            started.push(lease.clone());
            let seen = ctx
                .sh(
                    &lease,
                    &format!("cat {m}-dir/file {m}-top; test -e {m}-later && echo later-too || echo no-later"),
                )
                .await?;
            ensure_eq(
                String::from_utf8_lossy(&seen).into_owned(),
                "captured\nkept\nno-later\n".to_owned(),
                "what a lease from the template sees",
            )?;
            // The source is untouched by the capture and keeps its own later state.
            let source_seen = ctx.sh(&source, &format!("cat {m}-dir/file")).await?;
            ensure_eq(source_seen, b"changed\n".to_vec(), "the source lease after the capture")?;
            Ok(Checked::Yes)
        }
        .await;
        for lease in started.iter().chain([&source]) {
            ctx.finish(lease).await;
        }
        if let Some(template) = made {
            let deleted = ctx
                .runtime
                .delete_template(&ctx.environment_id, &ctx.company_id, &template.id)
                .await
                .map_err(|e| format!("delete_template failed: {e}"));
            if outcome.is_ok() {
                ensure(deleted?, || format!("the template {} was not deleted", template.id))?;
            }
        }
        outcome
    })
}

fn deleted_refuses(ctx: &Ctx) -> Result<Checked, String> {
    ctx.block_on(async {
        let source = ctx.acquire(envrt_runtime_core::LeasePolicy::Ephemeral).await?;
        let m = ctx.marker("tpl-deleted");
        let outcome = async {
            ctx.sh(&source, &format!("echo x > {m}")).await?;
            let Some(template) = capture(ctx, &source, &m).await? else {
                return Ok(not_capturing());
            };
            // Deleting again is not an error: there is nothing left to delete.
            for expected in [true, false] {
                let deleted = ctx
                    .runtime
                    .delete_template(&ctx.environment_id, &ctx.company_id, &template.id)
                    .await
                    .map_err(|e| format!("delete_template failed: {e}"))?;
                ensure_eq(deleted, expected, "delete_template's answer")?;
            }
            let refused = ctx.runtime.acquire_lease(request_from(ctx, &template.id)).await;
            match refused {
                Ok(lease) => {
                    ctx.finish(&lease).await;
                    Err(format!(
                        "a lease was acquired from the deleted template {}",
                        template.id
                    ))
                }
                Err(error) => {
                    ensure(matches!(error, RuntimeError::TemplateNotFound { .. }), || {
                        format!("expected TemplateNotFound, got {error:?}")
                    })?;
                    ensure_eq(
                        error.to_string(),
                        format!(
                            "Template \"{}\" was not found in environment \"{}\".",
                            template.id, ctx.environment_id
                        ),
                        "the refusal of a deleted template",
                    )?;
                    Ok(Checked::Yes)
                }
            }
        }
        .await;
        ctx.finish(&source).await;
        outcome
    })
}

fn refused_without_group(ctx: &Ctx) -> Result<(), String> {
    ctx.block_on(async {
        let key = &ctx.key;
        let acquires = ctx.recorder.calls("acquire_lease_from_template");
        let refused = ctx
            .runtime
            .acquire_lease(request_from(ctx, "tpl-0000000000000000"))
            .await
            .err()
            .ok_or("a lease was acquired from a template of a driver without templates")?;
        ensure_eq(
            refused.to_string(),
            format!("Environment driver \"{key}\" does not support templates."),
            "acquire from a template",
        )?;
        ensure_eq(
            ctx.recorder.calls("acquire_lease_from_template"),
            acquires,
            "acquires from a template that reached the driver",
        )?;
        let listed = ctx.runtime.templates(&ctx.environment_id, &ctx.company_id).await;
        ensure_eq(
            listed.err().map(|e| e.to_string()),
            Some(format!("Environment driver \"{key}\" does not support templates.")),
            "templates",
        )?;
        let deleted = ctx
            .runtime
            .delete_template(&ctx.environment_id, &ctx.company_id, "tpl-0000000000000000")
            .await;
        ensure_eq(
            deleted.err().map(|e| e.to_string()),
            Some(format!(
                "Environment driver \"{key}\" does not support template deletion."
            )),
            "delete_template",
        )?;
        let lease = ctx.acquire(envrt_runtime_core::LeasePolicy::Ephemeral).await?;
        let captured = ctx.runtime.capture_template(&lease.id, None).await;
        ctx.finish(&lease).await;
        ensure_eq(
            captured.err().map(|e| e.to_string()),
            Some(format!(
                "Environment driver \"{key}\" does not support template capture."
            )),
            "capture_template",
        )
    })
}
