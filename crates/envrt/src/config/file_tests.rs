//! Unit tests of `file.rs`: parsing, defaults and refusals of `envrt.toml`.

use super::*;

fn paths() -> Paths {
    Paths {
        config: None,
        state_dir: PathBuf::from("/state"),
    }
}

#[test]
fn no_file_gives_the_implicit_local_environment() {
    let c = Config::from_file(File::default(), &paths()).unwrap();
    assert_eq!(
        c.environments,
        vec![Environment::new(IMPLICIT_LOCAL, IMPLICIT_LOCAL, IMPLICIT_LOCAL)]
    );
    assert_eq!(c.company, IMPLICIT_LOCAL);
    assert_eq!(c.default_environment, IMPLICIT_LOCAL);
    let keys: Vec<&str> = c.drivers.keys().copied().collect();
    let mut known = crate::known_drivers();
    known.sort();
    assert_eq!(keys, known);
}

#[cfg(all(feature = "docker", feature = "plugin-sandbox"))]
#[test]
fn a_full_file_parses_with_driver_config_as_json() {
    let file = Config::parse(
        r#"
company = "acme"
default = "dev"
[local]
root = "/tmp/ws"
[docker]
host = "tcp://127.0.0.1:2375"
[[plugin]]
manifest = "p/plugin.json"
driver_key = "bwrap"
[plugin.config]
level = 2
[[environment]]
id = "dev"
driver = "docker"
[environment.config]
image = "debian:12"
memoryBytes = 100
[[environment]]
id = "old"
name = "Old one"
driver = "local"
status = "archived"
"#,
    )
    .unwrap();
    let mut paths = paths();
    paths.config = Some(PathBuf::from("/etc/envrt/envrt.toml"));
    let c = Config::from_file(file, &paths).unwrap();
    assert_eq!(c.company, "acme");
    assert_eq!(c.default_environment, "dev");
    let ids: Vec<&str> = c.environments.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["dev", "old", "local"]);
    let dev = c.environment("dev").unwrap();
    assert_eq!(dev.name, "dev");
    assert_eq!(
        serde_json::Value::Object(dev.config.clone()),
        serde_json::json!({"image": "debian:12", "memoryBytes": 100})
    );
    assert_eq!(c.environment("old").unwrap().status, EnvironmentStatus::Archived);
    assert!(c.ttls.is_empty());
}

#[test]
fn an_environment_may_set_a_default_ttl() {
    let file = Config::parse("[[environment]]\nid = \"a\"\ndriver = \"local\"\nttl = \"1m30s\"\n").unwrap();
    let c = Config::from_file(file, &paths()).unwrap();
    assert_eq!(c.ttls.get("a"), Some(&std::time::Duration::from_secs(90)));
    assert_eq!(c.ttls.get("local"), None);
    assert_eq!(
        Config::parse("[[environment]]\nid = \"a\"\ndriver = \"local\"\nttl = \"soon\"\n").unwrap_err(),
        "environment \"a\": ttl expects a positive duration such as 90, 1.5, 500ms, 1s, 2m or 1h30m, got \"soon\""
    );
}

#[test]
fn bad_files_are_refused_with_a_clear_message() {
    assert_eq!(
        Config::parse("[[environment]]\nid = \"a\"\ndriver = \"local\"\n[[environment]]\nid = \"a\"\ndriver = \"x\"\n")
            .unwrap_err(),
        "environment \"a\" is defined twice"
    );
    assert_eq!(
        Config::parse("[[environment]]\nid = \"a\"\ndriver = \"\"\n").unwrap_err(),
        "environment \"a\" has an empty driver"
    );
    assert_eq!(
        Config::parse("colour = 1\n").unwrap_err(),
        unknown_field("colour", &top_level_keys())
    );
    assert_eq!(
        Config::parse("[[environment]]\nid = \"a\"\n").unwrap_err(),
        "missing field `driver`"
    );
}

#[test]
fn unknown_fields_are_refused_as_serde_words_them() {
    assert_eq!(unknown_field("x", &[]), "unknown field `x`, there are no fields");
    assert_eq!(unknown_field("x", &["a"]), "unknown field `x`, expected `a`");
    assert_eq!(
        unknown_field("x", &["a", "b"]),
        "unknown field `x`, expected `a` or `b`"
    );
    assert_eq!(
        unknown_field("x", &["a", "b", "c"]),
        "unknown field `x`, expected one of `a`, `b`, `c`"
    );
}

#[test]
fn an_environment_may_declare_a_pool() {
    let file =
        Config::parse("[[environment]]\nid = \"a\"\ndriver = \"local\"\n[environment.pool]\nsize = 3\n").unwrap();
    let c = Config::from_file(file, &paths()).unwrap();
    assert_eq!(c.pools.get("a"), Some(&3));
    assert_eq!(c.pools.len(), 1);
}

#[test]
fn bad_pools_are_refused_with_exact_texts() {
    let pool = |body: &str| {
        Config::parse(&format!(
            "[[environment]]\nid = \"a\"\ndriver = \"local\"\n[environment.pool]\n{body}"
        ))
        .unwrap_err()
    };
    for (body, got) in [
        ("size = 0\n", "0"),
        ("size = -2\n", "-2"),
        ("size = 65\n", "65"),
        ("size = 1.5\n", "1.5"),
        ("size = \"three\"\n", "\"three\""),
        ("size = true\n", "true"),
        ("size = [1]\n", "an array"),
    ] {
        assert_eq!(
            pool(body),
            format!("environment \"a\": pool size expects a whole number from 1 to 64, got {got}"),
            "for {body:?}"
        );
    }
    assert_eq!(pool(""), "environment \"a\": [environment.pool] needs a size");
    assert_eq!(
        pool("size = 2\nimage = \"x\"\n"),
        "unknown field `image`, expected `size`"
    );
    assert_eq!(
        Config::parse("[[environment]]\nid = \"a\"\ndriver = \"local\"\nttl = \"5m\"\n[environment.pool]\nsize = 2\n")
            .unwrap_err(),
        "environment \"a\": a pool cannot be combined with ttl (pooled leases are acquired ahead and carry no expiry)"
    );
}
