//! `envrt template list` and `template delete ID` without `--env-id`: a template is found
//! by its id in whichever environment holds it, of the configured tenant only; and the
//! `FROM LEASE` column names envrt's lease id, on the sandbox too (whose worker records
//! its own id for the lease).

mod common;

use common::*;

fn ok(site: &Site, args: &[&str]) -> String {
    let out = site.run(args);
    assert_eq!(out.code, Some(0), "envrt {args:?}: {}", out.stderr);
    out.stdout_text()
}

#[test]
fn templates_are_found_by_id_across_environments_of_the_tenant_only() {
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        "[[environment]]\nid = \"work\"\ndriver = \"local\"\n",
    )
    .unwrap();
    std::fs::write(
        s.path().join("other.toml"),
        "company = \"other\"\n[[environment]]\nid = \"work\"\ndriver = \"local\"\n",
    )
    .unwrap();
    // A template in "work", which is not the default environment.
    let lease = ok(&s, &["lease", "acquire", "--env-id", "work", "--detached"])
        .trim()
        .to_owned();
    let template = ok(&s, &["template", "capture", &lease]).trim().to_owned();
    let listed = ok(&s, &["template", "list"]);
    let row = listed.lines().find(|l| l.starts_with(&template)).expect(&listed);
    assert!(row.contains(&lease), "{row}");
    let json: serde_json::Value = serde_json::from_str(&ok(&s, &["template", "list", "--json"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
    assert_eq!(json[0]["environmentId"], "work");
    // Another tenant sees none of it and cannot delete it.
    let other = ["--config", "other.toml"];
    let foreign = ok(&s, &[other[0], other[1], "template", "list"]);
    assert_eq!(foreign.lines().count(), 1, "only the header: {foreign}");
    let refused = s.run(&[other[0], other[1], "template", "delete", &template]);
    assert_eq!(
        (refused.code, refused.stderr),
        (
            Some(2),
            format!("Template \"{template}\" was not found in any environment of tenant \"other\".\n")
        )
    );
    // Its own tenant deletes it by id alone.
    assert_eq!(
        ok(&s, &["template", "delete", &template]),
        format!("{template} deleted\n")
    );
    let again = s.run(&["template", "delete", &template]);
    assert_eq!(
        (again.code, again.stderr),
        (
            Some(2),
            format!("Template \"{template}\" was not found in any environment of tenant \"local\".\n")
        )
    );
    // Naming the environment keeps the facade's text.
    let named = s.run(&["template", "delete", &template, "--env-id", "work"]);
    assert_eq!(
        named.stderr,
        format!("Template \"{template}\" was not found in environment \"work\".\n")
    );
    ok(&s, &["lease", "release", &lease]);
}

#[test]
fn the_sandbox_template_list_names_envrts_lease_id() {
    if envrt_test_support::sandbox::worker_beside_or_skip(BIN).is_none() {
        return;
    }
    let s = Site::new();
    std::fs::write(
        s.path().join("envrt.toml"),
        "[[environment]]\nid = \"box\"\ndriver = \"sandbox\"\n",
    )
    .unwrap();
    let lease = ok(&s, &["lease", "acquire", "--env-id", "box", "--detached"])
        .trim()
        .to_owned();
    let template = ok(&s, &["template", "capture", &lease]).trim().to_owned();
    let listed = ok(&s, &["template", "list", "--env-id", "box"]);
    let row = listed.lines().find(|l| l.starts_with(&template)).expect(&listed);
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns[3], lease, "FROM LEASE is envrt's lease id: {listed}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&s, &["template", "list", "--env-id", "box", "--json"])).unwrap();
    assert_eq!(json[0]["sourceLeaseId"], lease.as_str());
    assert_eq!(
        ok(&s, &["template", "delete", &template]),
        format!("{template} deleted\n")
    );
    ok(&s, &["lease", "release", &lease]);
}
