//! The egress policy: which URLs pattern code may reach, decided without I/O.
//!
//! A **relative** URL names the host's own serving origin (`--public-origin`)
//! and is allowed. An **absolute** URL is external: only `http` and `https`,
//! and its destination must not be an address of this machine or its
//! network. The broker checks every hop twice: the URL's host before the
//! request (an address literal is checked here; a name is resolved by the
//! broker's resolver), and every address a name resolves to
//! ([`forbidden_address`]) before it connects, so a name that resolves to
//! `127.0.0.1` is refused as `http://127.0.0.1/` is. An operator allowlist
//! (`--egress-allow HOST[:PORT]`) is the only exception.
//!
//! Invariant: everything here is a plain function of its inputs; nothing
//! resolves names or opens sockets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// At most this many redirects are followed; one more is an error.
pub const MAX_REDIRECTS: usize = 5;

/// Why a request may not be sent: the `egressRefused` error's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An operator's exception: a host name or address, with or without a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    host: String,
    port: Option<u16>,
}

impl std::str::FromStr for AllowEntry {
    type Err = String;

    /// `HOST[:PORT]`, `[V6]:PORT` for an IPv6 address with a port.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad =
            || format!("{s:?} is not HOST[:PORT] (an IPv6 address with a port as [ADDR]:PORT)");
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p.parse().map_err(|_| bad())?),
                None if after.is_empty() => None,
                None => return Err(bad()),
            };
            (h.to_string(), port)
        } else if s.matches(':').count() == 1 {
            let (h, p) = s.split_once(':').ok_or_else(bad)?;
            (h.to_string(), Some(p.parse().map_err(|_| bad())?))
        } else {
            (s.to_string(), None)
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(AllowEntry {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

/// The operator's exceptions to the policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist(Vec<AllowEntry>);

impl Allowlist {
    pub fn new(entries: Vec<AllowEntry>) -> Self {
        Allowlist(entries)
    }

    /// Whether `host` has an entry at all, for whatever port (the resolver's
    /// question: the port was checked with the URL).
    pub fn lists_name(&self, host: &str) -> bool {
        self.0.iter().any(|e| e.host.eq_ignore_ascii_case(host))
    }

    /// Whether `host` (a name or an address, as in the URL) at `port` is
    /// allowed whatever it resolves to.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.0
            .iter()
            .any(|e| e.host.eq_ignore_ascii_case(host) && e.port.is_none_or(|p| p == port))
    }
}

/// A URL the broker may request, and whether its destination's addresses
/// still have to be checked (a name not on the allowlist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub url: url::Url,
    /// Resolve and check each address before connecting.
    pub check_addresses: bool,
}

/// Resolves `raw` against the serving origin when relative and checks it:
/// the scheme, the credentials, and the host when it is an address literal.
/// A relative URL (to the host's own origin) needs no address check.
pub fn check_url(raw: &str, origin: &url::Url, allow: &Allowlist) -> Result<Checked, Refusal> {
    let raw = raw.trim();
    let relative =
        url::Url::parse(raw).is_err_and(|e| e == url::ParseError::RelativeUrlWithoutBase);
    if relative {
        let url = origin
            .join(raw)
            .map_err(|e| Refusal(format!("{raw:?} is not a URL: {e}")))?;
        return Ok(Checked {
            url,
            check_addresses: false,
        });
    }
    let url = url::Url::parse(raw).map_err(|e| Refusal(format!("{raw:?} is not a URL: {e}")))?;
    check_absolute(url, allow)
}

/// The checks of an absolute URL: every redirect hop goes through them.
pub fn check_absolute(url: url::Url, allow: &Allowlist) -> Result<Checked, Refusal> {
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(Refusal(format!(
                "the {other}: scheme is not allowed (http and https only)"
            )))
        }
    }
    let port = url.port_or_known_default().unwrap_or(0);
    let host = match url.host() {
        Some(h) => h.to_owned(),
        None => return Err(Refusal("the URL names no host".to_string())),
    };
    let allowed = allow.allows(&host.to_string(), port);
    let check_addresses = match host {
        url::Host::Ipv4(a) => {
            if !allowed {
                if let Some(why) = forbidden_address(IpAddr::V4(a)) {
                    return Err(Refusal(format!("{a} is {why}")));
                }
            }
            false
        }
        url::Host::Ipv6(a) => {
            if !allowed {
                if let Some(why) = forbidden_address(IpAddr::V6(a)) {
                    return Err(Refusal(format!("{a} is {why}")));
                }
            }
            false
        }
        url::Host::Domain(ref d) => {
            if !allowed && allow.lists_name(d) {
                // The resolver lets a listed name through: its port must be
                // the one listed.
                return Err(Refusal(format!(
                    "{d} is allowed only on the ports its allowlist entries name"
                )));
            }
            if !allowed && is_local_name(d) {
                return Err(Refusal(format!("{d} is a name of this machine")));
            }
            !allowed
        }
    };
    Ok(Checked {
        url,
        check_addresses,
    })
}

/// Names that mean this machine whatever a resolver says.
fn is_local_name(d: &str) -> bool {
    let d = d.trim_end_matches('.').to_ascii_lowercase();
    d == "localhost" || d.ends_with(".localhost")
}

/// Why an address may not be reached (`None`: it may): this machine, its
/// networks, shared and multicast ranges, cloud metadata, and the same in
/// IPv4-mapped or -compatible IPv6 forms.
pub fn forbidden_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => forbidden_v4(a),
        IpAddr::V6(a) => forbidden_v6(a),
    }
}

fn forbidden_v4(a: Ipv4Addr) -> Option<&'static str> {
    let [o0, o1, ..] = a.octets();
    if a == Ipv4Addr::new(169, 254, 169, 254) {
        Some("a cloud metadata address")
    } else if a.is_loopback() {
        Some("a loopback address")
    } else if a.is_unspecified() || o0 == 0 {
        Some("an unspecified address")
    } else if a.is_private() {
        Some("a private address")
    } else if a.is_link_local() {
        Some("a link-local address")
    } else if o0 == 100 && (64..128).contains(&o1) {
        Some("a shared (carrier-grade NAT) address")
    } else if a.is_multicast() || a.is_broadcast() || o0 >= 240 {
        Some("a multicast, broadcast or reserved address")
    } else if o0 == 192 && o1 == 0 && a.octets()[2] == 0 {
        Some("an IETF protocol address")
    } else if (o0 == 198 && (o1 == 18 || o1 == 19))
        || a.octets()[..3] == [192, 0, 2]
        || a.octets()[..3] == [198, 51, 100]
        || a.octets()[..3] == [203, 0, 113]
    {
        Some("a benchmarking or documentation address")
    } else {
        None
    }
}

fn forbidden_v6(a: Ipv6Addr) -> Option<&'static str> {
    let seg = a.segments();
    if a == "fd00:ec2::254"
        .parse::<Ipv6Addr>()
        .expect("a literal address")
    {
        return Some("a cloud metadata address");
    }
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d, not ::1
    // or ::) and NAT64 (64:ff9b::a.b.c.d): the IPv4 address decides.
    let v4 = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if seg[..5] == [0; 5] && seg[5] == 0xffff {
        return forbidden_v4(v4(seg[6], seg[7])).or(None);
    }
    if seg[..6] == [0; 6] && !(seg[6] == 0 && seg[7] <= 1) {
        return forbidden_v4(v4(seg[6], seg[7]));
    }
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0; 4] {
        return forbidden_v4(v4(seg[6], seg[7]));
    }
    if a.is_loopback() {
        Some("a loopback address")
    } else if a.is_unspecified() {
        Some("an unspecified address")
    } else if seg[0] & 0xfe00 == 0xfc00 {
        Some("a private (unique local) address")
    } else if seg[0] & 0xffc0 == 0xfe80 || seg[0] & 0xffc0 == 0xfec0 {
        Some("a link-local address")
    } else if a.is_multicast() {
        Some("a multicast address")
    } else if seg[0] == 0x2001 && seg[1] == 0x0db8 {
        Some("a documentation address")
    } else {
        None
    }
}

/// Whether a redirect from `from` to `to` leaves the origin (scheme, host
/// and port): such a hop drops the request's `Authorization`.
pub fn changes_origin(from: &url::Url, to: &url::Url) -> bool {
    from.origin() != to.origin()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> url::Url {
        url::Url::parse("http://127.0.0.1:8080").unwrap()
    }

    fn refused(u: &str) -> String {
        check_url(u, &origin(), &Allowlist::default())
            .expect_err(u)
            .0
    }

    #[test]
    fn a_relative_url_goes_to_the_serving_origin_unchecked() {
        let c = check_url("/api/feed?x=1", &origin(), &Allowlist::default()).unwrap();
        assert_eq!(c.url.as_str(), "http://127.0.0.1:8080/api/feed?x=1");
        assert!(!c.check_addresses);
    }

    #[test]
    fn addresses_of_this_machine_and_its_networks_are_refused_in_every_spelling() {
        for (u, why) in [
            ("http://127.0.0.1/", "loopback"),
            ("http://2130706433/", "loopback"),
            ("http://0x7f.1/", "loopback"),
            ("http://[::1]/", "loopback"),
            ("http://[::ffff:127.0.0.1]/", "loopback"),
            ("http://[::ffff:7f00:1]/", "loopback"),
            ("http://user@127.0.0.1/", "loopback"),
            ("http://169.254.169.254/latest/meta-data", "metadata"),
            ("http://[fd00:ec2::254]/", "metadata"),
            ("http://[::ffff:169.254.169.254]/", "metadata"),
            ("http://10.1.2.3/", "private"),
            ("http://172.16.0.1/", "private"),
            ("http://192.168.1.1/", "private"),
            ("http://100.64.0.1/", "shared"),
            ("http://169.254.1.1/", "link-local"),
            ("http://[fe80::1]/", "link-local"),
            ("http://[fc00::1]/", "private"),
            ("http://224.0.0.1/", "multicast"),
            ("http://0.0.0.0/", "unspecified"),
            ("http://[::]/", "unspecified"),
            ("http://[64:ff9b::a00:1]/", "private"),
            ("http://localhost:8080/", "this machine"),
            ("http://api.localhost/", "this machine"),
        ] {
            let r = refused(u);
            assert!(r.contains(why), "{u}: {r}");
        }
    }

    #[test]
    fn only_http_and_https_are_allowed() {
        assert!(refused("file:///etc/passwd").contains("file:"));
        assert!(refused("ftp://example.com/x").contains("ftp:"));
        assert!(refused("gopher://example.com/").contains("gopher:"));
    }

    #[test]
    fn public_addresses_and_names_pass_names_still_to_be_checked_after_dns() {
        let c = check_url("https://example.com/feed", &origin(), &Allowlist::default()).unwrap();
        assert!(c.check_addresses);
        let c = check_url("http://93.184.216.34/", &origin(), &Allowlist::default()).unwrap();
        assert!(!c.check_addresses);
        assert_eq!(forbidden_address("8.8.8.8".parse().unwrap()), None);
        assert_eq!(forbidden_address("2606:4700::1111".parse().unwrap()), None);
    }

    #[test]
    fn the_allowlist_opens_a_host_and_port_and_nothing_else() {
        let allow = Allowlist::new(vec![
            "127.0.0.1:9000".parse().unwrap(),
            "feeds.test".parse().unwrap(),
        ]);
        let c = check_url("http://127.0.0.1:9000/x", &origin(), &allow).unwrap();
        assert!(!c.check_addresses);
        assert!(check_url("http://127.0.0.1:9001/x", &origin(), &allow).is_err());
        let c = check_url("http://feeds.test:81/x", &origin(), &allow).unwrap();
        assert!(
            !c.check_addresses,
            "an allowed name is not checked after DNS"
        );
        let allow = Allowlist::new(vec!["localhost:9000".parse().unwrap()]);
        assert!(check_url("http://localhost:9000/", &origin(), &allow).is_ok());
        let r = check_url("http://localhost:9001/", &origin(), &allow).unwrap_err();
        assert!(r.0.contains("only on the ports"), "{r}");
        assert!("[::1]:80".parse::<AllowEntry>().is_ok());
        assert!("a:b:c".parse::<AllowEntry>().is_ok(), "a bare IPv6 address");
        assert!("host:port".parse::<AllowEntry>().is_err());
    }

    #[test]
    fn a_redirect_to_another_origin_is_seen() {
        let a = url::Url::parse("https://a.test/x").unwrap();
        assert!(!changes_origin(
            &a,
            &url::Url::parse("https://a.test/y").unwrap()
        ));
        assert!(changes_origin(
            &a,
            &url::Url::parse("http://a.test/y").unwrap()
        ));
        assert!(changes_origin(
            &a,
            &url::Url::parse("https://b.test/y").unwrap()
        ));
    }
}
