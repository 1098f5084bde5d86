//! What stands in front of the console's pages (`spec/console.md`,
//! *Headers, Host and sign-in limit*): which `Host` headers name this
//! console, the headers every console response carries, and the sign-in
//! attempts allowed per peer address. Pure: the clock and the addresses
//! are arguments.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

/// Sent with every console response: the pages load their style sheet and
/// script from the console itself (no inline code), draw charts as inline
/// SVG styled by that sheet, and post forms only to the console; nothing
/// may frame them.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; \
script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The default of `serve --console-sign-ins-per-minute`.
pub const DEFAULT_SIGN_INS_PER_MINUTE: u32 = 10;

/// The `Host` headers that name this console: the listen address (and
/// `localhost` when it is a loopback or wildcard address; any IP literal
/// when it is a wildcard one, since the host's own addresses are not
/// enumerated), and each configured public origin. A name that resolves
/// to us only by someone's DNS (the rebinding shape) is refused.
#[derive(Debug, Clone)]
pub struct HostRule {
    listen: Option<SocketAddr>,
    /// (host name lowercased, port, the scheme's default port).
    public: Vec<(String, u16, u16)>,
}

impl HostRule {
    /// Any `Host` (for a router served without a known address: the
    /// benchmarks).
    pub fn any() -> HostRule {
        HostRule {
            listen: None,
            public: Vec::new(),
        }
    }

    /// The rule for a console listening on `listen` and reached also as
    /// each of `public_origins` (`http[s]://name[:port]`); `Err` names an
    /// origin that is not of that form.
    pub fn new(listen: SocketAddr, public_origins: &[String]) -> Result<HostRule, String> {
        let mut public = Vec::new();
        for o in public_origins {
            let bad = || format!("{o:?} is not an origin (http[s]://name[:port])");
            let (rest, default) = if let Some(r) = o.strip_prefix("https://") {
                (r, 443)
            } else if let Some(r) = o.strip_prefix("http://") {
                (r, 80)
            } else {
                return Err(bad());
            };
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            let (name, port) = split_authority(rest).ok_or_else(bad)?;
            if name.is_empty() || rest.contains(['/', '?', '#', '@']) {
                return Err(bad());
            }
            public.push((name, port.unwrap_or(default), default));
        }
        Ok(HostRule {
            listen: Some(listen),
            public,
        })
    }

    pub fn allows(&self, host: &str) -> bool {
        let Some(listen) = self.listen else {
            return true;
        };
        let Some((name, port)) = split_authority(host) else {
            return false;
        };
        let ip = name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .unwrap_or(&name)
            .parse::<IpAddr>()
            .ok();
        let on_listen_port = port.unwrap_or(80) == listen.port();
        let local_name = match ip {
            Some(ip) => ip == listen.ip() || listen.ip().is_unspecified(),
            None => {
                name == "localhost" && (listen.ip().is_loopback() || listen.ip().is_unspecified())
            }
        };
        if on_listen_port && local_name {
            return true;
        }
        self.public.iter().any(|(n, p, default)| {
            *n == name && (port == Some(*p) || (port.is_none() && p == default))
        })
    }
}

/// `name[:port]` (an IPv6 literal in brackets) as the lowercased name and
/// the port, if given.
fn split_authority(a: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = if a.starts_with('[') {
        let end = a.find(']')?;
        let (name, rest) = a.split_at(end + 1);
        match rest {
            "" => (name, None),
            r => (name, Some(r.strip_prefix(':')?)),
        }
    } else {
        match a.rsplit_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (a, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b))
    {
        return None;
    }
    Some((name.to_ascii_lowercase(), port))
}

/// Sign-in attempts per peer address: a bucket of `per_minute` attempts,
/// refilled at that rate, so guessing the token from one address is slow
/// and an operator who mistypes twice is not locked out.
pub struct SignInLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<Option<IpAddr>, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ms: u64,
}

/// Buckets kept at most; past it, full ones are forgotten.
const MAX_BUCKETS: usize = 4_096;

impl SignInLimiter {
    /// `per_minute` 0: no limit.
    pub fn new(per_minute: u32) -> SignInLimiter {
        SignInLimiter {
            per_minute,
            buckets: Mutex::default(),
        }
    }

    /// Takes one attempt for `peer` (`None`: unknown, one shared bucket);
    /// `Err` carries the milliseconds until the next one is allowed.
    pub fn attempt(&self, peer: Option<IpAddr>, now_ms: u64) -> Result<(), u64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let cap = f64::from(self.per_minute);
        let per_ms = cap / 60_000.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS {
            buckets.retain(|_, b| b.tokens + now_ms.saturating_sub(b.at_ms) as f64 * per_ms < cap);
        }
        let b = buckets.entry(peer).or_insert(Bucket {
            tokens: cap,
            at_ms: now_ms,
        });
        b.tokens = (b.tokens + now_ms.saturating_sub(b.at_ms) as f64 * per_ms).min(cap);
        b.at_ms = now_ms;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - b.tokens) / per_ms).ceil() as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(listen: &str, public: &[&str]) -> HostRule {
        let public: Vec<String> = public.iter().map(|s| s.to_string()).collect();
        HostRule::new(listen.parse().unwrap(), &public).unwrap()
    }

    #[test]
    fn the_host_must_name_the_listen_address_or_a_public_origin() {
        let r = rule("127.0.0.1:8080", &["https://console.example.com"]);
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "console.example.com",
            "console.example.com:443",
        ] {
            assert!(r.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "127.0.0.1:8081",
            "127.0.0.1",
            "10.0.0.1:8080",
            "console.example.com:8080",
            "",
            "127.0.0.1:8080/x",
            "a b:8080",
        ] {
            assert!(!r.allows(bad), "{bad}");
        }
        let wild = rule("0.0.0.0:80", &[]);
        assert!(wild.allows("192.168.1.5"));
        assert!(wild.allows("[::1]:80"));
        assert!(wild.allows("localhost"));
        assert!(!wild.allows("evil.example"));
        let v6 = rule("[::1]:9000", &["http://ops.internal:9000"]);
        assert!(v6.allows("[::1]:9000"));
        assert!(v6.allows("ops.internal:9000"));
        assert!(!v6.allows("ops.internal"));
        assert!(HostRule::any().allows("evil.example"));
    }

    #[test]
    fn public_origins_are_checked() {
        let listen: SocketAddr = "127.0.0.1:1".parse().unwrap();
        for bad in [
            "console.example.com",
            "ftp://x",
            "https://",
            "https://a/b",
            "https://u@a",
        ] {
            assert!(HostRule::new(listen, &[bad.to_string()]).is_err(), "{bad}");
        }
        assert!(HostRule::new(listen, &["https://a.example/".to_string()]).is_ok());
    }

    #[test]
    fn sign_ins_are_limited_per_address_and_refill() {
        let l = SignInLimiter::new(3);
        let a: Option<IpAddr> = Some("10.0.0.1".parse().unwrap());
        let b: Option<IpAddr> = Some("10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert!(l.attempt(a, 0).is_ok());
        }
        let wait = l.attempt(a, 0).unwrap_err();
        assert_eq!(wait, 20_000, "one attempt per 20 s at 3 a minute");
        assert!(l.attempt(b, 0).is_ok(), "another address has its own");
        assert!(l.attempt(a, 19_999).is_err());
        assert!(l.attempt(a, 20_000 + 19_999).is_ok());
        assert!(SignInLimiter::new(0).attempt(a, 0).is_ok());
    }
}
