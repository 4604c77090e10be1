//! Generated inputs through real processes: argv, environment maps, stdin bytes and exit
//! codes come back unchanged. (The cross-driver suite has its own; these pin the local
//! driver on its own.)

mod common;

use std::collections::BTreeMap;

use common::Harness;
use envrt_runtime_core::{EnvValue, ExecuteRequest, Lease, LeaseStatus, Secret};
use proptest::prelude::*;

struct Fixture {
    rt: tokio::runtime::Runtime,
    h: Harness,
    lease: Lease,
}

impl Fixture {
    fn new() -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (h, lease) = rt.block_on(async {
            let h = Harness::new().await;
            let lease = h.lease().await;
            (h, lease)
        });
        Fixture { rt, h, lease }
    }

    fn run(&self, request: ExecuteRequest) -> envrt_runtime_core::ExecuteResult {
        self.rt.block_on(self.h.execute(&self.lease, request))
    }

    fn finish(self) {
        self.rt
            .block_on(self.h.runtime.release_lease(&self.lease.id, LeaseStatus::Released))
            .unwrap();
        self.h.finish();
    }
}

fn no_nul() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[^\u{0}]{0,40}").unwrap()
}

#[test]
fn generated_inputs_come_back_unchanged() {
    let fx = Fixture::new();
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config.clone());
    runner
        .run(&proptest::collection::vec(no_nul(), 0..12), |args| {
            // Every argument followed by NUL, unchanged.
            let script = "for a in \"$@\"; do printf '%s\\0' \"$a\"; done";
            let mut argv = vec!["-c".to_string(), script.into(), "sh".into()];
            argv.extend(args.iter().cloned());
            let out = fx.run(ExecuteRequest::new("sh", argv));
            let expected: Vec<u8> = args.iter().flat_map(|a| a.bytes().chain([0])).collect();
            prop_assert_eq!(out.stdout, expected);
            Ok(())
        })
        .unwrap();

    let key = proptest::string::string_regex("[A-Za-z_][A-Za-z0-9_]{0,15}").unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(config.clone());
    runner
        .run(
            &(proptest::collection::btree_map(key, no_nul(), 0..8), any::<bool>()),
            |(env, secret)| {
                let mut request = ExecuteRequest::new("env", ["-0"]);
                request.env = env
                    .iter()
                    .map(|(k, v)| {
                        let value = if secret {
                            EnvValue::from(Secret::new(v.clone()))
                        } else {
                            EnvValue::from(v.clone())
                        };
                        (k.clone(), value)
                    })
                    .collect();
                let out = fx.run(request);
                let seen: BTreeMap<String, String> = out
                    .stdout
                    .split(|b| *b == 0)
                    .filter(|e| !e.is_empty())
                    .filter_map(|e| {
                        let e = String::from_utf8(e.to_vec()).ok()?;
                        e.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned()))
                    })
                    .collect();
                for (k, v) in &env {
                    prop_assert_eq!(seen.get(k), Some(v));
                }
                Ok(())
            },
        )
        .unwrap();

    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 16,
        ..config.clone()
    });
    runner
        .run(
            &(proptest::collection::vec(any::<u8>(), 0..1024 * 1024), 0..=255i32),
            |(stdin, code)| {
                let mut request = ExecuteRequest::new("sh", ["-c", "cat; exit $0", &code.to_string()]);
                request.stdin = Some(stdin.clone());
                let out = fx.run(request);
                prop_assert_eq!(out.exit_code, Some(code));
                prop_assert!(out.stdout == stdin, "stdin came back changed ({} bytes)", stdin.len());
                Ok(())
            },
        )
        .unwrap();
    fx.finish();
}
