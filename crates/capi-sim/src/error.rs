//! One error type for the simulator; each variant names the action that failed so a log line
//! or a condition message says what the simulated core was doing.

/// Errors of the simulator's loops and helpers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What the simulator was doing.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A referenced kind is not served (yet); retried with backoff.
    #[error("kind {kind} in group {group} is not served: {detail}")]
    KindNotServed {
        /// API group of the ref.
        group: String,
        /// Kind of the ref.
        kind: String,
        /// What discovery said.
        detail: String,
    },
    /// The referenced kind's CRD has no label for the contract the simulator speaks.
    #[error("cannot find any versions matching contract {contract} for CRD {crd}")]
    NoContractVersion {
        /// e.g. `cluster.x-k8s.io/v1beta2`.
        contract: String,
        /// CRD name `<plural>.<group>`.
        crd: String,
    },
    /// An object does not have the shape the contract asks for.
    #[error("invalid object {what}: {detail}")]
    Invalid {
        /// Which object or field.
        what: String,
        /// What is wrong.
        detail: String,
    },
    /// (De)serialising JSON failed.
    #[error("{action}: {source}")]
    Json {
        /// What was being (de)serialised.
        action: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// Building a CSR failed.
    #[error("building CSR: {0}")]
    Csr(#[from] rcgen::Error),
    /// Waiting for something timed out.
    #[error("timed out: {0}")]
    Timeout(String),
}

impl Error {
    /// Wraps a client error with the action that failed.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            action: action.into(),
            source,
        }
    }

    /// Wraps a serde error with the action that failed.
    pub fn json(action: impl Into<String>, source: serde_json::Error) -> Self {
        Error::Json {
            action: action.into(),
            source,
        }
    }

    /// Shape error helper.
    pub fn invalid(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Invalid {
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// A short, bounded reason usable as a condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "ApiError",
            Error::KindNotServed { .. } => "KindNotServed",
            Error::NoContractVersion { .. } => "NoContractVersion",
            Error::Invalid { .. } => "InvalidObject",
            Error::Json { .. } => "InvalidJson",
            Error::Csr(_) => "CsrError",
            Error::Timeout(_) => "Timeout",
        }
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// HTTP status code of an API error, if the error is one.
pub(crate) fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// True if the error is a 404 from the API server.
pub(crate) fn is_not_found(err: &kube::Error) -> bool {
    api_code(err) == Some(404)
}
