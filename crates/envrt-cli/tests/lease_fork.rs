//! `envrt lease fork ID --count N` end to end through the binary with the local driver and
//! a real lease store: the new ids, one per line, each a lease holding the source's files
//! as they were, and the exact refusals.

mod common;

use common::Site;

fn ok(site: &Site, args: &[&str]) -> String {
    let out = site.run(args);
    assert_eq!(out.code, Some(0), "envrt {args:?}: {}", out.stderr);
    out.stdout_text()
}

#[test]
fn a_fork_prints_one_new_lease_id_per_line() {
    let s = Site::new();
    let source = ok(&s, &["lease", "acquire", "--detached"]).trim().to_owned();
    ok(&s, &["exec", "--lease", &source, "--", "sh", "-c", "echo v1 > state"]);
    let printed = ok(&s, &["lease", "fork", &source, "--count", "3"]);
    let copies: Vec<&str> = printed.lines().collect();
    assert_eq!(copies.len(), 3, "{printed}");
    ok(&s, &["exec", "--lease", &source, "--", "sh", "-c", "echo v2 > state"]);
    for copy in &copies {
        assert_ne!(*copy, source);
        assert_eq!(ok(&s, &["exec", "--lease", copy, "--", "cat", "state"]), "v1\n");
    }
    let listed = ok(&s, &["lease", "list"]);
    for id in copies.iter().chain([&source.as_str()]) {
        assert!(listed.contains(id), "{listed}");
    }
    for id in copies.iter().chain([&source.as_str()]) {
        ok(&s, &["lease", "release", id]);
    }
}

#[test]
fn a_fork_is_refused_with_the_exact_texts() {
    let s = Site::new();
    let source = ok(&s, &["lease", "acquire", "--detached"]).trim().to_owned();
    for (args, text) in [
        (
            vec!["lease", "fork", "no-such-lease"],
            "Lease \"no-such-lease\" was not found.\n".to_owned(),
        ),
        (
            vec!["lease", "fork", source.as_str(), "--count", "0"],
            "Invalid input: a fork needs a count of at least 1\n".to_owned(),
        ),
        (
            vec!["lease", "fork", source.as_str(), "--count", "17"],
            "Invalid input: a fork makes at most 16 copies, not 17\n".to_owned(),
        ),
    ] {
        let out = s.run(&args);
        assert_eq!(out.code, Some(2), "envrt {args:?}");
        assert_eq!(out.stderr, text, "envrt {args:?}");
        assert_eq!(out.stdout_text(), "", "envrt {args:?}");
    }
    assert_eq!(s.leases_json().len(), 1, "nothing was made");
    ok(&s, &["lease", "release", &source]);
}
