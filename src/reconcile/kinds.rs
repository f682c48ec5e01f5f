//! Resolving `apiVersion` + `kind` from a spec to an `ApiResource` through discovery, once.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use kube::{
    Client,
    core::{ApiResource, GroupVersionKind},
    discovery,
};

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The apiVersion is not `group/version`.
    #[error("apiVersion {0:?} is not of the form group/version")]
    BadApiVersion(String),
    /// Discovery does not know the kind (CRD not installed) or failed.
    #[error("kind {kind} in {api_version} is not served: {source}")]
    NotServed {
        /// The apiVersion asked for.
        api_version: String,
        /// The kind asked for.
        kind: String,
        /// Discovery's error.
        #[source]
        source: kube::Error,
    },
}

/// A cache of resolved kinds, shared by every reconcile.
#[derive(Clone)]
pub struct KindCache {
    client: Client,
    resolved: Arc<Mutex<HashMap<GroupVersionKind, ApiResource>>>,
}

impl KindCache {
    /// An empty cache using `client` for discovery.
    #[must_use]
    pub fn new(client: Client) -> Self {
        Self {
            client,
            resolved: Arc::default(),
        }
    }

    /// The `ApiResource` for `api_version` + `kind`.
    ///
    /// # Errors
    /// When the apiVersion is malformed or the kind is not served.
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<ApiResource, Error> {
        let (group, version) = api_version
            .split_once('/')
            .ok_or_else(|| Error::BadApiVersion(api_version.to_owned()))?;
        let gvk = GroupVersionKind::gvk(group, version, kind);
        if let Some(found) = self.resolved.lock().unwrap_or_else(PoisonError::into_inner).get(&gvk) {
            return Ok(found.clone());
        }
        let (resource, _) = discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|source| Error::NotServed {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                source,
            })?;
        self.resolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(gvk, resource.clone());
        Ok(resource)
    }
}
