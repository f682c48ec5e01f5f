//! Parsing of the libvirt URIs a `LibvirtHost` may carry.
//!
//! Accepted forms (nothing else):
//! - `qemu+ssh://[user@]host[:port]/system` or `/session` — remote, reached over SSH; user defaults
//!   to `root`, port to 22. `host` is a DNS name, an IPv4 address or a bracketed IPv6 address.
//! - `qemu:///system`, `qemu:///session` — the local daemon.
//! - `test:///default` or `test:///<absolute path>` — libvirt's in-process test driver.
//!
//! Query strings and fragments are refused: libvirt's own SSH parameters (`keyfile`, `no_verify`,
//! `known_hosts`, ...) would bypass the pinned-key transport, so they must never be passed through.
//! Percent-escapes are refused too, so what is validated is exactly what is used.

use std::fmt;

/// Which libvirt daemon instance a URI addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The privileged daemon (`/system`).
    System,
    /// The per-user daemon (`/session`).
    Session,
}

impl Mode {
    /// The URI path for this mode, without the leading slash.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::System => "system",
            Mode::Session => "session",
        }
    }
}

/// A remote host reached over SSH.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SshTarget {
    /// Login user (default `root`).
    pub user: String,
    /// DNS name or IP address; IPv6 without brackets.
    pub host: String,
    /// TCP port (default 22).
    pub port: u16,
    /// Daemon instance on the remote side.
    pub mode: Mode,
}

impl SshTarget {
    /// `host:port`, bracketing IPv6 addresses, for `connect`.
    pub fn socket_addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for SshTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "qemu+ssh://{}@{}/{}",
            self.user,
            self.socket_addr(),
            self.mode.as_str()
        )
    }
}

/// A parsed, validated libvirt URI.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LibvirtUri {
    /// `qemu+ssh://...`: needs the SSH transport.
    Ssh(SshTarget),
    /// `qemu:///system` or `qemu:///session`: the local daemon, opened by `virt` directly.
    LocalQemu(Mode),
    /// `test:///...`: the libvirt test driver; holds the full URI to pass to `virt` unchanged.
    Test(String),
}

impl LibvirtUri {
    /// Parse and validate `uri`.
    pub fn parse(uri: &str) -> Result<Self, UriError> {
        parse(uri)
    }

    /// True for URIs that need the SSH tunnel.
    pub fn is_ssh(&self) -> bool {
        matches!(self, LibvirtUri::Ssh(_))
    }

    /// The URI to hand to `virt::connect::Connect::open` for local URIs; `None` for SSH URIs,
    /// which go through [`super::Tunnel::libvirt_uri`] instead.
    pub fn local_uri(&self) -> Option<String> {
        match self {
            LibvirtUri::Ssh(_) => None,
            LibvirtUri::LocalQemu(mode) => Some(format!("qemu:///{}", mode.as_str())),
            LibvirtUri::Test(uri) => Some(uri.clone()),
        }
    }
}

impl std::str::FromStr for LibvirtUri {
    type Err = UriError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// Why a URI was refused. Each variant names the offending part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// Not `scheme://...` at all.
    #[error("libvirt URI {0:?} is not of the form scheme://...")]
    NotAUri(String),
    /// A scheme other than `qemu+ssh`, `qemu` or `test`.
    #[error("unsupported libvirt URI scheme {0:?} (expected qemu+ssh, qemu or test)")]
    UnknownScheme(String),
    /// The path is not `/system` or `/session` (or, for `test`, not `/default` or absolute).
    #[error("unsupported libvirt URI path {0:?} (expected /system or /session)")]
    BadPath(String),
    /// The port is not a number in 1..=65535.
    #[error("bad port {0:?} in libvirt URI (expected 1-65535)")]
    BadPort(String),
    /// The URI carries a `?query` or `#fragment`.
    #[error("libvirt URI must not have a query string or fragment, found {0:?}")]
    QueryNotAllowed(String),
    /// Missing or malformed host.
    #[error("bad host {0:?} in libvirt URI")]
    BadHost(String),
    /// Malformed user.
    #[error("bad user {0:?} in libvirt URI")]
    BadUser(String),
    /// A local URI (`qemu:`, `test:`) with a host part.
    #[error("{0} URIs are local and must not name a host (use qemu+ssh:// for remote hosts)")]
    UnexpectedHost(String),
}

fn parse(uri: &str) -> Result<LibvirtUri, UriError> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| UriError::NotAUri(uri.to_string()))?;
    if let Some(i) = rest.find(['?', '#']) {
        return Err(UriError::QueryNotAllowed(rest[i..].to_string()));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match scheme {
        "qemu+ssh" => {
            let mode = parse_mode(path)?;
            let (user, hostport) = match authority.rsplit_once('@') {
                Some((u, h)) => (u, h),
                None => ("root", authority),
            };
            validate_user(user)?;
            let (host, port) = split_host_port(hostport)?;
            Ok(LibvirtUri::Ssh(SshTarget {
                user: user.to_string(),
                host,
                port,
                mode,
            }))
        }
        "qemu" => {
            if !authority.is_empty() {
                return Err(UriError::UnexpectedHost(scheme.to_string()));
            }
            Ok(LibvirtUri::LocalQemu(parse_mode(path)?))
        }
        "test" => {
            if !authority.is_empty() {
                return Err(UriError::UnexpectedHost(scheme.to_string()));
            }
            let ok = path == "/default"
                || (path.len() > 1 && !path.contains('%') && !path.split('/').any(|seg| seg == ".."));
            if !ok {
                return Err(UriError::BadPath(path.to_string()));
            }
            Ok(LibvirtUri::Test(uri.to_string()))
        }
        other => Err(UriError::UnknownScheme(other.to_string())),
    }
}

fn parse_mode(path: &str) -> Result<Mode, UriError> {
    match path {
        "/system" => Ok(Mode::System),
        "/session" => Ok(Mode::Session),
        other => Err(UriError::BadPath(other.to_string())),
    }
}

fn validate_user(user: &str) -> Result<(), UriError> {
    let ok = !user.is_empty()
        && user.len() <= 64
        && !user.starts_with('-')
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(UriError::BadUser(user.to_string()))
    }
}

fn split_host_port(hostport: &str) -> Result<(String, u16), UriError> {
    let (host, port) = if let Some(after) = hostport.strip_prefix('[') {
        let (h, tail) = after
            .split_once(']')
            .ok_or_else(|| UriError::BadHost(hostport.to_string()))?;
        if h.is_empty() || !h.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') || !h.contains(':') {
            return Err(UriError::BadHost(hostport.to_string()));
        }
        let port = match tail {
            "" => None,
            t => Some(
                t.strip_prefix(':')
                    .ok_or_else(|| UriError::BadHost(hostport.to_string()))?,
            ),
        };
        (h, port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if !hostport.starts_with('[') {
        let ok = !host.is_empty()
            && host.len() <= 253
            && !host.starts_with(['-', '.'])
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        if !ok {
            return Err(UriError::BadHost(host.to_string()));
        }
    }
    let port = match port {
        None => 22,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.chars().all(|c| c.is_ascii_digit()) => n,
            _ => return Err(UriError::BadPort(p.to_string())),
        },
    };
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssh(user: &str, host: &str, port: u16, mode: Mode) -> LibvirtUri {
        LibvirtUri::Ssh(SshTarget {
            user: user.into(),
            host: host.into(),
            port,
            mode,
        })
    }

    #[test]
    fn parses_accepted_forms() {
        let cases = [
            (
                "qemu+ssh://core@hv1.example.com:2222/system",
                ssh("core", "hv1.example.com", 2222, Mode::System),
            ),
            ("qemu+ssh://hv1/session", ssh("root", "hv1", 22, Mode::Session)),
            (
                "qemu+ssh://root@127.0.0.1/system",
                ssh("root", "127.0.0.1", 22, Mode::System),
            ),
            ("qemu+ssh://u@[::1]:2200/system", ssh("u", "::1", 2200, Mode::System)),
            ("qemu+ssh://u@[fe80::1]/system", ssh("u", "fe80::1", 22, Mode::System)),
            ("qemu:///system", LibvirtUri::LocalQemu(Mode::System)),
            ("qemu:///session", LibvirtUri::LocalQemu(Mode::Session)),
            ("test:///default", LibvirtUri::Test("test:///default".into())),
            (
                "test:///tmp/x/node.xml",
                LibvirtUri::Test("test:///tmp/x/node.xml".into()),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(LibvirtUri::parse(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn helpers() {
        let LibvirtUri::Ssh(t) = LibvirtUri::parse("qemu+ssh://u@[::1]:2200/system").unwrap() else {
            panic!("not ssh")
        };
        assert_eq!(t.socket_addr(), "[::1]:2200");
        assert_eq!(t.to_string(), "qemu+ssh://u@[::1]:2200/system");
        assert_eq!(
            LibvirtUri::parse("qemu:///session").unwrap().local_uri().as_deref(),
            Some("qemu:///session")
        );
        assert!(LibvirtUri::parse("qemu+ssh://h/system").unwrap().is_ssh());
        assert_eq!(LibvirtUri::parse("qemu+ssh://h/system").unwrap().local_uri(), None);
    }

    #[test]
    fn refuses_with_typed_errors() {
        use UriError::*;
        let cases: [(&str, UriError); 17] = [
            ("xen+ssh://h/system", UnknownScheme("xen+ssh".into())),
            ("qemu+libssh://h/system", UnknownScheme("qemu+libssh".into())),
            ("qemu+ssh://h/foo", BadPath("/foo".into())),
            ("qemu+ssh://h", BadPath("".into())),
            ("qemu+ssh://h/system/", BadPath("/system/".into())),
            ("qemu+ssh://h:0/system", BadPort("0".into())),
            ("qemu+ssh://h:70000/system", BadPort("70000".into())),
            ("qemu+ssh://h:+22/system", BadPort("+22".into())),
            ("qemu+ssh://h:/system", BadPort("".into())),
            ("qemu+ssh://h/system?keyfile=/x", QueryNotAllowed("?keyfile=/x".into())),
            ("qemu:///system?socket=/x", QueryNotAllowed("?socket=/x".into())),
            ("qemu+ssh:///system", BadHost("".into())),
            ("qemu+ssh://-oProxyCommand=x/system", BadHost("-oProxyCommand=x".into())),
            ("qemu+ssh://a b@h/system", BadUser("a b".into())),
            ("qemu+ssh://@h/system", BadUser("".into())),
            ("qemu://h/system", UnexpectedHost("qemu".into())),
            ("test://", BadPath("".into())),
        ];
        for (input, want) in cases {
            assert_eq!(LibvirtUri::parse(input), Err(want), "{input}");
        }
        assert!(matches!(LibvirtUri::parse("nonsense"), Err(NotAUri(_))));
        assert!(matches!(LibvirtUri::parse("test:///a/../b"), Err(BadPath(_))));
        assert!(matches!(LibvirtUri::parse("qemu+ssh://[::1/system"), Err(BadHost(_))));
        assert!(
            LibvirtUri::parse("qemu+ssh://h:2x/system")
                .unwrap_err()
                .to_string()
                .contains("2x")
        );
    }
}
