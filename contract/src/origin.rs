//! Which browser pages may talk to a node: the format of an allowed host name
//! (`switchboard serve --allowed-hosts`, the `McpServer` spec's `allowedHosts`) and of an
//! allowed origin (`--allowed-origins`, `allowedOrigins`), and how an `Origin` header is read.
//!
//! - A **host** is `*` (any `Host` header), a DNS name or IPv4 address (`mcp.example.com`,
//!   `10.0.0.7`), or a bracketed IPv6 address (`[::1]`); no port. `*` is about `Host` only: it
//!   never lets any `Origin` in.
//! - An **origin** is `http://HOST` or `https://HOST`, with an optional `:PORT` (1 to 65535,
//!   no leading zero); without one it is the scheme's default port (80 or 443), as browsers
//!   send it. No `*`, no path, no trailing slash, no user info; the scheme in lower case.
//!
//! The operator's CRD says the same in CEL ([`HOST_PATTERN`], [`ORIGIN_PATTERN`]); a test there
//! compares the two on a table.

use std::fmt;

/// Longest host name (a DNS name's limit).
pub const MAX_HOST_LEN: usize = 253;

/// RE2 pattern of an allowed host (for CEL's `matches`; the length is checked apart): `*`, or
/// dot-separated labels of letters, digits and inner hyphens, or a bracketed IPv6 address.
pub const HOST_PATTERN: &str =
    r"^(\*|[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]{2,45}\])$";
/// RE2 pattern of an allowed origin (for CEL's `matches`; the length is checked apart): a
/// lower-case `http` or `https`, a host as in [`HOST_PATTERN`] but `*`, an optional port from 1
/// to 65535 without a leading zero.
pub const ORIGIN_PATTERN: &str = r"^https?://([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]{2,45}\])(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?$";

/// Why a text is not an allowed host or origin. Each message names the text and says what to
/// write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error("{0:?} is not a host name: write a DNS name, an IPv4 address, a bracketed IPv6 address ([::1]) or * (no port, no scheme)")]
    Host(String),
    #[error("{0:?} is longer than {MAX_HOST_LEN} characters")]
    HostTooLong(String),
    #[error("{0:?} is not an origin: write http://HOST or https://HOST, with an optional :PORT (no path, no trailing slash)")]
    Origin(String),
    #[error("{0:?}: * is not an origin; list the origins browser clients are served from (https://app.example.com)")]
    Wildcard(String),
}

/// The scheme of an origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The port a browser leaves out of the origin.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// An origin browser pages may be served from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowedOrigin {
    pub scheme: Scheme,
    /// Lower case; IPv6 in brackets.
    pub host: String,
    /// `None`: any port (what a node derives from its allowed hosts); a parsed origin always
    /// has one (the scheme's default when the text names none).
    pub port: Option<u16>,
}

impl AllowedOrigin {
    /// `http` and `https` on any port of `host`: the origins a node allows by default for each
    /// of its allowed hosts (none for `*`).
    pub fn any_port_of(host: &str) -> Vec<AllowedOrigin> {
        if host == "*" {
            return Vec::new();
        }
        [Scheme::Http, Scheme::Https].map(|scheme| AllowedOrigin { scheme, host: host.to_ascii_lowercase(), port: None }).into()
    }

    /// Whether the `Origin` header value `origin` is this origin. Anything that is not a
    /// serialized `http`/`https` origin (`null`, a path, garbage) is no allowed origin's.
    pub fn admits(&self, origin: &str) -> bool {
        let Some(sent) = parse_origin(origin) else { return false };
        sent.scheme == self.scheme && sent.host == self.host && self.port.is_none_or(|port| Some(port) == sent.port)
    }
}

impl fmt::Display for AllowedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme.as_str(), self.host)?;
        match self.port {
            Some(port) if port == self.scheme.default_port() => Ok(()),
            Some(port) => write!(f, ":{port}"),
            None => f.write_str(":*"),
        }
    }
}

fn is_dns_name(text: &str) -> bool {
    text.split('.').all(|label| {
        let bytes = label.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= 63
            && bytes.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
            && bytes[0] != b'-'
            && bytes[bytes.len() - 1] != b'-'
    })
}

fn is_bracketed_ipv6(text: &str) -> bool {
    text.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .is_some_and(|inner| (2..=45).contains(&inner.len()) && inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.'))
}

/// A host name without `*`, or `None`.
fn named_host(text: &str) -> Option<String> {
    (text.len() <= MAX_HOST_LEN && (is_dns_name(text) || is_bracketed_ipv6(text))).then(|| text.to_ascii_lowercase())
}

/// Check an allowed host (`*`, a DNS name, an IPv4 address or `[IPv6]`); returns it in lower case.
pub fn parse_allowed_host(text: &str) -> Result<String, OriginError> {
    if text == "*" {
        return Ok(text.into());
    }
    if text.len() > MAX_HOST_LEN {
        return Err(OriginError::HostTooLong(text.into()));
    }
    named_host(text).ok_or_else(|| OriginError::Host(text.into()))
}

/// Parse an allowed origin: `http(s)://HOST[:PORT]`.
pub fn parse_allowed_origin(text: &str) -> Result<AllowedOrigin, OriginError> {
    if text.contains('*') {
        return Err(OriginError::Wildcard(text.into()));
    }
    parse_origin(text).ok_or_else(|| OriginError::Origin(text.into()))
}

/// The origin `text` serializes: scheme, lower-case host, and the port (explicit or default).
fn parse_origin(text: &str) -> Option<AllowedOrigin> {
    let (scheme, rest) = text.split_once("://")?;
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        _ => return None,
    };
    // A bracketed IPv6 host may hold colons; the port follows its closing bracket.
    let split =
        if rest.starts_with('[') { rest.find(']').map(|i| i + 1).unwrap_or(rest.len()) } else { rest.find(':').unwrap_or(rest.len()) };
    let (host, port) = rest.split_at(split);
    let host = named_host(host)?;
    let port = match port.strip_prefix(':') {
        None if port.is_empty() => scheme.default_port(),
        Some(digits) if (1..=5).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0') => {
            digits.parse::<u16>().ok()?
        }
        _ => return None,
    };
    Some(AllowedOrigin { scheme, host, port: Some(port) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        for good in ["*", "localhost", "127.0.0.1", "[::1]", "mcp.example.com", "demo.tools.svc.cluster.local", "a-b.c9", "X.Example.COM"] {
            assert!(parse_allowed_host(good).is_ok(), "{good:?}");
        }
        assert_eq!(parse_allowed_host("X.Example.COM").unwrap(), "x.example.com");
        for bad in [
            "",
            "**",
            "*.example.com",
            "example.com:8080",
            "http://example.com",
            "-a.com",
            "a-.com",
            "a..b",
            "a b",
            "a,b",
            "::1",
            "[x]",
            "example.com.",
        ] {
            assert_eq!(parse_allowed_host(bad), Err(OriginError::Host(bad.into())), "{bad:?}");
        }
        assert!(matches!(parse_allowed_host(&"a.".repeat(127)), Err(OriginError::HostTooLong(_))));
    }

    #[test]
    fn origins_parse_with_their_default_port() {
        let parsed = parse_allowed_origin("https://App.Example.com").unwrap();
        assert_eq!(parsed, AllowedOrigin { scheme: Scheme::Https, host: "app.example.com".into(), port: Some(443) });
        assert_eq!(parse_allowed_origin("http://localhost:3000").unwrap().port, Some(3000));
        assert_eq!(parse_allowed_origin("http://[::1]:8080").unwrap().host, "[::1]");
        assert_eq!(parse_allowed_origin("http://[::1]").unwrap().port, Some(80));
        assert_eq!(parse_allowed_origin("https://h:65535").unwrap().port, Some(65535));
        for bad in [
            "",
            "null",
            "example.com",
            "ftp://example.com",
            "HTTP://example.com",
            "https://example.com/",
            "https://example.com/app",
            "https://user@example.com",
            "https://example.com:",
            "https://example.com:0",
            "https://example.com:080",
            "https://example.com:65536",
            "https://example.com:123456",
            "https://exa mple.com",
            "https://",
            "https://[::1",
            "https://a,b",
        ] {
            assert_eq!(parse_allowed_origin(bad), Err(OriginError::Origin(bad.into())), "{bad:?}");
        }
        assert_eq!(parse_allowed_origin("*"), Err(OriginError::Wildcard("*".into())));
        assert_eq!(parse_allowed_origin("https://*.example.com"), Err(OriginError::Wildcard("https://*.example.com".into())));
    }

    #[test]
    fn an_origin_admits_itself_and_the_default_port_only() {
        let listed = parse_allowed_origin("https://app.example.com").unwrap();
        assert!(listed.admits("https://app.example.com"));
        assert!(listed.admits("https://APP.example.com:443"));
        assert!(!listed.admits("https://app.example.com:8443"));
        assert!(!listed.admits("http://app.example.com"));
        assert!(!listed.admits("https://evil.example.com"));
        assert!(!listed.admits("null"));
        assert!(!listed.admits("https://app.example.com/"));
        let derived = AllowedOrigin::any_port_of("localhost");
        assert!(derived.iter().any(|o| o.admits("http://localhost:5173")));
        assert!(derived.iter().any(|o| o.admits("https://localhost")));
        assert!(!derived.iter().any(|o| o.admits("http://localhost.evil.com")));
        assert!(AllowedOrigin::any_port_of("*").is_empty(), "* never derives an origin");
    }

    #[test]
    fn origins_print_as_written() {
        assert_eq!(parse_allowed_origin("https://a.example:443").unwrap().to_string(), "https://a.example");
        assert_eq!(parse_allowed_origin("http://a.example:8080").unwrap().to_string(), "http://a.example:8080");
        assert_eq!(AllowedOrigin::any_port_of("a")[0].to_string(), "http://a:*");
    }
}
