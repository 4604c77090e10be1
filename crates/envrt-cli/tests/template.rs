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
        vec!["template", "delete", template.as_str()],
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
