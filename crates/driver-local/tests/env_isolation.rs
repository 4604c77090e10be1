//! The host environment does not leak into commands beyond the documented allow-list.
//! One test in its own binary: it changes this process's environment.

mod common;

use std::collections::BTreeMap;

use common::Harness;
use envrt_runtime_core::{EnvValue, ExecuteRequest, LeaseStatus, RuntimeError, Secret};

fn parse_env(stdout: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

#[tokio::test]
#[allow(unsafe_code)]
async fn only_the_allow_list_reaches_commands_and_secrets_never_show() {
    // SAFETY: this binary has this single test, so no other thread reads the environment.
    unsafe {
        std::env::set_var("ENVRT_TEST_LEAK", "1");
        std::env::set_var("TZ", "Europe/Paris");
        std::env::set_var("LANG", "C.UTF-8");
        std::env::remove_var("LC_ALL");
        std::env::remove_var("LC_CTYPE");
    }
    let h = Harness::new().await;
    let lease = h.lease().await;
    let ws = h.workspace(&lease);

    let mut request = ExecuteRequest::new("/usr/bin/env", [""; 0]);
    request.env.insert("MINE".into(), "value with spaces".into());
    request
        .env
        .insert("TOKEN".into(), EnvValue::from(Secret::new("hunter2")));
    let out = common::bounded(h.runtime.execute(&lease.id, request.clone()))
        .await
        .unwrap();
    let env = parse_env(&out.stdout);
    assert!(!env.contains_key("ENVRT_TEST_LEAK"));
    let keys: Vec<&str> = env.keys().map(String::as_str).collect();
    assert_eq!(keys, ["HOME", "LANG", "MINE", "PATH", "TOKEN", "TZ"]);
    assert_eq!(env["HOME"], ws.to_string_lossy());
    assert_eq!(env["TZ"], "Europe/Paris");
    assert_eq!(env["LANG"], "C.UTF-8");
    assert_eq!(env["MINE"], "value with spaces");
    assert_eq!(env["TOKEN"], "hunter2");
    assert_eq!(env["PATH"], std::env::var("PATH").unwrap());
    assert!(!format!("{request:?}").contains("hunter2"));

    // A request may override the allow-list, HOME included.
    let mut request = ExecuteRequest::new("/usr/bin/env", [""; 0]);
    request.env.insert("HOME".into(), "/nowhere".into());
    request.env.insert("PATH".into(), "/bin".into());
    let env = parse_env(
        &common::bounded(h.runtime.execute(&lease.id, request))
            .await
            .unwrap()
            .stdout,
    );
    assert_eq!((env["HOME"].as_str(), env["PATH"].as_str()), ("/nowhere", "/bin"));

    // A bad variable is refused without echoing any value.
    let mut request = ExecuteRequest::new("true", [""; 0]);
    request
        .env
        .insert("TOKEN".into(), EnvValue::from(Secret::new("hunter2\0")));
    let err = common::bounded(h.runtime.execute(&lease.id, request))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Driver(_)));
    assert_eq!(
        err.to_string(),
        "Invalid input: environment variable TOKEN contains a NUL byte"
    );
    assert!(!format!("{err:?}").contains("hunter2"));

    // With no PATH on the host, commands get the documented default.
    let host_path = std::env::var("PATH").unwrap();
    // SAFETY: as above, single-threaded use of the environment in this binary.
    unsafe { std::env::remove_var("PATH") };
    let out = common::bounded(
        h.runtime
            .execute(&lease.id, ExecuteRequest::new("/usr/bin/env", [""; 0])),
    )
    .await;
    // SAFETY: as above.
    unsafe { std::env::set_var("PATH", host_path) };
    let env = parse_env(&out.unwrap().stdout);
    assert_eq!(
        env["PATH"],
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    );

    h.runtime.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    h.finish();
}
