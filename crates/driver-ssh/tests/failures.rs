//! What goes wrong with SSH, against the real test `sshd`: a wrong host key, an
//! unreachable host, the connection killed mid-command, and many commands at once over
//! one connection.

mod common;

use std::time::Duration;

use envrt_runtime_core::{AcquireRequest, Environment, EnvironmentRuntime, ExecuteRequest, LeaseStatus};

use common::{acquire, runtime, server, survivors};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_host_key_is_refused_with_a_clear_error() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    // A known-hosts file that lists another key for the server.
    let key = dir.path().join("other");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(status.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let known = dir.path().join("known_hosts");
    let fields: Vec<&str> = public.split_whitespace().take(2).collect();
    std::fs::write(
        &known,
        format!("[{}]:{} {}\n", server.host, server.port, fields.join(" ")),
    )
    .unwrap();
    let mut config = server.config();
    config.insert("knownHosts".into(), known.to_string_lossy().into_owned().into());
    let driver = std::sync::Arc::new(envrt_driver_ssh::SshDriver::new(Default::default()).unwrap());
    let rt = EnvironmentRuntime::new();
    rt.register_driver(driver.clone());
    rt.put_environment(Environment::new("bad-key", "Bad key", "ssh").with_config(config.clone()))
        .await
        .unwrap();
    let err = rt
        .acquire_lease(AcquireRequest::new("bad-key", "acme"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Cannot connect to SSH host {}@{}:{}: the host key does not match the known-hosts file.",
            server.user, server.host, server.port
        )
    );
    // An empty known-hosts file: the key is unknown, refused unless the environment says so.
    std::fs::write(&known, "").unwrap();
    let err = driver.check(&driver.target_of(&config).unwrap()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Cannot connect to SSH host {}@{}:{}: the host key is not in the known-hosts file.",
            server.user, server.host, server.port
        )
    );
    config.insert("acceptNewHostKey".into(), true.into());
    driver.check(&driver.target_of(&config).unwrap()).await.unwrap();
    assert!(
        std::fs::read_to_string(&known).unwrap().contains(fields[0]),
        "the new key is recorded"
    );
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_host_is_refused_quickly() {
    let Some(server) = server() else { return };
    // A port nothing listens on: connection refused at once (bounded by the connect timeout).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let driver = envrt_driver_ssh::SshDriver::new(Default::default()).unwrap();
    let mut config = server.config();
    config.insert("port".into(), port.into());
    config.insert("connectRetrySeconds".into(), 0.into());
    let target = driver.target_of(&config).unwrap();
    let check = tokio::time::timeout(Duration::from_secs(30), driver.check(&target));
    let err = check.await.expect("refused within the connect timeout").unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Cannot connect to SSH host {}@127.0.0.1:{port}: connect to host 127.0.0.1 port {port}: Connection refused.",
            server.user
        )
    );
}

/// Forwards every connection to `listener` to the test sshd, until dropped.
fn forward_to(listener: tokio::net::TcpListener, sshd_port: u16) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", sshd_port)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_comes_back_within_the_retry_is_reached_and_one_that_does_not_is_refused() {
    let Some(server) = server() else { return };
    // A port nothing listens on yet: the host is "down" (connection refused).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let driver = envrt_driver_ssh::SshDriver::new(Default::default()).unwrap();
    let mut config = server.config();
    config.insert("port".into(), port.into());
    config.insert("connectRetrySeconds".into(), 20.into());
    // The forwarded port is another host:port to ssh: its key is recorded in a file of
    // this test's own.
    let known = tempfile::NamedTempFile::new().unwrap();
    config.insert("knownHosts".into(), known.path().to_str().unwrap().into());
    config.insert("acceptNewHostKey".into(), true.into());
    let target = driver.target_of(&config).unwrap();
    let sshd_port = server.config()["port"].as_u64().unwrap() as u16;
    // The host comes back (a listener forwarding to the sshd) while the check is retrying:
    // the check succeeds instead of failing on the first refusal.
    let (checked, forwarder) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(60), driver.check(&target)),
        async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
            // (held in an Option: the block yields the task handle, not its outcome)
            Some(forward_to(listener, sshd_port))
        }
    );
    checked.expect("bounded by the retry").unwrap();
    forwarder.unwrap().abort();
    driver.shutdown().await;

    // Nothing comes back within a 2 s retry: the refusal is the same text as without one.
    let driver = envrt_driver_ssh::SshDriver::new(Default::default()).unwrap();
    config.insert("connectRetrySeconds".into(), 2.into());
    let target = driver.target_of(&config).unwrap();
    let err = tokio::time::timeout(Duration::from_secs(60), driver.check(&target))
        .await
        .expect("bounded by the retry")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Cannot connect to SSH host {}@127.0.0.1:{port}: connect to host 127.0.0.1 port {port}: Connection refused.",
            server.user
        )
    );
    driver.shutdown().await;

    // A host that answers and hangs up before the handshake (sshd restarting) is tried
    // again within the retry, and only once without one: the attempts are counted.
    for (retry, more_than_once) in [(2, true), (0, false)] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = attempts.clone();
        let hangs_up = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
        let driver = envrt_driver_ssh::SshDriver::new(Default::default()).unwrap();
        config.insert("port".into(), port.into());
        config.insert("connectRetrySeconds".into(), retry.into());
        let target = driver.target_of(&config).unwrap();
        let err = tokio::time::timeout(Duration::from_secs(60), driver.check(&target))
            .await
            .expect("bounded by the retry")
            .unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "Cannot connect to SSH host {}@127.0.0.1:{port}: ",
                server.user
            )),
            "{err}"
        );
        let n = attempts.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(n > 1, more_than_once, "retry {retry}: {n} attempts");
        hangs_up.abort();
        driver.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_killed_mid_command_kills_the_command_and_the_next_call_reconnects() {
    let Some(server) = server() else { return };
    let (driver, rt, _root) = runtime(&server, "killed", |_| {}).await;
    let lease = acquire(&rt).await;
    let target = server.target();
    assert_eq!(driver.connections_opened(&target), 1);
    let control = driver.control_socket(&target).await.expect("a live master");
    let marker = format!("envrt-ssh-killed-{}", common::uuid_like());
    let script = format!("sh -c 'while :; do sleep 1; done' {marker}");
    let call = {
        let rt_lease = lease.id.clone();
        let rt = &rt;
        async move {
            let mut request = ExecuteRequest::new("sh", ["-c".to_string(), script]);
            request.timeout = Some(Duration::from_secs(120));
            rt.execute(&rt_lease, request).await
        }
    };
    let killer = async {
        // Once the command runs, kill the master ssh process (the connection).
        for _ in 0..100 {
            if !common::processes_with(&marker).is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!common::processes_with(&marker).is_empty(), "the command started");
        let masters = common::processes_with(&control.to_string_lossy());
        assert!(!masters.is_empty(), "the master process is found by its control path");
        for pid in masters {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    };
    let (result, ()) = tokio::join!(call, killer);
    let err = result.unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "SSH host {}: the connection broke during the command",
            target.shown()
        )),
        "{err}"
    );
    assert_eq!(
        survivors(&marker).await,
        Vec::<u32>::new(),
        "the command died on the remote side"
    );
    let r = rt
        .execute(&lease.id, ExecuteRequest::new("echo", ["again"]))
        .await
        .unwrap();
    assert_eq!(r.stdout, b"again\n");
    assert_eq!(driver.connections_opened(&target), 2, "the next call reconnected");
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_executes_share_one_connection() {
    let Some(server) = server() else { return };
    let (driver, rt, _root) = runtime(&server, "hundred", |c| c.max_channels = 100).await;
    let lease = acquire(&rt).await;
    let runs = (0..100).map(|i| {
        let rt = &rt;
        let id = lease.id.clone();
        async move {
            let r = rt
                .execute(&id, ExecuteRequest::new("printf", [format!("run-{i}")]))
                .await
                .unwrap();
            assert_eq!(String::from_utf8(r.stdout).unwrap(), format!("run-{i}"));
            assert_eq!(r.exit_code, Some(0));
        }
    });
    futures::future::join_all(runs).await;
    assert_eq!(driver.connections_opened(&server.target()), 1);
    rt.release_lease(&lease.id, LeaseStatus::Released).await.unwrap();
    driver.shutdown().await;
}
