//! `envrt doctor`: checks what the configured environments need and says how to fix what
//! is missing. A check is required when a configured environment uses its driver; the
//! exit code is 1 when a required check fails.

use envrt::{LeaseFilter, LeaseStatus, LeaseStore};

use envrt::config::open_store;

use crate::app::App;
use crate::error::CliError;
use envrt::config::{Config, Paths};

/// One check's outcome.
struct Check {
    name: &'static str,
    required: bool,
    ok: bool,
    detail: String,
    fix: Option<String>,
}

async fn store_check(paths: &Paths) -> Check {
    let name = "lease store";
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

fn driver_check(app: &App, key: &'static str, name: &'static str, fix: &str) -> Check {
    let required = app.config.environments.iter().any(|e| e.driver == key);
    if !envrt::RuntimeBuilder::enabled_drivers().contains(&key) {
        return Check {
            name,
            required,
            ok: false,
            detail: format!("this envrt was built without the \"{key}\" driver"),
            fix: Some(format!("rebuild envrt with the cargo feature for \"{key}\"")),
        };
    }
    match app.skipped.iter().find(|s| s.key == key) {
        Some(s) => Check {
            name,
            required,
            ok: false,
            detail: s.error.to_string(),
            fix: Some(fix.to_owned()),
        },
        None => Check {
            name,
            required,
            ok: true,
            detail: format!("driver \"{key}\" ready"),
            fix: None,
        },
    }
}

fn binary_check(binary: &'static str, name: &'static str, required: bool, fix: &str) -> Check {
    match envrt::config::find_in_path(binary) {
        Some(path) => Check {
            name,
            required,
            ok: true,
            detail: path.display().to_string(),
            fix: None,
        },
        None => Check {
            name,
            required,
            ok: false,
            detail: format!("`{binary}` is not on PATH"),
            fix: Some(fix.to_owned()),
        },
    }
}

/// The reference sandbox worker: `[sandbox] worker` when the file sets it (only that path),
/// else where envrt looks for it; the detail of a missing one is the library's text (which
/// binary, where it looked, how to set it).
fn worker_check(configured: Option<&std::path::Path>, required: bool) -> Check {
    match envrt::config::locate_reference_worker(configured) {
        Ok(path) => Check {
            name: "sandbox worker",
            required,
            ok: true,
            detail: match configured {
                Some(_) => format!("{} (set by [sandbox] worker in envrt.toml)", path.display()),
                None => path.display().to_string(),
            },
            fix: None,
        },
        Err(message) => Check {
            name: "sandbox worker",
            required,
            ok: false,
            detail: message,
            fix: Some(match configured {
                Some(_) => "build it (cargo build -p envrt-sandbox-worker) where [sandbox] worker in envrt.toml says, or correct that path".into(),
                None => "cargo build -p envrt-sandbox-worker, then put it next to envrt or on PATH, or set [sandbox] worker in envrt.toml".into(),
            }),
        },
    }
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
        let app = App::open_for(paths, Some("docker")).await?;
        checks.push(driver_check(
            &app,
            "local",
            "local driver",
            "make the workspace root ([local] root in envrt.toml) a writable directory",
        ));
        checks.push(driver_check(
            &app,
            "docker",
            "Docker engine",
            "start the Docker engine (systemctl start docker) or point DOCKER_HOST at one",
        ));
        let sandbox = config.environments.iter().any(|e| e.driver == "sandbox");
        checks.push(binary_check(
            "bwrap",
            "bubblewrap",
            sandbox,
            "install bubblewrap (apt-get install bubblewrap)",
        ));
        let configured_plugin = !config.plugins.is_empty();
        checks.push(worker_check(
            config.sandbox_worker.as_deref(),
            sandbox && !configured_plugin,
        ));
        // What each environment enforces (information, never a failure).
        for environment in &config.environments {
            checks.push(Check {
                name: "isolation",
                required: false,
                ok: true,
                detail: format!(
                    "{} ({}): {}",
                    environment.id,
                    environment.driver,
                    crate::isolation::line(&crate::isolation::enforcement(environment))
                ),
                fix: None,
            });
        }
        for environment in config.environments.iter().filter(|e| e.driver == "ssh") {
            let (ok, detail, fix) = crate::doctor_ssh::check(environment).await;
            checks.push(Check {
                name: "ssh host",
                required: true,
                ok,
                detail,
                fix,
            });
        }
        // A missing reference worker is the sandbox worker check's, said once.
        let reference = |key: &str| key == "sandbox" && !configured_plugin;
        for skip in app
            .skipped
            .iter()
            .filter(|s| s.key != "docker" && s.key != "local" && !reference(&s.key))
        {
            checks.push(Check {
                name: "plugin worker",
                required: true,
                ok: false,
                detail: format!("driver \"{}\": {}", skip.key, skip.error),
                fix: Some("check the manifest's worker.command and run it by hand to see why it exits".into()),
            });
        }
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
