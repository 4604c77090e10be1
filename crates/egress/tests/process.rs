//! The `envrt-egress` process, as a driver runs it for one lease: started in the client
//! namespace (its only route is the veth to the test hosts), reached through its two unix
//! sockets, its policy file reloaded on SIGHUP (a bad file keeps the policy in force), and
//! ended by SIGTERM. Needs root for `ip netns`; fails instead of skipping with
//! `ENVRT_REQUIRE_NETWORK=1`.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use support::servers;
use support::{Net, SRV};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const BIN: &str = env!("CARGO_BIN_EXE_envrt-egress");

/// A GET of `http://{host}/` through the proxy's unix socket.
async fn get(proxy: &Path, host: &str) -> servers::Answer {
    let mut s = UnixStream::connect(proxy).await.unwrap();
    s.write_all(format!("GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    servers::read_answer(&mut s).await
}

/// One A query through the stub's unix socket (DNS-over-TCP framing).
async fn ask(stub: &Path, name: &str) -> Message {
    let query = servers::dns_query(name, RecordType::A);
    let mut s = UnixStream::connect(stub).await.unwrap();
    s.write_all(&(query.len() as u16).to_be_bytes()).await.unwrap();
    s.write_all(&query).await.unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await.unwrap();
    let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut answer).await.unwrap();
    Message::from_vec(&answer).unwrap()
}

fn write_policy(path: &Path, json: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, json).unwrap();
    std::fs::rename(&next, path).unwrap();
}

#[test]
fn the_egress_process_enforces_its_policy_file_on_unix_sockets_and_reloads_it_on_sighup() {
    let Some(net) = Net::new() else { return };
    net.run(|srv| async move {
        servers::http_server(srv.tcp(&format!("{SRV}:80")));
        let dns = servers::dns_server(srv.udp(&format!("{SRV}:53")), &[("web.test", SRV), ("other.test", SRV)]);
        let dir = tempfile::tempdir().unwrap();
        let (proxy, stub, policy) = (
            dir.path().join("egress.sock"),
            dir.path().join("dns.sock"),
            dir.path().join("policy.json"),
        );
        write_policy(&policy, r#"{"egress":"allow","allow":["web.test:80"]}"#);
        // Started from this thread, it runs in the client namespace too.
        let mut child = Command::new(BIN)
            .arg("--proxy-socket")
            .arg(&proxy)
            .arg("--dns-socket")
            .arg(&stub)
            .arg("--policy")
            .arg(&policy)
            .args(["--upstream", &format!("{SRV}:53")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim_end(),
            format!("envrt-egress listening on {}", proxy.display())
        );
        use std::os::unix::fs::PermissionsExt;
        for socket in [&proxy, &stub] {
            let mode = std::fs::metadata(socket).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o666, "{}", socket.display());
        }

        let a = get(&proxy, "web.test").await;
        assert_eq!((a.status, a.body.as_str()), (200, "hello from web.test"));
        let a = get(&proxy, "other.test").await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (
                403,
                "envrt egress: refused: host \"other.test\" is not in the allow list\n"
            )
        );
        let answer = ask(&stub, "web.test").await;
        let addresses: Vec<String> = answer
            .answers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::A(a) => Some(a.0.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(addresses, vec![SRV.to_owned()]);
        assert_eq!(ask(&stub, "other.test").await.response_code(), ResponseCode::Refused);
        // The unlisted name never left the machine's proxy.
        assert_eq!(dns.count("other.test"), 0, "{:?}", dns.names());

        // A new policy, then SIGHUP: once the proxy wrote back what it applied, the new
        // policy is in force for the very next request.
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let applied = dir.path().join("policy.json.applied");
        assert!(!applied.exists(), "nothing was reloaded yet");
        let none = r#"{"egress":"none"}"#;
        write_policy(&policy, none);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&applied).ok().as_deref() != Some(none) {
            assert!(
                Instant::now() < deadline,
                "the proxy never said it applied the new policy"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let a = get(&proxy, "web.test").await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (403, "envrt egress: refused: egress is \"none\"\n")
        );
        // A file that does not parse keeps the policy in force, and is not acknowledged.
        write_policy(&policy, r#"{"egress":"allow","allow":["py*.org"]}"#);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(std::fs::read_to_string(&applied).unwrap(), none);
        let a = get(&proxy, "web.test").await;
        assert_eq!(
            (a.status, a.body.as_str()),
            (403, "envrt egress: refused: egress is \"none\"\n")
        );

        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0));
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(
            stderr.starts_with(&format!(
                "envrt-egress: policy not reloaded: {}: allow: \"py*.org\": bad wildcard",
                policy.display()
            )),
            "{stderr:?}"
        );
    });
}

#[test]
fn bad_arguments_and_a_bad_policy_file_are_refused_with_their_texts() {
    let out = Command::new(BIN).args(["--upstream", "nowhere"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "envrt-egress: --upstream takes ADDRESS:PORT, not \"nowhere\"\n{}\n",
            envrt_egress::standalone::USAGE
        )
    );
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let out = Command::new(BIN)
        .arg("--proxy-socket")
        .arg(dir.path().join("p.sock"))
        .arg("--dns-socket")
        .arg(dir.path().join("d.sock"))
        .arg("--policy")
        .arg(&missing)
        .args(["--upstream", "192.0.2.1:53"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("envrt-egress: cannot open {}: ", missing.display())),
        "{stderr:?}"
    );
}
