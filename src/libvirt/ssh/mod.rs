//! SSH transport to remote libvirt hosts, in pure Rust (`russh`): no `ssh` binary, no
//! `known_hosts` file, no shell.
//!
//! # Design
//!
//! 1. [`uri`] parses the `LibvirtHost` URI. Only `qemu+ssh://` needs this module; `qemu:///` and
//!    `test:///` are opened by `virt` directly.
//! 2. [`SshSession::connect`] opens ONE SSH connection per host. Inside russh's
//!    `Handler::check_server_key` — i.e. after key exchange has proven the server holds the host
//!    key, but before any authentication message is sent — the key's `SHA256:` fingerprint
//!    ([`fingerprint`]) is judged by a [`HostKeyPolicy`]:
//!    a pin that matches passes; a mismatch fails with [`SshErrorReason::HostKeyMismatch`]; no pin
//!    fails with [`SshErrorReason::HostKeyNotPinned`] unless the user explicitly opted out. Both
//!    refusals carry the observed fingerprint (public information) so a condition can show it.
//! 3. Authentication uses a [`ClientKey`] decoded in memory from the Secret's `ssh-privatekey`
//!    (OpenSSH, PKCS#1 `RSA PRIVATE KEY`, PKCS#8, SEC1 `EC PRIVATE KEY`). The key is never
//!    written to disk, never logged, and no error text contains any part of it (its `Debug`
//!    shows only the algorithm and public fingerprint).
//! 4. [`SshSession::open_tunnel`] exposes the remote libvirt socket as a local unix socket in a
//!    fresh private directory (mode 0700). Each local connection gets its own
//!    `direct-streamlocal@openssh.com` channel on the shared SSH connection, pumped by a copy
//!    loop that also counts the libvirt RPC messages sent ([`Tunnel::rpc_messages`]). The `virt` crate connects with
//!    [`Tunnel::libvirt_uri`] (`qemu+unix:///system?socket=<path>`). Dropping or closing the
//!    [`Tunnel`] stops the listener, aborts the pumps and removes the socket and directory.
//! 5. Liveness: russh sends keepalives every [`SshOptions::keepalive_interval`] and drops the
//!    connection after [`SshOptions::keepalive_max`] unanswered ones. [`SshSession::is_closed`] /
//!    [`Tunnel::is_closed`] report a dead connection; the caller (the host controller) then builds a
//!    new session and tunnel, e.g. with [`SshSession::connect_with_backoff`] (which retries only
//!    connection failures, never host key or authentication refusals). Nothing reconnects behind
//!    the caller's back, so every reconnect re-checks the host key and uses the current Secret.
//!
//! Errors are [`SshError`]; [`SshError::reason`] gives the `Reachable` condition reason.

mod fingerprint;
pub mod rpc_count;
mod tunnel;
pub mod uri;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use russh::client;
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};

pub use fingerprint::{BadFingerprint, HostKeyPolicy, HostKeyVerdict, fingerprint, parse_pin, server_fingerprint};
pub use tunnel::Tunnel;
pub use uri::{LibvirtUri, Mode, SshTarget, UriError};

/// Default remote socket of the system daemon.
pub const SYSTEM_SOCKET: &str = "/var/run/libvirt/libvirt-sock";

/// Machine-readable cause of an [`SshError`], usable as a condition reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SshErrorReason {
    /// The server's host key does not match the pinned fingerprint.
    HostKeyMismatch,
    /// No fingerprint pinned and no insecure opt-out.
    HostKeyNotPinned,
    /// The server refused our key.
    AuthenticationFailed,
    /// TCP connect, SSH handshake or timeout failure, or the connection died.
    ConnectionFailed,
    /// The `ssh-privatekey` Secret value could not be decoded.
    InvalidPrivateKey,
    /// The configured `hostKeyFingerprint` is malformed.
    InvalidHostKeyFingerprint,
    /// The local tunnel socket could not be set up, or the remote socket refused a channel.
    TunnelFailed,
}

impl SshErrorReason {
    /// CamelCase name, as used for condition reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            SshErrorReason::HostKeyMismatch => "HostKeyMismatch",
            SshErrorReason::HostKeyNotPinned => "HostKeyNotPinned",
            SshErrorReason::AuthenticationFailed => "AuthenticationFailed",
            SshErrorReason::ConnectionFailed => "ConnectionFailed",
            SshErrorReason::InvalidPrivateKey => "InvalidPrivateKey",
            SshErrorReason::InvalidHostKeyFingerprint => "InvalidHostKeyFingerprint",
            SshErrorReason::TunnelFailed => "TunnelFailed",
        }
    }
}

impl fmt::Display for SshErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An SSH transport failure. Messages are safe to put in conditions and logs: they never contain
/// private key material.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// See [`SshErrorReason::HostKeyMismatch`].
    #[error("host key of {host} does not match hostKeyFingerprint: server presented {observed}, expected {expected}")]
    HostKeyMismatch {
        /// `host:port`.
        host: String,
        /// Configured pin.
        expected: String,
        /// What the server presented.
        observed: String,
    },
    /// See [`SshErrorReason::HostKeyNotPinned`].
    #[error(
        "host key of {host} is not pinned: server presented {observed}; verify it out of band and set \
         hostKeyFingerprint to it"
    )]
    HostKeyNotPinned {
        /// `host:port`.
        host: String,
        /// What the server presented.
        observed: String,
    },
    /// See [`SshErrorReason::AuthenticationFailed`].
    #[error("public key authentication as {user} on {host} failed: {detail}")]
    AuthenticationFailed {
        /// Login user.
        user: String,
        /// `host:port`.
        host: String,
        /// What happened (no key material).
        detail: String,
    },
    /// See [`SshErrorReason::ConnectionFailed`].
    #[error("SSH connection to {host} failed: {detail}")]
    ConnectionFailed {
        /// `host:port`.
        host: String,
        /// What happened.
        detail: String,
    },
    /// See [`SshErrorReason::InvalidPrivateKey`].
    #[error("ssh-privatekey is not usable: {0}")]
    InvalidPrivateKey(&'static str),
    /// See [`SshErrorReason::InvalidHostKeyFingerprint`].
    #[error(transparent)]
    InvalidHostKeyFingerprint(#[from] BadFingerprint),
    /// See [`SshErrorReason::TunnelFailed`].
    #[error("libvirt tunnel: {0}")]
    TunnelFailed(String),
}

impl SshError {
    /// Condition reason for this error.
    pub fn reason(&self) -> SshErrorReason {
        match self {
            SshError::HostKeyMismatch { .. } => SshErrorReason::HostKeyMismatch,
            SshError::HostKeyNotPinned { .. } => SshErrorReason::HostKeyNotPinned,
            SshError::AuthenticationFailed { .. } => SshErrorReason::AuthenticationFailed,
            SshError::ConnectionFailed { .. } => SshErrorReason::ConnectionFailed,
            SshError::InvalidPrivateKey(_) => SshErrorReason::InvalidPrivateKey,
            SshError::InvalidHostKeyFingerprint(_) => SshErrorReason::InvalidHostKeyFingerprint,
            SshError::TunnelFailed(_) => SshErrorReason::TunnelFailed,
        }
    }

    /// The host key fingerprint the server presented, when the refusal was about it.
    pub fn observed_fingerprint(&self) -> Option<&str> {
        match self {
            SshError::HostKeyMismatch { observed, .. } | SshError::HostKeyNotPinned { observed, .. } => Some(observed),
            _ => None,
        }
    }
}

/// A client private key, decoded in memory. `Debug` never shows secret material.
#[derive(Clone)]
pub struct ClientKey(Arc<PrivateKey>);

impl ClientKey {
    /// Decode the Secret's `ssh-privatekey` bytes. Passphrase-protected keys are refused.
    pub fn from_secret_bytes(bytes: &[u8]) -> Result<Self, SshError> {
        let text = std::str::from_utf8(bytes).map_err(|_| SshError::InvalidPrivateKey("not UTF-8 text"))?;
        // russh matches the BEGIN line exactly, so normalise CRLF and surrounding whitespace.
        let text: String = text.lines().map(|l| format!("{}\n", l.trim())).collect();
        if !text.contains("-----BEGIN ") {
            return Err(SshError::InvalidPrivateKey(
                "no PEM or OpenSSH '-----BEGIN ... PRIVATE KEY-----' block found",
            ));
        }
        match russh::keys::decode_secret_key(&text, None) {
            Ok(key) => Ok(ClientKey(Arc::new(key))),
            // Deliberately fixed messages: decoder errors can quote offsets or symbols of the input.
            Err(russh::keys::Error::KeyIsEncrypted) => Err(SshError::InvalidPrivateKey(
                "the key is passphrase-protected; store an unencrypted key",
            )),
            Err(russh::keys::Error::UnsupportedKeyType { .. }) | Err(russh::keys::Error::UnknownAlgorithm(_)) => {
                Err(SshError::InvalidPrivateKey("unsupported key type"))
            }
            Err(_) => Err(SshError::InvalidPrivateKey(
                "not a valid OpenSSH or PEM private key (expected ed25519, ecdsa or rsa)",
            )),
        }
    }

    /// Fingerprint of the public half (safe to log).
    pub fn public_fingerprint(&self) -> String {
        fingerprint(self.0.public_key())
    }
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientKey({}, {})", self.0.algorithm(), self.public_fingerprint())
    }
}

/// Everything needed to reach one host.
#[derive(Clone, Debug)]
pub struct SshOptions {
    /// Where to connect (from the parsed URI).
    pub target: SshTarget,
    /// How to judge the host key.
    pub host_key: HostKeyPolicy,
    /// Client key.
    pub key: ClientKey,
    /// Bound on TCP connect + handshake + authentication.
    pub connect_timeout: Duration,
    /// Keepalive period on an idle connection.
    pub keepalive_interval: Duration,
    /// Unanswered keepalives before the connection is declared dead.
    pub keepalive_max: usize,
}

impl SshOptions {
    /// Options with defaults: 10 s connect timeout, 15 s keepalive, 3 misses.
    pub fn new(target: SshTarget, host_key: HostKeyPolicy, key: ClientKey) -> Self {
        SshOptions {
            target,
            host_key,
            key,
            connect_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(15),
            keepalive_max: 3,
        }
    }
}

/// russh handler that records the host key verdict for [`SshSession::connect`] to report.
struct Verifier {
    policy: HostKeyPolicy,
    seen: Arc<OnceLock<(String, HostKeyVerdict)>>,
}

impl client::Handler for Verifier {
    type Error = russh::Error;

    async fn check_server_key(&mut self, key: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let observed = server_fingerprint(key);
        let verdict = self.policy.check(&observed);
        let ok = verdict == HostKeyVerdict::Accepted;
        // Only the first (initial-kex) verdict is recorded; on rekey a changed key is still refused.
        let _ = self.seen.set((observed, verdict));
        Ok(ok)
    }
}

/// One authenticated SSH connection to a host; cheap to clone and share.
#[derive(Clone)]
pub struct SshSession {
    handle: Arc<client::Handle<Verifier>>,
    host_fingerprint: String,
    target: SshTarget,
}

impl fmt::Debug for SshSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshSession")
            .field("target", &self.target.to_string())
            .field("host_fingerprint", &self.host_fingerprint)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl SshSession {
    /// Connect, verify the host key (before authenticating) and authenticate.
    pub async fn connect(opts: &SshOptions) -> Result<Self, SshError> {
        let host = opts.target.socket_addr();
        match tokio::time::timeout(opts.connect_timeout, Self::connect_inner(opts, &host)).await {
            Ok(result) => result,
            Err(_) => Err(SshError::ConnectionFailed {
                host,
                detail: format!("timed out after {:?}", opts.connect_timeout),
            }),
        }
    }

    async fn connect_inner(opts: &SshOptions, host: &str) -> Result<Self, SshError> {
        let config = client::Config {
            keepalive_interval: Some(opts.keepalive_interval),
            keepalive_max: opts.keepalive_max,
            nodelay: true,
            ..client::Config::default()
        };
        let seen = Arc::new(OnceLock::new());
        let verifier = Verifier {
            policy: opts.host_key.clone(),
            seen: seen.clone(),
        };
        let connected = client::connect(Arc::new(config), host, verifier).await;
        // The verdict takes precedence over whatever error russh reports for the refusal.
        let host_fingerprint = match seen.get() {
            Some((observed, HostKeyVerdict::Mismatch { expected })) => {
                return Err(SshError::HostKeyMismatch {
                    host: host.to_string(),
                    expected: expected.clone(),
                    observed: observed.clone(),
                });
            }
            Some((observed, HostKeyVerdict::NotPinned)) => {
                return Err(SshError::HostKeyNotPinned {
                    host: host.to_string(),
                    observed: observed.clone(),
                });
            }
            Some((observed, HostKeyVerdict::Accepted)) => Some(observed.clone()),
            None => None,
        };
        let mut handle = connected.map_err(|e| SshError::ConnectionFailed {
            host: host.to_string(),
            detail: e.to_string(),
        })?;
        let host_fingerprint = host_fingerprint.ok_or_else(|| SshError::ConnectionFailed {
            host: host.to_string(),
            detail: "handshake finished without a host key check".into(),
        })?;

        let auth_failed = |detail: String| SshError::AuthenticationFailed {
            user: opts.target.user.clone(),
            host: host.to_string(),
            detail,
        };
        let hash_alg = if opts.key.0.algorithm().is_rsa() {
            handle
                .best_supported_rsa_hash()
                .await
                .map_err(|e| SshError::ConnectionFailed {
                    host: host.to_string(),
                    detail: e.to_string(),
                })?
                .flatten()
        } else {
            None
        };
        let key = PrivateKeyWithHashAlg::new(opts.key.0.clone(), hash_alg);
        let result = handle
            .authenticate_publickey(opts.target.user.clone(), key)
            .await
            .map_err(|e| auth_failed(format!("server closed the connection during authentication ({e})")))?;
        if !result.success() {
            return Err(auth_failed(format!(
                "server refused key {} (is its public key in authorized_keys?)",
                opts.key.public_fingerprint()
            )));
        }
        tracing::debug!(target = %opts.target, host_key = %host_fingerprint, "ssh session established");
        Ok(SshSession {
            handle: Arc::new(handle),
            host_fingerprint,
            target: opts.target.clone(),
        })
    }

    /// [`SshSession::connect`], retrying only [`SshErrorReason::ConnectionFailed`] with exponential
    /// backoff (`first_delay`, doubling, capped at 30 s) for at most `attempts` tries in total.
    /// Host key and authentication refusals are returned at once: retrying cannot fix them, and
    /// repeated failed logins would only trip the server's defences.
    pub async fn connect_with_backoff(
        opts: &SshOptions,
        attempts: u32,
        first_delay: Duration,
    ) -> Result<Self, SshError> {
        let mut delay = first_delay;
        let mut attempt = 1;
        loop {
            match Self::connect(opts).await {
                Err(e) if e.reason() == SshErrorReason::ConnectionFailed && attempt < attempts => {
                    tracing::debug!(target = %opts.target, attempt, error = %e, ?delay, "ssh connect failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// The fingerprint the server presented (and that passed the policy).
    pub fn host_fingerprint(&self) -> &str {
        &self.host_fingerprint
    }

    /// The host this session talks to.
    pub fn target(&self) -> &SshTarget {
        &self.target
    }

    /// True once the connection is gone (disconnect, network failure, keepalive timeout).
    pub fn is_closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// Expose `remote_socket` (see [`remote_socket_path`]) as a local unix socket.
    /// `local_dir_parent` is where the private directory is created (default: the system temp dir).
    pub async fn open_tunnel(
        &self,
        remote_socket: &str,
        local_dir_parent: Option<&std::path::Path>,
    ) -> Result<Tunnel, SshError> {
        Tunnel::open(self.clone(), remote_socket, local_dir_parent).await
    }

    /// Open one `direct-streamlocal@openssh.com` channel to `remote_socket`.
    pub async fn open_streamlocal(&self, remote_socket: &str) -> Result<russh::ChannelStream<client::Msg>, SshError> {
        let channel = self
            .handle
            .channel_open_direct_streamlocal(remote_socket)
            .await
            .map_err(|e| {
                SshError::TunnelFailed(format!(
                    "opening a channel to {remote_socket} on {} failed: {e}",
                    self.target
                ))
            })?;
        Ok(channel.into_stream())
    }

    /// Politely disconnect. Other clones of this session become closed too.
    pub async fn disconnect(&self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "bye", "en")
            .await;
    }
}

/// The remote libvirt socket for `mode`: the system socket, or for a session daemon the
/// caller-supplied path (typically `$XDG_RUNTIME_DIR/libvirt/libvirt-sock` of the login user,
/// which cannot be discovered without running a remote command). The override, when given,
/// wins in both modes; it must be absolute and contain no `..`.
pub fn remote_socket_path(mode: Mode, override_path: Option<&str>) -> Result<String, SshError> {
    match (mode, override_path) {
        (_, Some(p)) if p.starts_with('/') && !p.split('/').any(|s| s == "..") && !p.contains('\0') => {
            Ok(p.to_string())
        }
        (_, Some(p)) => Err(SshError::TunnelFailed(format!(
            "remote socket path {p:?} must be absolute, without '..'"
        ))),
        (Mode::System, None) => Ok(SYSTEM_SOCKET.to_string()),
        (Mode::Session, None) => Err(SshError::TunnelFailed(
            "a /session URI needs the remote socket path (e.g. /run/user/<uid>/libvirt/libvirt-sock)".into(),
        )),
    }
}

#[cfg(test)]
mod testsshd;
