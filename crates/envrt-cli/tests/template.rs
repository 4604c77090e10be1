//! `envrt template capture | list | delete` and `--template` on `lease acquire` and `exec`,
//! end to end through the binary with the local driver and a real lease store.

mod common;

use common::Site;

fn ok(site: &Site, args: &[&str]) -> String {
    let out = site.run(args);
    assert_eq!(out.code, Some(0), "envrt {args:?}: {}", out.stderr);
    out.stdout_text()
}

#[test]
fn a_template_round_trip_through_the_cli() {
    let s = Site::new();
    let source = ok(&s, &["lease", "acquire", "--detached"]).trim().to_owned();
    ok(&s, &["exec", "--lease", &source, "--", "sh", "-c", "echo v1 > config"]);
    let template = ok(&s, &["template", "capture", &source, "--label", "base"])
        .trim()
        .to_owned();
    assert!(template.starts_with("tpl-"), "{template}");
    ok(&s, &["exec", "--lease", &source, "--", "sh", "-c", "echo v2 > config"]);

    let listed = ok(&s, &["template", "list"]);
    let row = listed.lines().find(|l| l.starts_with(&template)).expect(&listed);
    assert!(
        row.contains("snapshot") && row.contains("base") && row.contains(&source),
        "{row}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&s, &["template", "list", "--json"])).unwrap();
    assert_eq!(json[0]["id"], template.as_str());
    assert_eq!(json[0]["environmentId"], "local");

    // An ephemeral exec from the template sees the captured file, not the later change.
    assert_eq!(
        ok(&s, &["exec", "--template", &template, "--", "cat", "config"]),
        "v1\n"
    );
    let lease = ok(&s, &["lease", "acquire", "--detached", "--template", &template])
        .trim()
        .to_owned();
    assert_eq!(ok(&s, &["exec", "--lease", &lease, "--", "cat", "config"]), "v1\n");

    assert_eq!(
        ok(&s, &["template", "delete", &template]),
        format!("{template} deleted\n")
    );
    let refused = format!("Template \"{template}\" was not found in environment \"local\".\n");
    for args in [
        vec!["exec", "--template", template.as_str(), "--", "true"],
        vec!["lease", "acquire", "--detached", "--template", template.as_str()],
        vec!["template", "delete", template.as_str(), "--env-id", "local"],
    ] {
        let out = s.run(&args);
        assert_eq!(out.code, Some(2), "envrt {args:?}");
        assert_eq!(out.stderr, refused, "envrt {args:?}");
    }
    assert!(
        ok(&s, &["template", "list"]).lines().count() == 1,
        "only the header is left"
    );
    // The lease started from the deleted template keeps its files.
    assert_eq!(ok(&s, &["exec", "--lease", &lease, "--", "cat", "config"]), "v1\n");
    for id in [&source, &lease] {
        ok(&s, &["lease", "release", id]);
    }
}

#[test]
fn capture_of_an_unknown_or_ended_lease_is_refused() {
    let s = Site::new();
    let out = s.run(&["template", "capture", "no-such-lease"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(out.stderr, "Lease \"no-such-lease\" was not found.\n");
    let lease = ok(&s, &["lease", "acquire", "--detached"]).trim().to_owned();
    ok(&s, &["lease", "release", &lease]);
    let out = s.run(&["template", "capture", &lease]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        format!("Lease \"{lease}\" is not active (status: released).\n")
    );
}

#[test]
fn setup_runs_a_command_on_a_fresh_lease_and_captures_it_only_when_it_succeeds() {
    let s = Site::new();
    let template = ok(
        &s,
        &[
            "template",
            "setup",
            "--label",
            "ready",
            "--",
            "sh",
            "-c",
            "echo ready > done; echo set up",
        ],
    );
    let lines: Vec<&str> = template.lines().collect();
    assert_eq!(lines.len(), 2, "{template}");
    assert_eq!(lines[0], "set up");
    let template = lines[1];
    assert!(template.starts_with("tpl-"), "{template}");
    assert_eq!(
        ok(&s, &["exec", "--template", template, "--", "cat", "done"]),
        "ready\n"
    );
    // A setup from that template builds on it.
    let second = ok(
        &s,
        &[
            "template",
            "setup",
            "--from",
            template,
            "--",
            "sh",
            "-c",
            "cat done > copy",
        ],
    );
    assert_eq!(
        ok(&s, &["exec", "--template", second.trim(), "--", "cat", "copy"]),
        "ready\n"
    );

    let failed = s.run(&["template", "setup", "--", "sh", "-c", "exit 3"]);
    assert_eq!(failed.code, Some(3));
    assert_eq!(
        failed.stderr,
        "envrt: the setup session exited with 3; nothing was captured\n"
    );
    assert_eq!(
        ok(&s, &["template", "list"]).lines().count(),
        3,
        "header and two templates"
    );
    // Without a duplex channel (local) an interactive setup is refused, and says what works.
    let interactive = s.run(&["template", "setup"]);
    assert_eq!(interactive.code, Some(2));
    assert_eq!(
        interactive.stderr,
        "Environment driver \"local\" does not support duplex channels. An interactive setup needs a duplex channel; \
         give the setup as a command: envrt template setup -- sh -c '…'\n"
    );
    // No lease of the setups is left active.
    let leases = s.run(&["lease", "list", "--json"]);
    assert_eq!(leases.stdout_text().trim(), "[]");
}

/// Removes the containers and template images of one state dir, whatever happened.
struct DockerLeftovers(String);

impl Drop for DockerLeftovers {
    fn drop(&mut self) {
        let filter = format!("label=envrt.cli-state={}", self.0);
        for (list, remove) in [(["ps", "-aq"], ["rm", "-f"]), (["images", "-q"], ["rmi", "-f"])] {
            let out = std::process::Command::new("docker")
                .args(list)
                .args(["--filter", &filter])
                .output();
            if let Ok(out) = out {
                let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                if !ids.is_empty() {
                    let _ = std::process::Command::new("docker").args(remove).args(&ids).output();
                }
            }
        }
    }
}

#[test]
fn an_interactive_setup_in_a_container_is_captured_as_an_image() {
    let Some(image) = envrt_test_support::docker::image_or_skip() else {
        return;
    };
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        format!("[[environment]]\nid = \"ctr\"\ndriver = \"docker\"\n[environment.config]\nimage = \"{image}\"\n"),
    )
    .unwrap();
    let state = std::path::absolute(s.state()).unwrap();
    let _cleanup = DockerLeftovers(state.display().to_string());
    // The "user" types two lines into the shell, then leaves it.
    let session = s.run_with(
        &["template", "setup", "--env-id", "ctr", "--no-raw", "--label", "by-hand"],
        Some(b"echo typed > by-hand\nexit\n"),
    );
    assert_eq!(session.code, Some(0), "{}", session.stderr);
    // The id follows the session's output (the shell's last prompt ends no line).
    let template = session
        .stdout_text()
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    assert!(
        template.starts_with("tpl-"),
        "{:?} / {:?}",
        session.stdout_text(),
        session.stderr
    );
    assert_eq!(
        ok(
            &s,
            &[
                "exec",
                "--env-id",
                "ctr",
                "--template",
                &template,
                "--",
                "cat",
                "by-hand"
            ]
        ),
        "typed\n"
    );
    let listed = ok(&s, &["template", "list", "--env-id", "ctr"]);
    assert!(
        listed.contains(&template) && listed.contains("image") && listed.contains("by-hand"),
        "{listed}"
    );
    assert_eq!(
        ok(&s, &["template", "delete", &template, "--env-id", "ctr"]),
        format!("{template} deleted\n")
    );
    let images = std::process::Command::new("docker")
        .args(["images", "-q", "--filter", &format!("label=envrt.template={template}")])
        .output()
        .unwrap();
    assert!(images.stdout.is_empty(), "the template image is gone");
}
