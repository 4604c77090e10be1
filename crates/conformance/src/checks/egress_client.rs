//! The client the bypass checks run inside a lease: a few lines of `python3` (its `socket`
//! and `ssl` modules) that speak to the lease's proxy (`http_proxy`) byte by byte, so a
//! check decides exactly what goes on the wire: a `CONNECT` target and a TLS server name
//! that differ, a `Host` header that names another host than the request's address, a
//! redirect followed as a client would, a tunnel held open across a policy update. TLS is
//! not verified by this client: what the checks look at is where the bytes go (the test
//! host's logs) and what the proxy answers, not whom the client trusts. Where the lease
//! has no `python3`, the checks report "not checked".

use serde_json::Value;

/// The program: `python3 -c CLIENT OPS`, where OPS is a JSON array of operations, each an
/// array `[name, args...]`; prints `@open` when a `hold` has its tunnel open, and
/// `@result JSON` (one result object per operation) at the end.
/// - `["plain", url, host]`: `GET url` through the proxy with `Host: host`;
///   `{"response": text}`.
/// - `["tls", target, sni, path, host?, auth?]`: `CONNECT target`, TLS naming `sni`,
///   `GET path` with `Host: host` (else `sni`) and `Authorization: auth`;
///   `{"connect": status, "refusal": text}`, `{"tls": error}` or `{"response": text}`.
/// - `["follow", kind, args...]`: `plain` or `tls` as above, then, when the answer is a
///   redirect, the request a client makes for its `Location` (`http://` plain, `https://`
///   over a tunnel); `{"first": result, "location": url, "then": result}`.
/// - `["hold", target, sni, path]`: a tunnel and one request answered on it, then
///   `@open` and a wait (30 s at most) for the tunnel to end; `{"first": status, "held":
///   "cut" | "kept" | "data"}`.
const CLIENT: &str = r#"
import json, os, socket, ssl, sys
P = (os.environ.get("http_proxy") or os.environ.get("HTTP_PROXY") or "").split("://", 1)[-1].rstrip("/")
PH, _, PP = P.rpartition(":")
def proxy():
    s = socket.create_connection((PH.strip("[]"), int(PP)), 10)
    s.settimeout(15)
    return s
def head(s):
    b = b""
    while b"\r\n\r\n" not in b and len(b) < 65536:
        c = s.recv(1)
        if not c:
            break
        b += c
    return b
def status(b):
    p = b.split(b" ", 2)
    return p[1].decode("latin-1") if len(p) > 1 else "none"
def rest(s):
    d = b""
    try:
        while len(d) < 1048576:
            c = s.recv(65536)
            if not c:
                break
            d += c
    except (OSError, ssl.SSLError) as e:
        d += ("<" + type(e).__name__ + ">").encode()
    return d.decode("latin-1")
def body(s, h):
    n = 0
    for line in h.decode("latin-1").split("\r\n"):
        if line.lower().startswith("content-length:"):
            n = min(int(line.split(":")[1]), 65536)
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            break
        b += c
    return b
def tunnel(target, sni):
    s = proxy()
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    h = head(s)
    if status(h) != "200":
        return None, {"connect": status(h), "refusal": body(s, h).decode("latin-1")}
    c = ssl.create_default_context()
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    try:
        return c.wrap_socket(s, server_hostname=sni), None
    except (OSError, ssl.SSLError) as e:
        return None, {"tls": type(e).__name__}
def tls(target, sni, path, host=None, auth=None):
    t, err = tunnel(target, sni)
    if err:
        return err
    extra = ("Authorization: %s\r\n" % auth) if auth else ""
    try:
        t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n" % (path, host or sni, extra)).encode())
    except (OSError, ssl.SSLError) as e:
        return {"tls": type(e).__name__}
    return {"response": rest(t)}
def plain(url, host):
    s = proxy()
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (url, host)).encode())
    return {"response": rest(s)}
def location(r):
    if not r.startswith("HTTP/1.1 30") and not r.startswith("HTTP/1.0 30"):
        return None
    for line in r.split("\r\n\r\n", 1)[0].split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "location":
            return v.strip()
    return None
def follow(kind, *a):
    first = tls(*a) if kind == "tls" else plain(*a)
    loc = location(first.get("response", ""))
    out = {"first": first, "location": loc}
    if loc and loc.startswith("http://"):
        out["then"] = plain(loc, loc[7:].split("/", 1)[0])
    elif loc and loc.startswith("https://"):
        h, _, p = loc[8:].partition("/")
        out["then"] = tls(h if ":" in h else h + ":443", h.split(":")[0], "/" + p)
    return out
def hold(target, sni, path):
    t, err = tunnel(target, sni)
    if err:
        return err
    t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, sni)).encode())
    h = head(t)
    body(t, h)
    print("@open", flush=True)
    t.settimeout(30)
    try:
        how = "data" if t.recv(1) else "cut"
    except socket.timeout:
        how = "kept"
    except (OSError, ssl.SSLError):
        how = "cut"
    return {"first": status(h), "held": how}
out = []
for op in json.loads(sys.argv[1]):
    try:
        out.append({"plain": plain, "tls": tls, "follow": follow, "hold": hold}[op[0]](*op[1:]))
    except Exception as e:
        out.append({"error": type(e).__name__ + ": " + str(e)})
print("@result " + json.dumps(out), flush=True)
"#;

/// What the script prints when the lease has no `python3`.
pub(super) const NO_PYTHON: &str = "no-python3";

/// The shell command running `ops` with [`CLIENT`], or printing [`NO_PYTHON`].
pub(super) fn script(ops: &Value) -> String {
    debug_assert!(!CLIENT.contains('\''));
    let ops = ops.to_string();
    debug_assert!(!ops.contains('\''));
    format!("if command -v python3 >/dev/null; then python3 -c '{CLIENT}' '{ops}'; else echo {NO_PYTHON}; fi")
}

/// The results the client printed, one per operation, or why there are none.
pub(super) fn results(stdout: &str, count: usize) -> Result<Vec<Value>, String> {
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("@result "))
        .ok_or_else(|| format!("the client in the lease printed no result: {:?}", tail(stdout)))?;
    let results: Vec<Value> =
        serde_json::from_str(line).map_err(|e| format!("the client's result does not parse: {e}"))?;
    if results.len() != count {
        return Err(format!("the client answered {} of {count} operations", results.len()));
    }
    Ok(results)
}

/// The end of `text`, for a failure message.
fn tail(text: &str) -> &str {
    let start = text.len().saturating_sub(400);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}

/// The status of an HTTP response text (`HTTP/1.1 302 Found...` gives `302`).
pub(super) fn status(response: &str) -> Option<u16> {
    response.split(' ').nth(1)?.parse().ok()
}

/// One result, described for a failure message (at most 200 characters).
pub(super) fn describe(result: &Value) -> String {
    let text = result.to_string();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}

/// The requests the test host's HTTPS server received, parsed (host, path, authorization).
pub(super) fn seen(lines: &[String]) -> Vec<(String, String, Option<String>)> {
    lines
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|v| {
            let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
            (
                text("host").unwrap_or_default(),
                text("path").unwrap_or_default(),
                text("authorization"),
            )
        })
        .collect()
}
