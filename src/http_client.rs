//! A small blocking HTTP/1.1 client over `std::net::TcpStream`, for plain
//! `http://` URLs only (TLS belongs to a sidecar): the OTLP span exporter's
//! transport and the CLI's operator commands.

use opentelemetry_http::{Bytes, HttpError, Request, Response};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A blocking HTTP/1.1 client for plain `http://` URLs: one connection per
/// request (`Connection: close`), bounded by a timeout on connect, each
/// write and each read. It needs no async runtime: the OTLP exporter calls
/// it from the batch span processor's own thread, the CLI's operator
/// commands from `main`.
#[derive(Debug)]
pub struct PlainHttpClient {
    timeout: Duration,
    /// Largest response body kept; the rest is not read.
    body_limit: usize,
}

impl PlainHttpClient {
    pub fn new(timeout: Duration, body_limit: usize) -> Self {
        PlainHttpClient {
            timeout,
            body_limit,
        }
    }

    /// Send `request` and return the response (any status).
    pub fn send_blocking(&self, request: &Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let uri = request.uri();
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(
                    format!("{uri}: scheme {other} is not supported (plain http only)").into(),
                )
            }
            None => return Err(format!("{uri}: no scheme").into()),
        }
        let host = uri.host().ok_or_else(|| format!("{uri}: no host"))?;
        let port = uri.port_u16().unwrap_or(80);
        // `[::1]` in a URI is `::1` to the resolver.
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs = (bare_host, port)
            .to_socket_addrs()
            .map_err(|e| format!("{uri}: resolving {host}: {e}"))?;
        let mut last_err = None;
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_err = Some(format!("{uri}: connecting to {addr}: {e}")),
            }
        }
        let mut stream = stream
            .ok_or_else(|| last_err.unwrap_or_else(|| format!("{uri}: {host} has no address")))?;
        stream.set_write_timeout(Some(self.timeout))?;
        stream.set_read_timeout(Some(self.timeout))?;
        let _ = stream.set_nodelay(true);

        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = uri.authority().map_or(host, |a| a.as_str());
        let body = request.body();
        let mut head = format!(
            "{} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {}\r\nConnection: close\r\n",
            request.method(),
            body.len()
        )
        .into_bytes();
        for (name, value) in request.headers() {
            if matches!(name.as_str(), "host" | "content-length" | "connection") {
                continue;
            }
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        stream
            .write_all(&head)
            .and_then(|()| stream.write_all(body))
            .and_then(|()| stream.flush())
            .map_err(|e| format!("{uri}: sending the request: {e}"))?;

        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .map_err(|e| format!("{uri}: reading the response: {e}"))?;
        let status = parse_status_line(&line)
            .ok_or_else(|| format!("{uri}: malformed status line {:?}", line.trim_end()))?;
        let mut content_length = None;
        let mut chunked = false;
        loop {
            line.clear();
            let n = reader
                .read_line(&mut line)
                .map_err(|e| format!("{uri}: reading response headers: {e}"))?;
            if n == 0 || line == "\r\n" || line == "\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let name = name.trim();
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    content_length = value.parse::<usize>().ok();
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.to_ascii_lowercase().contains("chunked");
                }
            }
        }
        // Chunked bodies are not read: neither the collectors nor this
        // host's own routes send them.
        let mut body = Vec::new();
        if !chunked {
            let limit = content_length
                .unwrap_or(self.body_limit)
                .min(self.body_limit);
            let _ = reader.take(limit as u64).read_to_end(&mut body);
        }
        Ok(Response::builder().status(status).body(Bytes::from(body))?)
    }
}

fn parse_status_line(line: &str) -> Option<u16> {
    let mut parts = line.split_ascii_whitespace();
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_collector_is_a_clear_error() {
        // Bind then drop: nothing listens on this port any more.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let request = Request::post(format!("http://127.0.0.1:{port}/v1/traces"))
            .body(Bytes::from_static(b"x"))
            .unwrap();
        let err = PlainHttpClient::new(Duration::from_secs(2), 1024)
            .send_blocking(&request)
            .unwrap_err()
            .to_string();
        assert!(err.contains("connecting to 127.0.0.1:"), "{err}");
        let https = Request::post("https://127.0.0.1/v1/traces")
            .body(Bytes::new())
            .unwrap();
        let err = PlainHttpClient::new(Duration::from_secs(2), 1024)
            .send_blocking(&https)
            .unwrap_err()
            .to_string();
        assert!(err.contains("plain http only"), "{err}");
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line("HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(parse_status_line("HTTP/1.0 503\r\n"), Some(503));
        assert_eq!(parse_status_line("SSH-2.0\r\n"), None);
    }
}
