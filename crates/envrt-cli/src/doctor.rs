//! `envrt doctor`: checks what the configured environments need and says how to fix what
//! is missing. A check is required when a configured environment uses its driver; the
//! exit code is 1 when a required check fails.

use envrt::core::descriptor::{DoctorCheck, DoctorContext, DoctorPhase};
use envrt::registry::descriptors;
use envrt::{LeaseFilter, LeaseStatus, LeaseStore};

use envrt::config::open_store;

use crate::app::App;
use crate::error::CliError;
use envrt::config::{Config, Paths};

/// One check's outcome.
struct Check {
    name: String,
    required: bool,
    ok: bool,
    detail: String,
    fix: Option<String>,
}

async fn store_check(paths: &Paths) -> Check {
    let name = "lease store".to_owned();
    match open_store(paths).await {
        Ok(store) => match store.list_leases(&LeaseFilter::default()).await {
            Ok(leases) => {
                let active = leases.iter().filter(|l| l.status == LeaseStatus::Active).count();
                Check {
                    name,
                    required: true,
                    ok: true,
                    detail: format!(
                        "{} ({}, {active} active)",
                        paths.database().display(),
                        crate::plural(leases.len() as u64, "lease", "leases")
                    ),
                    fix: None,
                }
            }
            Err(e) => Check {
                name,
                required: true,
                ok: false,
                detail: e.to_string(),
                fix: Some(format!(
                    "move {} aside (it is unreadable) or pass another --state-dir",
                    paths.database().display()
                )),
            },
        },
        Err(e) => Check {
            name,
            required: true,
            ok: false,
            detail: e.to_string(),
            fix: Some(format!(
                "make {} a writable directory, or pass --state-dir / set ENVRT_STATE_DIR",
                paths.state_dir.display()
            )),
        },
    }
}

/// A descriptor's check as `envrt doctor` prints it.
fn from_descriptor(check: DoctorCheck) -> Check {
    Check {
        name: check.name,
        required: check.required,
        ok: check.ok,
        detail: check.detail,
        fix: check.fix,
    }
}

/// How long one environment's provider probe may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The answer of each active configured environment's provider probe (a plugin worker's
/// `environmentProbe`), each within [`PROBE_TIMEOUT`]; drivers without a probe add none.
async fn probe_checks(runtime: &envrt::EnvironmentRuntime, environments: &[envrt::Environment]) -> Vec<Check> {
    let mut checks = Vec::new();
    for environment in environments {
        if environment.status != envrt::EnvironmentStatus::Active {
            continue;
        }
        let Some(driver) = runtime.driver(&environment.driver) else {
            continue;
        };
        // The driver bounds the call; this bounds a driver that would not.
        let answer = match tokio::time::timeout(
            PROBE_TIMEOUT + std::time::Duration::from_secs(1),
            driver.probe_environment(environment, PROBE_TIMEOUT),
        )
        .await
        {
            Ok(None) => continue,
            Ok(Some(answer)) => answer,
            Err(_) => Err(format!(
                "environmentProbe got no answer within {} ms",
                PROBE_TIMEOUT.as_millis()
            )),
        };
        let (ok, said) = match answer {
            Ok(answer) => (answer.ok, answer.summary),
            Err(why) => (false, why),
        };
        checks.push(Check {
            name: "environment probe".into(),
            required: true,
            ok,
            detail: format!("{} ({}): {said}", environment.id, environment.driver),
            fix: (!ok).then(|| {
                "the environment's provider says it is not usable: see its answer, its worker's stderr and the environment's config".to_owned()
            }),
        });
    }
    checks
}

/// `envrt doctor [--json]`.
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// JSON: `{ok, checks: [{name, required, ok, detail, fix}]}` (`fix` null when none;
    /// `ok` false when a required check failed, as the exit code 1 says).
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(paths: &Paths, args: DoctorArgs) -> Result<u8, CliError> {
    let json = args.json;
    // The configuration must load for anything else to mean something.
    let config = Config::load(paths)?;
    let mut checks = vec![store_check(paths).await];
    if checks[0].ok {
        // A driver whose readiness doctor reports is set up even when no environment uses it.
        let extra = descriptors().iter().find(|d| d.doctor_sets_up()).map(|d| d.key());
        let app = App::open_for(paths, extra).await?;
        let skipped: Vec<(String, envrt::DriverError)> = app.skipped.into_iter().map(|s| (s.key, s.error)).collect();
        let mut setup = Vec::new();
        let mut late = Vec::new();
        for descriptor in descriptors() {
            let others: Vec<&'static str> = descriptors()
                .iter()
                .map(|d| d.key())
                .filter(|k| *k != descriptor.key())
                .collect();
            let default_settings;
            let settings: &(dyn std::any::Any + Send + Sync) = match config.drivers.get(descriptor.key()) {
                Some(settings) => settings.as_ref(),
                None => {
                    default_settings = descriptor.default_settings();
                    default_settings.as_ref()
                }
            };
            let context = DoctorContext {
                environments: &config.environments,
                settings,
                skipped: &skipped,
                others: &others,
            };
            for check in descriptor.doctor(&context).await {
                match check.phase {
                    DoctorPhase::Setup => setup.push(from_descriptor(check)),
                    _ => late.push(from_descriptor(check)),
                }
            }
        }
        checks.extend(setup);
        // What each environment enforces (information, never a failure).
        for environment in &config.environments {
            checks.push(Check {
                name: "isolation".into(),
                required: false,
                ok: true,
                detail: format!(
                    "{} ({}): {}, egress={}",
                    environment.id,
                    environment.driver,
                    crate::isolation::line(&crate::isolation::enforcement(environment)),
                    crate::isolation::egress(&app.runtime, environment)
                ),
                fix: None,
            });
        }
        checks.extend(late);
        checks.extend(probe_checks(&app.runtime, &config.environments).await);
    }
    let missing_required = checks.iter().any(|c| c.required && !c.ok);
    if json {
        let checks: Vec<serde_json::Value> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "name": c.name, "required": c.required, "ok": c.ok, "detail": c.detail, "fix": c.fix,
                })
            })
            .collect();
        let document = serde_json::json!({"ok": !missing_required, "checks": checks});
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&document).unwrap_or_else(|_| "null".into())
        );
        return Ok(if missing_required { 1 } else { 0 });
    }
    for check in &checks {
        let mark = match (check.ok, check.required) {
            (true, _) => "ok     ",
            (false, true) => "MISSING",
            (false, false) => "absent ",
        };
        let need = if check.required { "" } else { " (optional)" };
        crate::out!("{mark} {}{need}: {}", check.name, check.detail);
        if let (false, Some(fix)) = (check.ok, &check.fix) {
            crate::out!("        fix: {fix}");
        }
    }
    Ok(if missing_required { 1 } else { 0 })
}
