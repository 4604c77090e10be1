//! The credential configuration: parsing, exact refusal texts, and resolving a secret
//! without any text or `Debug` output ever showing it.

use super::*;

fn raw(host: &str, header: &str, value: &str, secret: &str) -> RawCredential {
    RawCredential {
        host: host.into(),
        header: header.into(),
        value: value.into(),
        secret: secret.into(),
        placeholder_env: None,
    }
}

fn err(r: RawCredential) -> String {
    Credential::parse_all(&[r]).unwrap_err().to_string()
}

#[test]
fn a_credential_is_parsed_and_round_trips() {
    let mut r = raw("API.GitHub.com", "Authorization", "Bearer {secret}", "env:GITHUB_TOKEN");
    r.placeholder_env = Some("GITHUB_TOKEN".into());
    let c = Credential::parse(0, &r).unwrap();
    assert_eq!(c.host, "api.github.com");
    assert_eq!(c.port, 443);
    assert_eq!(c.header, "authorization");
    assert_eq!((c.prefix.as_str(), c.suffix.as_str()), ("Bearer ", ""));
    assert_eq!(c.secret, SecretRef::Env("GITHUB_TOKEN".into()));
    assert_eq!(
        placeholder_env(std::slice::from_ref(&c)),
        vec![("GITHUB_TOKEN".to_owned(), "envrt-credential-placeholder".to_owned())]
    );
    assert_eq!(Credential::parse(0, &c.to_raw()).unwrap(), c);
    let other = Credential::parse(1, &raw("api.test:8443", "X-Key", "{secret}", "file:/run/key")).unwrap();
    assert_eq!(other.port, 8443);
    assert_eq!(other.to_raw().host, "api.test:8443");
    assert_eq!(other.secret, SecretRef::File("/run/key".into()));
}

#[test]
fn every_bad_credential_gets_its_exact_text() {
    let h = "credential 0: host";
    for host in ["*.github.com", "10.0.0.1", "203.0.113.0/24", "", "bad host"] {
        assert_eq!(
            err(raw(host, "A", "{secret}", "env:T")),
            format!(
                "{h} \"{host}\" must be one host name with an optional port (a wildcard or an address cannot carry a credential)"
            )
        );
    }
    assert_eq!(
        err(raw("a.test", "Bad Header", "{secret}", "env:T")),
        "credential 0: header \"Bad Header\" is not an HTTP header name"
    );
    assert_eq!(
        err(raw("a.test", "Host", "{secret}", "env:T")),
        "credential 0: header \"Host\" cannot carry a credential (the proxy sets it)"
    );
    assert_eq!(
        err(raw("a.test", "Proxy-Authorization", "{secret}", "env:T")),
        "credential 0: header \"Proxy-Authorization\" cannot carry a credential (the proxy sets it)"
    );
    let value =
        "credential 0: value must contain \"{secret}\" exactly once, and otherwise only visible ASCII and spaces";
    for v in ["Bearer", "{secret}{secret}", "x\r\n{secret}", "\u{e9}{secret}"] {
        assert_eq!(err(raw("a.test", "A", v, "env:T")), value);
    }
    for s in ["GITHUB_TOKEN", "env:", "env:1X", "file:relative", "vault:x"] {
        assert_eq!(
            err(raw("a.test", "A", "{secret}", s)),
            format!("credential 0: secret \"{s}\" must be \"env:NAME\" or \"file:/absolute/path\"")
        );
    }
    let mut p = raw("a.test", "A", "{secret}", "env:T");
    p.placeholder_env = Some("A-B".into());
    assert_eq!(
        err(p),
        "credential 0: placeholder_env \"A-B\" is not an environment variable name"
    );
    let dup = [
        raw("a.test", "A", "{secret}", "env:T"),
        raw("b.test", "A", "{secret}", "env:T"),
        raw("A.test", "a", "x {secret}", "env:U"),
    ];
    assert_eq!(
        Credential::parse_all(&dup).unwrap_err().to_string(),
        "credential 2: host \"a.test\" already has a \"a\" credential (credential 0)"
    );
    let many = vec![raw("a.test", "A", "{secret}", "env:T"); MAX_CREDENTIALS + 1];
    assert_eq!(
        Credential::parse_all(&many).unwrap_err().to_string(),
        "credential: at most 64 credentials, not 65"
    );
}

#[test]
fn a_secret_is_resolved_and_no_error_or_debug_text_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cr3t-from-file\n").unwrap();
    let from_file = Credential::parse(
        0,
        &raw(
            "a.test",
            "Authorization",
            "Bearer {secret}",
            &format!("file:{}", file.display()),
        ),
    )
    .unwrap()
    .resolve(0, |_| None)
    .unwrap();
    assert_eq!(from_file.value.expose(), "Bearer s3cr3t-from-file");
    assert!(!format!("{from_file:?}").contains("s3cr3t"));
    let by_env = Credential::parse(0, &raw("a.test", "X-Key", "{secret}", "env:TOKEN")).unwrap();
    assert_eq!(
        by_env
            .resolve(0, |n| (n == "TOKEN").then(|| "s3cr3t".to_owned()))
            .unwrap()
            .value
            .expose(),
        "s3cr3t"
    );
    assert_eq!(
        by_env.resolve(3, |_| None).unwrap_err().to_string(),
        "credential 3: the secret env:TOKEN cannot be read: the variable is not set"
    );
    let bad = "credential 0: the secret env:TOKEN is empty, longer than 65536 bytes, or holds a character an HTTP header cannot carry";
    for secret in ["", "s3cr3t\r\nX-Evil: 1", "s3cr3t\u{0}"] {
        let e = by_env.resolve(0, |_| Some(secret.to_owned())).unwrap_err().to_string();
        assert_eq!(e, bad);
    }
    assert_eq!(
        by_env
            .resolve(0, |_| Some("x".repeat(MAX_SECRET_BYTES + 1)))
            .unwrap_err()
            .to_string(),
        bad
    );
    let missing = Credential::parse(0, &raw("a.test", "A", "{secret}", "file:/nonexistent/envrt-token")).unwrap();
    assert_eq!(
        missing.resolve(0, |_| None).unwrap_err().to_string(),
        "credential 0: the secret file:/nonexistent/envrt-token cannot be read: entity not found"
    );
}
