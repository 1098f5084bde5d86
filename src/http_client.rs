//! The host's client for its own outgoing requests (the CLI's operator
//! commands against a server, the OTLP span exporter): reqwest's blocking
//! client over rustls, the crate the effect broker uses, so `http://` and
//! `https://` both work and a chunked response is read whole.
//!
//! Blocking, because neither caller runs in an async runtime: the operator
//! commands run on `main`, the exporter on the batch span processor's own
//! thread. No proxy is taken from the environment: an operator command
//! means the server it names.

use opentelemetry_http::{Bytes, HttpError, Request, Response};
use std::io::Read;
use std::time::Duration;

/// A blocking HTTP client with a timeout on connect and on the whole
/// exchange, and a cap on the response body.
#[derive(Debug)]
pub struct BlockingHttp {
    client: reqwest::blocking::Client,
    /// Largest response body accepted; a larger one is an error.
    body_limit: usize,
}

impl BlockingHttp {
    pub fn new(timeout: Duration, body_limit: usize) -> Result<Self, HttpError> {
        let client = reqwest::blocking::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .no_proxy()
            .build()?;
        Ok(BlockingHttp { client, body_limit })
    }

    /// Send `request` and return the response (any status).
    pub fn send_blocking(&self, request: &Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let uri = request.uri().to_string();
        let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes())?;
        let mut out = self
            .client
            .request(method, &uri)
            .body(request.body().to_vec());
        for (name, value) in request.headers() {
            out = out.header(name.as_str(), value.as_bytes());
        }
        let response = out.send().map_err(|e| describe(&uri, &e))?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        response
            .take(self.body_limit as u64 + 1)
            .read_to_end(&mut body)
            .map_err(|e| format!("{uri}: reading the response: {e}"))?;
        if body.len() > self.body_limit {
            return Err(format!(
                "{uri}: the response is larger than {} bytes",
                self.body_limit
            )
            .into());
        }
        Ok(Response::builder().status(status).body(Bytes::from(body))?)
    }
}

/// A request error with its causes (reqwest's own message omits them:
/// "error sending request" says nothing of a refused connection).
fn describe(uri: &str, e: &reqwest::Error) -> HttpError {
    let mut text = format!("{uri}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A one-shot server answering every connection with `answer`.
    fn answering(answer: &'static [u8]) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(4) {
                let mut stream = stream.unwrap();
                let mut buf = [0u8; 4096];
                let _ = std::io::Read::read(&mut stream, &mut buf);
                stream.write_all(answer).unwrap();
            }
        });
        port
    }

    fn get(port: u16, limit: usize) -> Result<Response<Bytes>, HttpError> {
        let request = Request::get(format!("http://127.0.0.1:{port}/x"))
            .body(Bytes::new())
            .unwrap();
        BlockingHttp::new(Duration::from_secs(5), limit)
            .unwrap()
            .send_blocking(&request)
    }

    #[test]
    fn a_chunked_response_is_read_whole() {
        let port = answering(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
              5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        );
        let r = get(port, 1024).unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.body().as_ref(), b"hello world");
    }

    #[test]
    fn a_body_over_the_cap_is_an_error_not_a_truncation() {
        let port = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world");
        let err = get(port, 5).unwrap_err().to_string();
        assert!(err.contains("larger than 5 bytes"), "{err}");
    }

    #[test]
    fn an_unreachable_server_is_a_clear_error() {
        // Bind then drop: nothing listens on this port any more.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = get(port, 1024).unwrap_err().to_string();
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
        assert!(err.to_lowercase().contains("refused"), "{err}");
    }

    #[test]
    fn https_speaks_tls() {
        // A plain-http server answering a TLS client: the handshake fails,
        // as a TLS error (not "scheme not supported").
        let port = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        let request = Request::get(format!("https://127.0.0.1:{port}/x"))
            .body(Bytes::new())
            .unwrap();
        let err = BlockingHttp::new(Duration::from_secs(5), 1024)
            .unwrap()
            .send_blocking(&request)
            .unwrap_err()
            .to_string()
            .to_lowercase();
        assert!(!err.contains("not supported"), "{err}");
        assert!(
            err.contains("tls") || err.contains("corrupt message") || err.contains("record"),
            "{err}"
        );
    }
}
