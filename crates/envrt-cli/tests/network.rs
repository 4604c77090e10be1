//! The `envrt` binary and lease networks: `caps` and `doctor` show each environment's
//! egress level; a policy the driver cannot enforce is refused at config check, at
//! acquire (`--egress`, `--allow`) and on a live update (`lease network`), each with its
//! exact text; `network = "host"` is the explicit opt-in of the host-network drivers.
//! Docker environments (network none and bridge) need an engine; they skip loudly
//! without one and fail instead under `ENVRT_REQUIRE_DOCKER=1`.

mod common;

use common::Site;

fn write_config(s: &Site, text: &str) {
    std::fs::write(s.path().join("envrt.toml"), text).unwrap();
}

fn caps_egress(s: &Site) -> Vec<(String, String)> {
    let out = s.run(&["caps", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let columns: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    columns
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["environment"].as_str().unwrap().to_owned(),
                c["enforces"]["egress"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn local_keeps_the_host_network_by_default_and_says_so() {
    let s = Site::new();
    assert_eq!(caps_egress(&s), [("local".to_owned(), "host network".to_owned())]);
    let doctor = s.run(&["doctor"]).stdout_text();
    let line = doctor
        .lines()
        .find(|l| l.contains("isolation (optional): local (local):"))
        .unwrap_or_else(|| panic!("{doctor}"));
    assert!(line.ends_with(", egress=host network"), "{line}");
    write_config(
        &s,
        "[[environment]]\nid = \"open\"\ndriver = \"local\"\nnetwork = \"host\"\n",
    );
    assert_eq!(
        caps_egress(&s),
        [
            ("open".to_owned(), "host network".to_owned()),
            ("local".to_owned(), "host network".to_owned())
        ]
    );
}

#[test]
fn a_policy_on_local_is_refused_at_config_check() {
    let s = Site::new();
    write_config(
        &s,
        "[[environment]]\nid = \"dev\"\ndriver = \"local\"\n[environment.network]\negress = \"none\"\n",
    );
    let out = s.run(&["caps"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        "envrt: config \"envrt.toml\": environment \"dev\": driver \"local\" cannot enforce a network policy: \
         its commands share the host's network; drop the policy, or set network = \"host\" to run on the host \
         network unrestricted\n"
    );
    write_config(
        &s,
        "[[environment]]\nid = \"dev\"\ndriver = \"local\"\n[environment.network]\negress = \"allow\"\nallow = [\"py*.org\"]\n",
    );
    let out = s.run(&["caps"]);
    assert_eq!(
        out.stderr,
        "envrt: config \"envrt.toml\": environment \"dev\": [environment.network]: allow: \"py*.org\": bad \
         wildcard: only a whole leading label \"*.\" may be a wildcard\n"
    );
    write_config(
        &s,
        "[[environment]]\nid = \"dev\"\ndriver = \"local\"\nnetwork = \"bridge\"\n",
    );
    let out = s.run(&["caps"]);
    assert_eq!(
        out.stderr,
        "envrt: config \"envrt.toml\": environment \"dev\": network expects \"host\" or a table \
         [environment.network], got \"bridge\"\n"
    );
}

const SHARES_HOST: &str = "Network policy refused: driver \"local\" cannot enforce a network policy: its commands \
                           share the host's network; drop the policy, or set network = \"host\" to run on the host \
                           network unrestricted\n";

#[test]
fn a_lease_policy_on_local_is_refused_at_acquire_exec_and_update() {
    let s = Site::new();
    let out = s.run(&["lease", "acquire", "--egress", "none"]);
    assert_eq!((out.code, out.stderr.as_str()), (Some(2), SHARES_HOST));
    let out = s.run(&["exec", "--allow", "pypi.org:443", "--", "true"]);
    assert_eq!((out.code, out.stderr.as_str()), (Some(2), SHARES_HOST));
    assert!(s.leases_json().is_empty(), "a refused acquire left a lease");
    let out = s.run(&["exec", "--egress", "sometimes", "--", "true"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(2),
            "envrt: --egress/--allow: egress = \"sometimes\": unknown value (expected \"none\", \"allow\" or \"open\")\n"
        )
    );
    let acquired = s.run(&["lease", "acquire", "--detached"]);
    assert_eq!(acquired.code, Some(0), "{}", acquired.stderr);
    let id = acquired.stdout_text().trim().to_owned();
    let out = s.run(&["lease", "network", &id, "--allow", "pypi.org"]);
    assert_eq!((out.code, out.stderr.as_str()), (Some(2), SHARES_HOST));
    let out = s.run(&["exec", "--lease", &id, "--egress", "none", "--", "true"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(2),
            "envrt: --egress/--allow apply to a new lease; use `envrt lease network LEASE` for an existing one\n"
        )
    );
    assert_eq!(s.run(&["lease", "release", &id]).code, Some(0));
}

fn docker_ready() -> bool {
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", "envrt-test:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("ENVRT_REQUIRE_DOCKER").map_or(true, |v| v != "1"),
            "ENVRT_REQUIRE_DOCKER=1 but no engine or no image envrt-test:latest"
        );
        eprintln!("SKIPPED: no Docker engine or no image envrt-test:latest");
    }
    ok
}

#[test]
fn docker_shows_no_network_or_an_unrestricted_one_and_refuses_what_it_cannot_enforce() {
    if !docker_ready() {
        return;
    }
    let s = Site::new();
    let none =
        "[[environment]]\nid = \"box\"\ndriver = \"docker\"\n[environment.config]\nimage = \"envrt-test:latest\"\n";
    let bridge = "[[environment]]\nid = \"br\"\ndriver = \"docker\"\n[environment.config]\nimage = \"envrt-test:latest\"\nnetwork = \"bridge\"\n";
    write_config(&s, &format!("{none}{bridge}"));
    assert_eq!(
        caps_egress(&s)[..2],
        [
            ("box".to_owned(), "no network".to_owned()),
            ("br".to_owned(), "unrestricted (Docker network \"bridge\")".to_owned())
        ]
    );
    let out = s.run(&["lease", "acquire", "--env-id", "box", "--allow", "pypi.org:443"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(2),
            "Network policy refused: the lease asks for \"pypi.org:443\", which the environment's policy neither \
             allows nor lists as grantable\n"
        )
    );
    write_config(
        &s,
        &format!("{none}[environment.network]\negress = \"none\"\ngrantable = [\"pypi.org:443\"]\n"),
    );
    let out = s.run(&["exec", "--env-id", "box", "--allow", "pypi.org:443", "--", "true"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(2),
            "Network policy refused: driver \"docker\" cannot enforce egress = \"allow\" yet: its leases have no \
             network at all, so only egress = \"none\" is accepted\n"
        )
    );
    let out = s.run(&["exec", "--env-id", "box", "--egress", "none", "--", "true"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    write_config(&s, &format!("{bridge}[environment.network]\negress = \"none\"\n"));
    let out = s.run(&["caps"]);
    assert_eq!(
        out.stderr,
        "envrt: config \"envrt.toml\": environment \"br\": driver \"docker\" cannot enforce a network policy over \
         Docker network \"bridge\": the lease would reach the network around the policy\n"
    );
}

/// The reference worker next to the binary, or `None` (skipped loudly; a failure under
/// `ENVRT_REQUIRE_SANDBOX=1`).
fn sandbox_worker() -> Option<std::path::PathBuf> {
    let worker = std::env::var_os("ENVRT_SANDBOX_WORKER")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::Path::new(common::BIN).parent()?.join("envrt-sandbox-worker")))
        .filter(|p| p.is_file());
    if worker.is_none() {
        assert!(
            std::env::var("ENVRT_REQUIRE_SANDBOX").map_or(true, |v| v != "1"),
            "ENVRT_REQUIRE_SANDBOX=1 but envrt-sandbox-worker was not found"
        );
        eprintln!("SKIPPED: no envrt-sandbox-worker (set ENVRT_SANDBOX_WORKER or build it next to envrt)");
    }
    worker
}

#[test]
fn without_its_egress_proxy_the_sandbox_has_no_network_and_refuses_a_lease_that_asks_for_more() {
    let Some(worker) = sandbox_worker() else { return };
    let s = Site::new();
    // No egress proxy binary: the reference worker's leases have no network at all (with
    // one, beside envrt, the sandbox enforces policies: crates/driver-plugin-sandbox/tests/reference_egress.rs).
    let isolated = [("ENVRT_EGRESS", "/nonexistent/envrt-egress")];
    let run = |args: &[&str]| s.run_with_env(args, None, &isolated);
    write_config(
        &s,
        &format!(
            "[sandbox]\nworker = \"{}\"\n[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n\
             [environment.network]\ngrantable = [\"pypi.org:443\"]\n",
            worker.display()
        ),
    );
    let caps = run(&["caps", "--json"]);
    let caps: serde_json::Value = serde_json::from_slice(&caps.stdout).unwrap();
    assert_eq!(caps[0]["enforces"]["egress"], "no network");
    let out = run(&["exec", "--env-id", "box", "--allow", "pypi.org:443", "--", "true"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(2),
            "Network policy refused: driver \"sandbox\" cannot enforce egress = \"allow\" yet: its leases have no \
             network at all, so only egress = \"none\" is accepted\n"
        )
    );
    let acquired = run(&["lease", "acquire", "--env-id", "box", "--detached", "--egress", "none"]);
    assert_eq!(acquired.code, Some(0), "{}", acquired.stderr);
    let id = acquired.stdout_text().trim().to_owned();
    let out = run(&["lease", "network", &id, "--egress", "none"]);
    assert_eq!(
        (out.code, out.stdout_text()),
        (Some(0), format!("{id} network: no network\n"))
    );
    let out = run(&["lease", "network", &id, "--egress", "open"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            Some(2),
            "Network policy refused: the lease asks for egress = \"open\", but the environment's policy is egress = \
             \"none\" and \"open\" is not grantable\n"
        )
    );
    write_config(
        &s,
        &format!(
            "[sandbox]\nworker = \"{}\"\n[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\nnetwork = \"host\"\n",
            worker.display()
        ),
    );
    let out = run(&["lease", "release", &id]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        "envrt: config \"envrt.toml\": environment \"box\": driver \"sandbox\" cannot give a lease the host network: \
         its leases have a network of their own with no route out\n"
    );
    write_config(
        &s,
        &format!(
            "[sandbox]\nworker = \"{}\"\n[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n",
            worker.display()
        ),
    );
    assert_eq!(run(&["lease", "release", &id]).code, Some(0));
}
