//! `envrt lease acquire --scope S --reuse scope --label K=V` and `envrt lease release
//! --scope S` / `--label K=V` end to end through the binary with the local driver and a
//! real lease store: the scoped acquire says on stderr whether it created or resumed the
//! scope's lease, and the bulk release ends exactly the matching leases, idempotently.

mod common;

use common::Site;

fn ok(site: &Site, args: &[&str]) -> common::Outcome {
    let out = site.run(args);
    assert_eq!(out.code, Some(0), "envrt {args:?}: {}", out.stderr);
    out
}

#[test]
fn a_scoped_acquire_resumes_its_lease_and_release_by_scope_or_label_ends_the_matching_ones() {
    let s = Site::new();
    let scoped = [
        "lease",
        "acquire",
        "--detached",
        "--scope",
        "agent-1",
        "--reuse",
        "scope",
        "--label",
        "team=red",
    ];
    let first = ok(&s, &scoped);
    let id = first.stdout_text().trim().to_owned();
    assert_eq!(first.stderr, format!("envrt: lease {id} created\n"));
    let again = ok(&s, &scoped);
    assert_eq!(again.stdout_text().trim(), id);
    assert_eq!(again.stderr, format!("envrt: lease {id} resumed\n"));

    let blue = ok(&s, &["lease", "acquire", "--detached", "--label", "team=blue"]).stdout_text();
    let blue = blue.trim();
    let other = ok(&s, &["lease", "acquire", "--detached", "--scope", "agent-2"]).stdout_text();
    let other = other.trim();

    assert_eq!(
        ok(&s, &["lease", "release", "--scope", "agent-1"]).stdout_text(),
        format!("{id} released\n")
    );
    assert_eq!(
        ok(&s, &["lease", "release", "--scope", "agent-1"]).stdout_text(),
        "",
        "idempotent"
    );
    assert_eq!(
        ok(&s, &["lease", "release", "--label", "team=blue"]).stdout_text(),
        format!("{blue} released\n")
    );
    let listed = ok(&s, &["lease", "list"]).stdout_text();
    assert!(
        listed.contains(other) && !listed.contains(&id) && !listed.contains(blue),
        "{listed}"
    );
    ok(&s, &["lease", "release", other]);
}

#[test]
fn bad_scope_and_label_arguments_are_refused() {
    let s = Site::new();
    let out = s.run(&["lease", "acquire", "--detached", "--reuse", "scope"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(out.stderr, "Invalid input: reuse = \"scope\" needs a scope\n");
    let out = s.run(&["lease", "release", "--label", "novalue"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("expected KEY=VALUE with a non-empty KEY"),
        "{}",
        out.stderr
    );
    let out = s.run(&["lease", "release"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("--scope") || out.stderr.contains("<ID>"),
        "{}",
        out.stderr
    );
    assert!(s.leases_json().is_empty());
}
