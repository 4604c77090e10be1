//! An HTTPS server on a [`TestHost`]: a test CA and a leaf for the names asked (made with
//! the `openssl` command), served by a few lines of `python3` (its `ssl` and `http.server`
//! modules) on port 443 inside the host's namespace, which writes down every request's
//! host, path and `Authorization` header. For the credential-brokering tests: what the
//! test host received is what counts. Standard library only, as the crate is.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::network::TestHost;

/// The server: one JSON line per request in `https.log`; `/redirect` answers 302 to
/// `https://other.test/` and `/redirect/REST` to `https://other.test/REST` (a check running
/// beside others on the same host tells its own redirected request apart), anything else
/// `hello https from HOST`.
const HTTPS_SERVER: &str = r#"
import http.server, json, ssl, sys
addr, folder, cert, key = sys.argv[1:5]
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        with open(folder + "/https.log", "a") as log:
            log.write(json.dumps({"host": self.headers.get("Host"), "path": self.path,
                                  "authorization": self.headers.get("Authorization")}) + "\n")
        body = ("hello https from " + str(self.headers.get("Host"))).encode()
        redirect = self.path == "/redirect" or self.path.startswith("/redirect/")
        self.send_response(302 if redirect else 200)
        if redirect:
            self.send_header("Location", "https://other.test/" + self.path[len("/redirect/"):])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer((addr, 443), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
"#;

fn openssl(args: &[&str], dir: &Path) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("openssl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One request as the HTTPS server saw it: the JSON line it wrote.
pub type Seen = String;

impl TestHost {
    /// Starts the HTTPS server on port 443 with a leaf for `names`, signed by a test CA made
    /// for it; returns the CA certificate's path (PEM), for the client or proxy to trust.
    pub fn serve_https(&mut self, names: &[&str]) -> Result<PathBuf, String> {
        let dir = self.folder.join("tls");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let sans: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
        std::fs::write(
            dir.join("leaf.ext"),
            format!(
                "subjectAltName={}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
                sans.join(",")
            ),
        )
        .map_err(|e| e.to_string())?;
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=envrt test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ]);
        openssl(&ca, &dir)?;
        let mut csr = vec!["req"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=envrt test host",
        ]);
        openssl(&csr, &dir)?;
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "leaf.pem",
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
            ],
            &dir,
        )?;
        std::fs::write(self.folder.join("https.log"), "").map_err(|e| e.to_string())?;
        let mut server = Command::new("ip")
            .args(["netns", "exec", &self.ns, "python3", "-c", HTTPS_SERVER, &self.address])
            .arg(&self.folder)
            .arg(dir.join("leaf.pem"))
            .arg(dir.join("leaf.key"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("python3: {e}"))?;
        let mut ready = [0u8; 5];
        let started = std::io::Read::read_exact(server.stdout.as_mut().expect("piped"), &mut ready);
        self.servers.push(server);
        started.map_err(|e| format!("the HTTPS server did not start: {e}"))?;
        Ok(dir.join("ca.pem"))
    }

    /// Every request the HTTPS server received, in order (one JSON object each).
    pub fn https_requests(&self) -> Vec<Seen> {
        std::fs::read_to_string(self.folder.join("https.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}
