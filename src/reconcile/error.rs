//! The Kubernetes API failures every controller can meet in a reconcile. They are retried after
//! `--error-requeue`; a write that lost an optimistic-concurrency race (409) is retried at once.
//! Problems with the user's input are never errors: they are conditions.

use crate::api::capi::DecodeError;

/// A failed API call, or a Cluster API object of an unexpected shape.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Reading an object failed.
    #[error("cannot read {what}: {source}")]
    Read {
        /// What was read, e.g. `Secret "worker-ignition"`.
        what: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// Writing an object (or its status) failed.
    #[error("cannot write {what}: {source}")]
    Write {
        /// What was written, e.g. `status`.
        what: String,
        /// API error.
        #[source]
        source: kube::Error,
    },
    /// A Cluster API object has an unexpected shape.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

impl ApiError {
    /// Wrap a failed read of `what`.
    pub fn read(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Read { what, source }
    }

    /// Wrap a failed write of `what`.
    pub fn write(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Write { what, source }
    }

    /// A bounded reason for metrics and logs.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Read { .. } => "ReadFailed",
            Self::Write { .. } => "WriteFailed",
            Self::Decode(_) => "DecodeFailed",
        }
    }

    /// Whether a create found the object already there (HTTP 409, `AlreadyExists`).
    #[must_use]
    pub fn already_exists(&self) -> bool {
        matches!(self, Self::Write { source: kube::Error::Api(e), .. } if e.code == 409 && e.reason == "AlreadyExists")
    }

    /// Whether a write lost an optimistic-concurrency race (HTTP 409).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Write { source: kube::Error::Api(e), .. } if e.code == 409)
    }
}

impl super::ReconcileError for ApiError {
    fn reason(&self) -> &'static str {
        Self::reason(self)
    }

    fn is_conflict(&self) -> bool {
        Self::is_conflict(self)
    }
}

/// `api.get_opt(name)`, its failure naming `what`.
///
/// # Errors
/// The read failed.
pub async fn get_opt<K>(api: &kube::Api<K>, name: &str, what: &str) -> Result<Option<K>, ApiError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(ApiError::read(format!("{what} {name:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(kube::core::Status::failure("m", "Conflict").with_code(code).boxed())
    }

    #[test]
    fn only_a_write_409_is_a_conflict() {
        assert!(ApiError::write("status")(api(409)).is_conflict());
        assert!(!ApiError::write("status")(api(500)).is_conflict());
        assert!(!ApiError::read("Secret")(api(409)).is_conflict());
        assert_eq!(ApiError::read("Secret \"s\"")(api(500)).reason(), "ReadFailed");
        assert!(
            ApiError::write("status")(api(409))
                .to_string()
                .starts_with("cannot write status: ")
        );
    }
}
