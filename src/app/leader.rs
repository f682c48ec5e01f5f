//! Leader election on a coordination.k8s.io Lease: the controllers run only while this replica
//! holds it; losing it stops them cleanly and the replica waits to win it again.

use std::future::Future;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Which Lease to hold, and as whom.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity in the Lease.
    pub identity: String,
    /// Seconds the Lease stays valid without renewal.
    pub duration_seconds: u64,
}

/// Failures of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lease manager could not be set up or failed for good.
    #[error("leader election on Lease {namespace}/{name} failed: {source}")]
    Lease {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The underlying error.
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    /// The background task renewing the Lease stopped unexpectedly.
    #[error("the task renewing Lease {0} stopped unexpectedly")]
    RenewalStopped(String),
}

/// Run `work` each time the Lease is acquired, cancelling the token it gets when the Lease is
/// lost or `shutdown` fires. Returns after `shutdown`, having released the Lease.
///
/// # Errors
/// When the Lease cannot be managed at all.
pub async fn run_while_leader<F, Fut>(
    client: Client,
    config: &LeaderConfig,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    mut work: F,
) -> Result<(), Error>
where
    F: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    let lease_error = |source| Error::Lease {
        namespace: config.namespace.clone(),
        name: config.name.clone(),
        source,
    };
    // Renew a third of the way before expiry, as client-go does with its defaults.
    let grace = (config.duration_seconds / 3).max(1);
    let manager = LeaseManagerBuilder::new(client, &config.name)
        .with_namespace(&config.namespace)
        .with_identity(&config.identity)
        .with_duration(config.duration_seconds)
        .with_grace(grace)
        .with_field_manager("caplv-manager/leader-election")
        .build()
        .await
        .map_err(lease_error)?;
    let (mut leading, renewal) = manager.watch().await;
    let lease = format!("{}/{}", config.namespace, config.name);
    loop {
        tracing::info!(lease, identity = config.identity, "waiting to acquire the leader lease");
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = leading.wait_for(|is_leader| *is_leader) => {
                if changed.is_err() {
                    return Err(Error::RenewalStopped(lease));
                }
            }
        }
        tracing::info!(lease, "acquired the leader lease; starting controllers");
        metrics.leader.set(1);
        let stop = shutdown.child_token();
        let watch_loss = {
            let mut leading = leading.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let _ = leading.wait_for(|is_leader| !*is_leader).await;
                stop.cancel();
            })
        };
        work(stop).await;
        watch_loss.abort();
        metrics.leader.set(0);
        if shutdown.is_cancelled() {
            break;
        }
        tracing::warn!(lease, "lost the leader lease; controllers stopped");
    }
    // Dropping the receiver makes the renewal task release the Lease, so a standby takes over at once.
    drop(leading);
    match renewal.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(lease_error(source)),
        Err(_) => Err(Error::RenewalStopped(lease)),
    }
}
