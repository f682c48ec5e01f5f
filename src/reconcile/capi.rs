//! Finding which Cluster API core version the cluster serves.

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::api::capi::{CapiVersion, GROUP};

/// Why CAPI core could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The discovery request failed.
    #[error("cannot list API groups: {0}")]
    Discovery(#[source] kube::Error),
    /// The group is served, but at no version we understand.
    #[error("Cluster API core is served at {served:?}, but this manager needs v1beta1 or v1beta2")]
    UnsupportedVersions {
        /// The versions the server offers.
        served: Vec<String>,
    },
}

/// The preferred CAPI core version served, or `None` when the group is not installed.
///
/// # Errors
/// When discovery fails or only unknown versions are served.
pub async fn discover(client: &Client) -> Result<Option<CapiVersion>, Error> {
    let groups = client.list_api_groups().await.map_err(Error::Discovery)?;
    let Some(group) = groups.groups.into_iter().find(|g| g.name == GROUP) else {
        return Ok(None);
    };
    let served: Vec<String> = group.versions.into_iter().map(|v| v.version).collect();
    CapiVersion::preferred(served.iter().map(String::as_str))
        .map(Some)
        .ok_or(Error::UnsupportedVersions { served })
}

/// Wait until CAPI core is installed, checking every `every`. Returns `None` when `shutdown`
/// fires first.
pub async fn wait_for(client: &Client, every: Duration, shutdown: &CancellationToken) -> Option<CapiVersion> {
    loop {
        match discover(client).await {
            Ok(Some(version)) => {
                tracing::info!(version = version.as_str(), "Cluster API core found");
                return Some(version);
            }
            Ok(None) => tracing::warn!("Cluster API core ({GROUP}) is not installed; controllers wait for it"),
            Err(err) => tracing::warn!(error = %err, "cannot use Cluster API core yet"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(every) => {}
        }
    }
}
