//! `http.fetch`: one outbound HTTP/1.1 request made by the host for the worker. Denied
//! unless the host is on the plugin's allowlist (`host` or `host:port`); `http://`, or
//! `https://` over rustls with full verification against the system's CA bundle and the
//! plugin's `http_roots` ([`super::tls`]); request and response bodies bounded; the whole
//! exchange, connect to last byte, under one timeout.

use std::collections::BTreeMap;

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::{WorkerCalls, invalid, refuse};
use crate::protocol::{ErrorObject, codes};

const METHOD: &str = "http.fetch";
/// The most response header bytes read.
const MAX_HEAD_BYTES: usize = 64 * 1024;

struct Target {
    host: String,
    port: u16,
    path: String,
    tls: bool,
}

fn parse_url(url: &str) -> Result<Target, ErrorObject> {
    let (rest, tls) = if let Some(rest) = url.strip_prefix("http://") {
        (rest, false)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest, true)
    } else {
        return Err(invalid(METHOD, "url must start with http:// or https://"));
    };
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let path = path.split('#').next().unwrap_or("/");
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    if authority.contains('@') {
        return Err(invalid(METHOD, "url must not carry user information"));
    }
    if authority.contains(['[', ']']) {
        return Err(invalid(METHOD, "url must name a host, not an IPv6 literal"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (
            host,
            port.parse::<u16>()
                .map_err(|_| invalid(METHOD, "url has an invalid port"))?,
        ),
        None => (authority, if tls { 443 } else { 80 }),
    };
    if host.is_empty() || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(invalid(METHOD, "url is not a valid http:// or https:// URL"));
    }
    Ok(Target {
        host: host.to_ascii_lowercase(),
        port,
        path,
        tls,
    })
}

fn allowed(calls: &WorkerCalls, target: &Target) -> bool {
    let with_port = format!("{}:{}", target.host, target.port);
    calls
        .options
        .http_allow
        .iter()
        .any(|entry| entry.eq_ignore_ascii_case(&target.host) || entry.eq_ignore_ascii_case(&with_port))
}

fn token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(super) async fn fetch(calls: &WorkerCalls, params: &Value) -> Result<Value, ErrorObject> {
    let url = params
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(METHOD, "url must be a string"))?;
    let target = parse_url(url)?;
    if !allowed(calls, &target) {
        return Err(refuse(
            codes::CAPABILITY_DENIED,
            format!(
                "\"{METHOD}\" to {}:{} refused: the host is not on the allowlist of plugin '{}'",
                target.host, target.port, calls.plugin_id
            ),
        ));
    }
    let init = params.get("init").cloned().unwrap_or(Value::Null);
    let method = init
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_ascii_uppercase();
    if !token(&method) {
        return Err(invalid(METHOD, "init.method is not a valid HTTP method"));
    }
    let body = match init.get("body") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(invalid(METHOD, "init.body must be a string")),
    };
    let limits = &calls.options.limits;
    if body.len() > limits.max_http_request_bytes {
        return Err(invalid(
            METHOD,
            &format!(
                "the request body is {} bytes, over the limit of {} bytes",
                body.len(),
                limits.max_http_request_bytes
            ),
        ));
    }
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}:{}\r\n",
        target.path, target.host, target.port
    );
    let mut has_length = false;
    if let Some(headers) = init.get("headers").and_then(Value::as_object) {
        for (name, value) in headers {
            let value = value
                .as_str()
                .ok_or_else(|| invalid(METHOD, "init.headers values must be strings"))?;
            if !token(name) || value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(invalid(METHOD, "init.headers holds an invalid header"));
            }
            let lower = name.to_ascii_lowercase();
            if matches!(lower.as_str(), "host" | "connection" | "transfer-encoding") {
                continue;
            }
            has_length |= lower == "content-length";
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    if !has_length && (!body.is_empty() || !matches!(method.as_str(), "GET" | "HEAD")) {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    let max = limits.max_http_response_bytes;
    let tls = if target.tls {
        let config = calls
            .tls
            .get_or_init(|| super::tls::client_config(&calls.options.http_roots))
            .clone()
            .map_err(|why| {
                refuse(
                    codes::INTERNAL_ERROR,
                    format!("\"{METHOD}\": https:// is not available: {why}"),
                )
            })?;
        Some(config)
    } else {
        None
    };
    let exchange = async {
        let stream = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| {
                refuse(
                    codes::INTERNAL_ERROR,
                    format!("\"{METHOD}\" to {}:{} failed: {}", target.host, target.port, e.kind()),
                )
            })?;
        let raw = match tls {
            None => exchange(stream, &target, &head, &body, max).await?,
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(target.host.clone())
                    .map_err(|_| invalid(METHOD, "url names a host TLS cannot verify"))?;
                let stream = tokio_rustls::TlsConnector::from(config)
                    .connect(name, stream)
                    .await
                    .map_err(|e| {
                        refuse(
                            codes::INTERNAL_ERROR,
                            format!("\"{METHOD}\" to {}:{} failed: TLS: {e}", target.host, target.port),
                        )
                    })?;
                exchange(stream, &target, &head, &body, max).await?
            }
        };
        parse_response(&raw, max, method == "HEAD")
    };
    match tokio::time::timeout(limits.http_timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(refuse(
            codes::TIMEOUT,
            format!(
                "\"{METHOD}\" to {}:{} timed out after {} ms",
                target.host,
                target.port,
                limits.http_timeout.as_millis()
            ),
        )),
    }
}

/// Writes the request and reads the answer (at most its head and `max` body bytes, and
/// one more to see a body over the limit).
async fn exchange<S>(mut stream: S, target: &Target, head: &str, body: &str, max: usize) -> Result<Vec<u8>, ErrorObject>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| io_failed(target, e))?;
    stream
        .write_all(body.as_bytes())
        .await
        .map_err(|e| io_failed(target, e))?;
    stream.flush().await.map_err(|e| io_failed(target, e))?;
    let mut raw = Vec::new();
    let cap = (MAX_HEAD_BYTES + max + 1) as u64;
    match (&mut stream).take(cap).read_to_end(&mut raw).await {
        Ok(_) => {}
        // A TLS server that closes without close_notify: what arrived is judged by its
        // framing (a Content-Length or chunked body shorter than it says is refused).
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(io_failed(target, e)),
    }
    Ok(raw)
}

fn io_failed(target: &Target, error: std::io::Error) -> ErrorObject {
    refuse(
        codes::INTERNAL_ERROR,
        format!(
            "\"{METHOD}\" to {}:{} failed: {}",
            target.host,
            target.port,
            error.kind()
        ),
    )
}

fn bad_response(why: &str) -> ErrorObject {
    refuse(codes::INTERNAL_ERROR, format!("\"{METHOD}\": the server sent {why}"))
}

fn over(max: usize) -> ErrorObject {
    refuse(
        codes::INVALID_PARAMS,
        format!("\"{METHOD}\": the response body is over the limit of {max} bytes"),
    )
}

fn parse_response(raw: &[u8], max: usize, head_only: bool) -> Result<Value, ErrorObject> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| {
        if raw.len() > MAX_HEAD_BYTES {
            bad_response("response headers over 64 KiB")
        } else {
            bad_response("an incomplete response")
        }
    })?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| bad_response("response headers that are not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, status, reason) = (parts.next(), parts.next(), parts.next().unwrap_or_default());
    let status: u16 = match (version, status) {
        (Some(v), Some(s)) if v.starts_with("HTTP/1.") => {
            s.parse().map_err(|_| bad_response("an invalid status line"))?
        }
        _ => return Err(bad_response("an invalid status line")),
    };
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(bad_response("an invalid header line"));
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        headers
            .entry(name)
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(value);
            })
            .or_insert_with(|| value.to_owned());
    }
    let rest = &raw[end + 4..];
    let body = if head_only || status == 204 || status == 304 {
        Vec::new()
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest, max)?
    } else if let Some(length) = headers.get("content-length") {
        let length: usize = length.parse().map_err(|_| bad_response("an invalid Content-Length"))?;
        if length > max {
            return Err(over(max));
        }
        if rest.len() < length {
            return Err(bad_response("a body shorter than its Content-Length"));
        }
        rest[..length].to_vec()
    } else {
        if rest.len() > max {
            return Err(over(max));
        }
        rest.to_vec()
    };
    headers.remove("transfer-encoding");
    Ok(serde_json::json!({
        "status": status,
        "statusText": reason,
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    }))
}

fn dechunk(mut rest: &[u8], max: usize) -> Result<Vec<u8>, ErrorObject> {
    let mut body = Vec::new();
    loop {
        let at = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad_response("an incomplete chunked body"))?;
        let size_text = std::str::from_utf8(&rest[..at]).map_err(|_| bad_response("an invalid chunk size"))?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| bad_response("an invalid chunk size"))?;
        rest = &rest[at + 2..];
        if size == 0 {
            return Ok(body);
        }
        if body.len() + size > max {
            return Err(over(max));
        }
        if rest.len() < size + 2 {
            return Err(bad_response("an incomplete chunked body"));
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse_url("http://Example.com:8080/a/b?c=1#frag").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("example.com", 8080, "/a/b?c=1")
        );
        let t = parse_url("http://h?q").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("h", 80, "/?q"));
        let e = |u: &str| parse_url(u).err().unwrap().message;
        let t = parse_url("https://H/x").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.tls), ("h", 443, true));
        assert_eq!(e("ftp://h/"), "\"http.fetch\": url must start with http:// or https://");
        assert_eq!(
            e("http://u:p@h/"),
            "\"http.fetch\": url must not carry user information"
        );
        assert_eq!(e("http://h:99999/"), "\"http.fetch\": url has an invalid port");
        assert_eq!(
            e("http:///x"),
            "\"http.fetch\": url is not a valid http:// or https:// URL"
        );
    }

    #[test]
    fn responses() {
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\nx-a: 2\r\n\r\nhi",
            10,
            false,
        )
        .unwrap();
        assert_eq!(r["status"], 200);
        assert_eq!(r["statusText"], "OK");
        assert_eq!(r["headers"]["x-a"], "1, 2");
        assert_eq!(r["body"], "hi");
        let r = parse_response(
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n",
            10,
            false,
        )
        .unwrap();
        assert_eq!(r["body"], "abc");
        assert!(r["headers"].get("transfer-encoding").is_none());
        let e = parse_response(b"HTTP/1.0 200 OK\r\n\r\n0123456789X", 10, false).unwrap_err();
        assert_eq!(
            e.message,
            "\"http.fetch\": the response body is over the limit of 10 bytes"
        );
        let e = parse_response(b"junk\r\n\r\n", 10, false).unwrap_err();
        assert_eq!(e.message, "\"http.fetch\": the server sent an invalid status line");
    }
}
