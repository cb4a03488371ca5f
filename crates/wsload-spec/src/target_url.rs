//! Target URLs (`spec.target.url`, `--target-url`): the one grammar `wsload validate`,
//! `wsload run` (which dials the host and port parsed here) and the API server (the CEL rules
//! of `cel::url_rules`, which restate it) accept:
//!
//! `ws[s]://HOST[:PORT][/PATH][?QUERY]` where HOST is a name (letters, digits, `.`, `-`, `_`),
//! an IPv4 address (four numbers 0-255, no leading zeros) or an IPv6 address in brackets, and
//! PORT a decimal number from 1 to 65535 (80 for `ws`, 443 for `wss` when absent). No user
//! information, no fragment. [`CORPUS`] lists good and bad URLs on which both checkers must
//! agree (`operator/tests/crd_validation.rs` asks a real API server).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// What to write instead, appended to every refusal.
pub const FORM: &str = "write ws[s]://host[:port][/path][?query], host a name, an IPv4 address or an IPv6 address in brackets, port 1-65535 (e.g. ws://127.0.0.1:8080/ or ws://[::1]:8080/)";

/// A target URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    /// `wss`.
    pub tls: bool,
    /// As written (an IPv6 address in its brackets), for messages and the `Host` header.
    pub host: String,
    /// Given, or the scheme's default.
    pub port: u16,
    /// The path and query, `/` when the URL has none.
    pub path_and_query: String,
}

/// Why a URL is refused: the problem, named as the URL writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError {
    pub url: String,
    pub problem: UrlProblem,
}

/// What is wrong with a URL, in the words of a refusal: `"ws://h:0/" has port "0"; ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlProblem {
    #[error("must start with ws:// or wss://")]
    Scheme,
    #[error("has a fragment ({0:?}), which a WebSocket URL cannot carry")]
    Fragment(String),
    #[error("has no host")]
    NoHost,
    #[error(
        "carries user information (user@host), which is never sent; put credentials in spec.auth"
    )]
    UserInformation,
    #[error("has {0:?} in its path or query; percent-encode it")]
    PathCharacter(char),
    #[error(
        "has {0:?} in its path or query, a '%' without two hex digits after it; write a '%' as %25"
    )]
    Escape(String),
    #[error("has an IPv6 address without its closing ']'")]
    UnclosedIpv6,
    #[error("has {0}, which is not an IPv6 address")]
    NotIpv6(String),
    #[error("has {after:?} after the address {host}")]
    AfterAddress { after: String, host: String },
    #[error(
        "has {c:?} in its host {host:?}; a host is a name, an IPv4 address or [an IPv6 address]"
    )]
    HostCharacter { c: char, host: String },
    #[error(
        "has host {0:?}, which is not an IPv4 address (four numbers 0-255 without leading zeros)"
    )]
    NotIpv4(String),
    #[error("has port {0:?}; a port is a decimal number from 1 to 65535")]
    Port(String),
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}; {FORM}", self.url, self.problem)
    }
}

impl std::error::Error for UrlError {}

/// The characters a path or query may hold unencoded (RFC 3986 `pchar`, `/`, `?`, and `%` of
/// an escape, which [`bad_escape`] checks).
fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@/?%".contains(c)
}

/// The first `%` not followed by two hex digits, with what follows it (at most two characters):
/// a server would refuse the request line, or read another path than the one written.
fn bad_escape(path: &str) -> Option<String> {
    let b = path.as_bytes();
    let at = (0..b.len()).find(|&i| {
        b[i] == b'%'
            && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })?;
    Some(path[at..].chars().take(3).collect())
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._".contains(c)
}

impl TargetUrl {
    pub fn parse(url: &str) -> Result<TargetUrl, UrlError> {
        let fail = |problem: UrlProblem| UrlError {
            url: url.to_string(),
            problem,
        };
        let (tls, rest) = if let Some(rest) = url.strip_prefix("wss://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("ws://") {
            (false, rest)
        } else {
            return Err(fail(UrlProblem::Scheme));
        };
        if let Some(at) = rest.find('#') {
            return Err(fail(UrlProblem::Fragment(rest[at..].to_string())));
        }
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() {
            return Err(fail(UrlProblem::NoHost));
        }
        if authority.contains('@') {
            return Err(fail(UrlProblem::UserInformation));
        }
        let (host, port) = host_port(authority).map_err(fail)?;
        if let Some(c) = path.chars().find(|&c| !path_char(c)) {
            return Err(fail(UrlProblem::PathCharacter(c)));
        }
        if let Some(escape) = bad_escape(path) {
            return Err(fail(UrlProblem::Escape(escape)));
        }
        Ok(TargetUrl {
            tls,
            host: host.to_string(),
            port: port.unwrap_or(if tls { 443 } else { 80 }),
            path_and_query: if path.is_empty() {
                "/".into()
            } else if path.starts_with('?') {
                format!("/{path}")
            } else {
                path.to_string()
            },
        })
    }

    /// The host without the brackets of an IPv6 address: what is looked up, and the name TLS
    /// verifies.
    pub fn lookup_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }
}

/// The host (as written) and port of an authority.
fn host_port(authority: &str) -> Result<(&str, Option<u16>), UrlProblem> {
    let (host, port) = if authority.starts_with('[') {
        let close = authority.find(']').ok_or(UrlProblem::UnclosedIpv6)?;
        let (host, after) = authority.split_at(close + 1);
        let inner = &host[1..host.len() - 1];
        match inner.parse::<Ipv6Addr>() {
            // The API server's `isIP` refuses IPv4-mapped addresses; so does this, to agree.
            Ok(a) if a.to_ipv4_mapped().is_none() => {}
            _ => return Err(UrlProblem::NotIpv6(host.to_string())),
        }
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => {
                return Err(UrlProblem::AfterAddress {
                    after: after.to_string(),
                    host: host.to_string(),
                });
            }
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(UrlProblem::NoHost);
    }
    if !host.starts_with('[') {
        if let Some(c) = host.chars().find(|&c| !name_char(c)) {
            return Err(UrlProblem::HostCharacter {
                c,
                host: host.to_string(),
            });
        }
        // The resolver would read `10.1` or `12345` as an address (inet_aton): refuse what
        // only looks like one.
        if host.chars().all(|c| c.is_ascii_digit() || c == '.') && host.parse::<Ipv4Addr>().is_err()
        {
            return Err(UrlProblem::NotIpv4(host.to_string()));
        }
    }
    let port = match port {
        None => None,
        Some(p) => Some(parse_port(p).ok_or_else(|| UrlProblem::Port(p.to_string()))?),
    };
    Ok((host, port))
}

fn parse_port(p: &str) -> Option<u16> {
    if p.starts_with('0') || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse::<u16>().ok().filter(|&p| p != 0)
}

/// URLs both checkers must accept (`true`) or refuse (`false`).
pub const CORPUS: &[(&str, bool)] = &[
    ("ws://127.0.0.1:8080/", true),
    ("ws://h:1/", true),
    ("ws://h:65535/", true),
    ("wss://example.test/wse", true),
    ("ws://example.test", true),
    ("ws://example.test?x=1", true),
    ("ws://my_host.example-1.test:8080/a/b?c=d&e=%20f", true),
    ("ws://[::1]:8080/", true),
    ("ws://[::1]/", true),
    ("ws://[2001:db8::1]", true),
    ("ws://255.255.255.255:1/", true),
    ("ws://127.0.0.1:99999/", false),
    ("ws://h:99999/", false),
    ("ws://127.0.0.1:65536/", false),
    ("ws://127.0.0.1:0/", false),
    ("ws://127.0.0.1:080/", false),
    ("ws://127.0.0.1:abc/", false),
    ("ws://h:/", false),
    ("ws://h:-1/", false),
    ("ws://h:8080:9090/", false),
    ("ws://[::1/", false),
    ("ws://[::1]x/", false),
    ("ws://[1.2.3.4]/", false),
    ("ws://[::ffff:1.2.3.4]/", false),
    ("ws://[zz::1]/", false),
    ("ws://::1/", false),
    ("ws://256.1.1.1/", false),
    ("ws://1.2.3/", false),
    ("ws://12345/", false),
    ("ws://01.2.3.4/", false),
    ("ws://user:pw@h/", false),
    ("ws://h/#frag", false),
    ("ws://h/a b", false),
    ("ws://h/<x>", false),
    ("ws://h/%zz", false),
    ("ws://h/a%2", false),
    ("ws://h/a%", false),
    ("ws://h/?q=%g1", false),
    ("ws://h/a%2fb?c=%7E", true),
    ("ws://h i/", false),
    ("ws:///x", false),
    ("ws://", false),
    ("ws://:8080/", false),
    ("http://h:1/", false),
    ("WS://h/", false),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_is_what_the_parser_says() {
        let wrong: Vec<String> = CORPUS
            .iter()
            .filter(|(url, good)| TargetUrl::parse(url).is_ok() != *good)
            .map(|(url, good)| {
                format!(
                    "{url}: want accepted={good}, got {:?}",
                    TargetUrl::parse(url)
                )
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn host_and_port_are_the_urls() {
        let u = TargetUrl::parse("ws://[::1]:9000?q").expect("good");
        assert_eq!(
            (
                u.tls,
                u.host.as_str(),
                u.lookup_host(),
                u.port,
                u.path_and_query.as_str()
            ),
            (false, "[::1]", "::1", 9000, "/?q")
        );
        let u = TargetUrl::parse("wss://example.test/wse").expect("good");
        assert_eq!(
            (u.tls, u.port, u.path_and_query.as_str()),
            (true, 443, "/wse")
        );
    }

    #[test]
    fn a_refusal_names_the_problem_and_the_form() {
        let e = TargetUrl::parse("ws://127.0.0.1:99999/").expect_err("bad port");
        let text = e.to_string();
        assert!(
            text.contains("port \"99999\"") && text.contains("1 to 65535"),
            "{text}"
        );
        assert!(text.contains(FORM), "{text}");
        assert_eq!(e.problem, UrlProblem::Port("99999".into()));
        let e = TargetUrl::parse("ws://[::1/").expect_err("unclosed");
        assert!(e.to_string().contains("closing ']'"), "{e}");
    }
}
