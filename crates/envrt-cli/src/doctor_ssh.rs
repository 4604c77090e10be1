//! `envrt doctor` for `ssh` environments: connects to each configured host the way a
//! lease would (host key checked against the environment's known-hosts file, key login)
//! and runs a no-op command, so an unreachable host, an unknown or changed host key and a
//! refused login each show with their own reason before any lease is taken.

use envrt::Environment;
use envrt::ssh::{SshConfig, SshDriver};

/// `(ok, detail, fix)` of one environment's host.
pub(crate) async fn check(environment: &Environment) -> (bool, String, Option<String>) {
    let driver = match SshDriver::new(SshConfig::default()) {
        Ok(driver) => driver,
        Err(e) => return (false, format!("{}: {e}", environment.id), None),
    };
    let target = match driver.target_of(&environment.config) {
        Ok(target) => target,
        Err(e) => {
            return (
                false,
                format!("{}: {e}", environment.id),
                Some("set host (and port, user, key, known_hosts) in [environment.config]".into()),
            );
        }
    };
    let outcome = driver.check(&target).await;
    driver.shutdown().await;
    match outcome {
        Ok(()) => (
            true,
            format!(
                "{}: {} reachable, host key verified, login works",
                environment.id,
                target.shown()
            ),
            None,
        ),
        Err(e) => {
            let text = e.to_string();
            let fix = if text.contains("host key is not in") {
                format!(
                    "add the host's key to the known-hosts file (ssh-keyscan -p PORT {} >> FILE), or set accept_new_host_key = true",
                    target.host
                )
            } else if text.contains("host key does not match") {
                "the host's key changed: verify it out of band before replacing its known-hosts line".to_owned()
            } else {
                "check host, port, user and key in [environment.config]; try ssh by hand with the same settings"
                    .to_owned()
            };
            (false, format!("{}: {text}", environment.id), Some(fix))
        }
    }
}
