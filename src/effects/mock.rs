//! The reference test runner's fetch mocks (`export const fetchMocks = [...]`
//! in a `*.test.tsx`): requests whose URL contains an entry's `urlIncludes`
//! are answered by that entry, after `delayMs` of real time, and never reach
//! the network. The first matching entry wins; a request no entry matches
//! goes through the broker's HTTP client and its policy as any other.

use super::Outcome;
use base64::Engine as _;
use serde_json::Value;
use std::time::Duration;

/// One entry: what it matches and what it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mock {
    pub url_includes: String,
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    pub delay: Duration,
}

/// The entries of one test file, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mocks(pub Vec<Mock>);

impl Mocks {
    /// From the exported value: entries with `urlIncludes` (a string),
    /// `status` (200), `contentType` (`application/json`), `body` (a string,
    /// or JSON otherwise), `base64Body` (wins over `body`), `delayMs` (0).
    pub fn from_json(v: &Value) -> Result<Mocks, String> {
        let Some(entries) = v.as_array() else {
            return Err("fetchMocks is not an array".to_string());
        };
        let mut out = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let url_includes = e
                .get("urlIncludes")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("fetchMocks[{i}] has no urlIncludes string"))?
                .to_string();
            let body = match (e.get("base64Body").and_then(Value::as_str), e.get("body")) {
                (Some(b64), _) => base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|err| format!("fetchMocks[{i}].base64Body: {err}"))?,
                (None, Some(Value::String(s))) => s.as_bytes().to_vec(),
                (None, None | Some(Value::Null)) => Vec::new(),
                (None, Some(other)) => other.to_string().into_bytes(),
            };
            out.push(Mock {
                url_includes,
                status: e
                    .get("status")
                    .and_then(Value::as_u64)
                    .map_or(200, |s| s as u16),
                content_type: e
                    .get("contentType")
                    .and_then(Value::as_str)
                    .unwrap_or("application/json")
                    .to_string(),
                body,
                delay: Duration::from_millis(e.get("delayMs").and_then(Value::as_u64).unwrap_or(0)),
            });
        }
        Ok(Mocks(out))
    }

    /// The entry that answers `url`, if any.
    pub fn find(&self, url: &str) -> Option<&Mock> {
        self.0.iter().find(|m| url.contains(&m.url_includes))
    }
}

impl Mock {
    pub fn outcome(&self) -> Outcome {
        Outcome::Response {
            status: self.status,
            media_type: self
                .content_type
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase(),
            body: self.body.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_entry_whose_text_the_url_contains_answers() {
        let m = Mocks::from_json(&json!([
            {"urlIncludes": "/api/example", "body": "{\"answer\":42}"},
            {"urlIncludes": "/api", "status": 500, "contentType": "text/plain; charset=utf-8", "base64Body": "aGk=", "delayMs": 5},
        ]))
        .unwrap();
        let a = m.find("https://example.test/api/example?x").unwrap();
        assert_eq!(
            a.outcome(),
            Outcome::Response {
                status: 200,
                media_type: "application/json".into(),
                body: b"{\"answer\":42}".to_vec()
            }
        );
        let b = m.find("https://example.test/api/other").unwrap();
        assert_eq!(
            (b.status, b.body.as_slice(), b.delay),
            (500, &b"hi"[..], Duration::from_millis(5))
        );
        assert_eq!(
            b.outcome(),
            Outcome::Response {
                status: 500,
                media_type: "text/plain".into(),
                body: b"hi".to_vec()
            }
        );
        assert!(m.find("https://example.test/elsewhere").is_none());
        assert!(Mocks::from_json(&json!([{"body": "x"}])).is_err());
    }
}
