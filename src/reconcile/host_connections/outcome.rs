//! What connecting to or calling a host can give: why it cannot be used (a [`Failure`] with a
//! typed host reason), and the shapes of the answers ([`Reach`], [`HostCall`]).

use std::sync::Arc;

use super::Connection;
use crate::{
    api::libvirt_host::HostReason,
    libvirt::{
        hypervisor::HypervisorError,
        ssh::{SshError, SshErrorReason},
    },
};

/// Reading the SSH key Secret failed at the Kubernetes API (not: the Secret is missing).
#[derive(Debug, thiserror::Error)]
#[error("cannot read Secret {namespace}/{name}: {source}")]
pub struct SecretReadError {
    /// Secret namespace.
    pub namespace: String,
    /// Secret name.
    pub name: String,
    /// API error.
    #[source]
    pub source: kube::Error,
}

/// Why a host could not be connected or used; safe to show (no key material).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Condition reason.
    pub reason: HostReason,
    /// Condition message.
    pub message: String,
    /// The SSH host key fingerprint the server presented, when one was seen.
    pub observed_fingerprint: Option<String>,
}

impl Failure {
    /// A failure without an observed fingerprint.
    pub fn new(reason: HostReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            observed_fingerprint: None,
        }
    }
}

impl From<SshError> for Failure {
    fn from(e: SshError) -> Self {
        Self {
            reason: ssh_reason(e.reason()),
            observed_fingerprint: e.observed_fingerprint().map(str::to_owned),
            message: e.to_string(),
        }
    }
}

impl From<HypervisorError> for Failure {
    fn from(e: HypervisorError) -> Self {
        Self::new(hypervisor_reason(&e), e.to_string())
    }
}

/// The host condition reason of an SSH transport failure.
#[must_use]
pub const fn ssh_reason(r: SshErrorReason) -> HostReason {
    match r {
        SshErrorReason::HostKeyMismatch => HostReason::HostKeyMismatch,
        SshErrorReason::HostKeyNotPinned => HostReason::HostKeyNotPinned,
        SshErrorReason::AuthenticationFailed => HostReason::AuthenticationFailed,
        SshErrorReason::ConnectionFailed => HostReason::ConnectionFailed,
        SshErrorReason::InvalidPrivateKey => HostReason::InvalidPrivateKey,
        SshErrorReason::InvalidHostKeyFingerprint => HostReason::InvalidHostKeyFingerprint,
        SshErrorReason::TunnelFailed => HostReason::TunnelFailed,
    }
}

/// The host condition reason of a libvirt failure.
#[must_use]
pub const fn hypervisor_reason(e: &HypervisorError) -> HostReason {
    match e {
        HypervisorError::ConnectionFailed { .. } => HostReason::ConnectionFailed,
        HypervisorError::AuthenticationFailed { .. } => HostReason::AuthenticationFailed,
        HypervisorError::HypervisorUnavailable { .. } => HostReason::HypervisorUnavailable,
        HypervisorError::NotFound { .. } => HostReason::NotFound,
        HypervisorError::AlreadyExists { .. } => HostReason::AlreadyExists,
        HypervisorError::StoragePoolNotFound { .. } => HostReason::StoragePoolNotFound,
        HypervisorError::BaseImageNotFound { .. } => HostReason::BaseImageNotFound,
        HypervisorError::InvalidInput(_) => HostReason::InvalidSpec,
        HypervisorError::Unsupported { .. } => HostReason::Unsupported,
        HypervisorError::Libvirt { .. } => HostReason::LibvirtError,
    }
}

/// Whether a failed host call may succeed when retried, and whether it lost the connection.
pub trait Transient {
    /// True for connection trouble and unclassified libvirt errors.
    fn is_transient(&self) -> bool;

    /// True when the call failed because the connection is gone: only then is it rebuilt (a
    /// libvirt error on a working connection is no reason for a new SSH handshake).
    fn lost_connection(&self) -> bool;
}

impl Transient for HypervisorError {
    fn is_transient(&self) -> bool {
        Self::is_transient(self)
    }

    fn lost_connection(&self) -> bool {
        matches!(self, Self::ConnectionFailed { .. })
    }
}

/// Whether a host could be used: its connection, or why not.
pub enum Reach {
    /// The open connection.
    Open(Arc<Connection>),
    /// Why the host cannot be used now.
    Unusable(Failure),
}

impl Reach {
    /// The connection, or why there is none.
    ///
    /// # Errors
    /// The failure of an unusable host.
    pub fn into_open(self) -> Result<Arc<Connection>, Failure> {
        match self {
            Self::Open(conn) => Ok(conn),
            Self::Unusable(failure) => Err(failure),
        }
    }
}

/// What a call on a host gave.
#[derive(Debug)]
pub enum HostCall<T, E> {
    /// The work ran on the host; `fingerprint` is the SSH host key the connection presented.
    Ran {
        /// What the work returned.
        result: Result<T, E>,
        /// The host key fingerprint, for SSH hosts.
        fingerprint: Option<String>,
    },
    /// The host could not be used, or the blocking task died.
    Unreachable(Failure),
}
