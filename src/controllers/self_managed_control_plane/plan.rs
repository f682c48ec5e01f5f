//! The pure half of the controller: whether the kubeconfig Secret is ours and current, what to
//! write, the status, and when to look again. No I/O, so every decision is unit-tested.

use std::{collections::BTreeMap, time::Duration};

use chrono::{DateTime, Utc};
use k8s_openapi::{
    ByteString,
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use super::kubeconfig::{self, Access};
use crate::api::{
    CLUSTER_NAME_LABEL,
    condition::{self, DesiredCondition, Status},
    self_managed_control_plane::{
        ControlPlaneCondition, ControlPlaneInitialization, KubeconfigStatus, Reason, SelfManagedControlPlane,
        SelfManagedControlPlaneStatus,
    },
};

/// `type` of the kubeconfig Secret, as the Cluster API contract requires.
pub const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// Key holding the kubeconfig.
pub const VALUE_KEY: &str = "value";
/// When the token in the Secret was minted (RFC 3339).
pub const ISSUED_AT_ANNOTATION: &str = "selfmanagedcontrolplane.controlplane.cluster.x-k8s.io/token-issued-at";
/// When it expires (RFC 3339), as the API server reported.
pub const EXPIRES_AT_ANNOTATION: &str = "selfmanagedcontrolplane.controlplane.cluster.x-k8s.io/token-expires-at";
/// SHA-256 of the `value` written, so any edit of it (the token included) is noticed.
pub const DIGEST_ANNOTATION: &str = "selfmanagedcontrolplane.controlplane.cluster.x-k8s.io/kubeconfig-sha256";
/// How soon to retry when the workload ServiceAccount is missing: it is not watched (the
/// manager may not list ServiceAccounts), and a missing one is an install problem, not a race.
pub const SERVICE_ACCOUNT_RETRY: Duration = Duration::from_secs(30);
/// The wait before renewing a token that is due as soon as it is minted (a manager clock far
/// ahead of the API server's), so such skew can never make the controller mint in a loop.
pub const MIN_RENEW_DELAY: Duration = Duration::from_secs(30);

/// The Secret Cluster API core reads: `<cluster>-kubeconfig`.
#[must_use]
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// A minted token and its validity.
#[derive(Clone, PartialEq, Eq)]
pub struct Lease {
    /// The bearer token.
    pub token: String,
    /// When it was minted (the manager's clock).
    pub issued_at: DateTime<Utc>,
    /// When it expires (the API server's answer).
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for Lease {
    /// Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// When to mint the next token: once a third of this one's lifetime remains.
    #[must_use]
    pub fn renew_at(&self) -> DateTime<Utc> {
        self.expires_at - (self.expires_at - self.issued_at) / 3
    }
}

/// What exists under the Secret's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Nothing.
    Absent,
    /// A Secret without an ownerReference to this SelfManagedControlPlane (user-provided).
    Foreign,
    /// Ours.
    Ours {
        /// Its token, when the Secret holds exactly the kubeconfig this object would write with
        /// it (a changed server or CA, an edit or a missing annotation give `None`).
        lease: Option<Lease>,
        /// Whether type, label and controller ownerReference are as written.
        metadata_current: bool,
    },
}

fn digest(value: &[u8]) -> String {
    Sha256::digest(value).iter().map(|b| format!("{b:02x}")).collect()
}

fn timestamp(secret: &Secret, annotation: &str) -> Option<DateTime<Utc>> {
    secret.annotations().get(annotation)?.parse().ok()
}

impl Existing {
    /// Classify `secret` for the SelfManagedControlPlane with uid `owner_uid`, which would write
    /// `access` for `cluster`.
    #[must_use]
    pub fn classify(secret: Option<&Secret>, owner_uid: &str, cluster: &str, access: &Access) -> Self {
        let Some(secret) = secret else {
            return Self::Absent;
        };
        let owner = secret.owner_references().iter().find(|r| r.uid == owner_uid);
        let Some(owner) = owner else {
            return Self::Foreign;
        };
        let metadata_current = owner.controller == Some(true)
            && secret.type_.as_deref() == Some(SECRET_TYPE)
            && secret.labels().get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(cluster);
        Self::Ours {
            lease: current_lease(secret, access),
            metadata_current,
        }
    }
}

fn current_lease(secret: &Secret, access: &Access) -> Option<Lease> {
    let value = &secret.data.as_ref()?.get(VALUE_KEY)?.0;
    if secret.annotations().get(DIGEST_ANNOTATION) != Some(&digest(value)) {
        return None;
    }
    let token = kubeconfig::token(value)?;
    if kubeconfig::render(access, &token).as_bytes() != value.as_slice() {
        return None;
    }
    // Kept even when it seems to expire before it was minted: a manager clock ahead of the API
    // server's by more than the token's lifetime. `decide` still keeps it for a while, where
    // dropping it would mint again at every watch event of the Secret just written.
    Some(Lease {
        token,
        issued_at: timestamp(secret, ISSUED_AT_ANNOTATION)?,
        expires_at: timestamp(secret, EXPIRES_AT_ANNOTATION)?,
    })
}

/// What to do about the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It is not ours: never touch it.
    LeaveForeign,
    /// Its token is current; `rewrite` when its metadata needs restoring (same token).
    Keep {
        /// The token in it.
        lease: Lease,
        /// Whether to write the Secret again.
        rewrite: bool,
    },
    /// Mint a token and write the Secret: it is missing, edited, outdated or due for renewal.
    Mint,
}

/// Decide from what exists, at `now`. A token is kept until its renewal, and in any case for
/// [`MIN_RENEW_DELAY`] after it was minted.
#[must_use]
pub fn decide(existing: Existing, now: DateTime<Utc>) -> Decision {
    let min_age = chrono::Duration::from_std(MIN_RENEW_DELAY).unwrap_or_default();
    match existing {
        Existing::Foreign => Decision::LeaveForeign,
        Existing::Ours {
            lease: Some(lease),
            metadata_current,
        } if now < lease.renew_at().max(lease.issued_at + min_age) => Decision::Keep {
            lease,
            rewrite: !metadata_current,
        },
        Existing::Absent | Existing::Ours { .. } => Decision::Mint,
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The Secret to apply: the contract's name, type, label and key, a controller ownerReference to
/// `owner` (so it goes with it), and the token's times and the value's digest as annotations.
#[must_use]
pub fn secret(owner: &SelfManagedControlPlane, cluster: &str, access: &Access, lease: &Lease) -> Secret {
    let value = kubeconfig::render(access, &lease.token);
    let annotations = BTreeMap::from([
        (ISSUED_AT_ANNOTATION.to_owned(), rfc3339(lease.issued_at)),
        (EXPIRES_AT_ANNOTATION.to_owned(), rfc3339(lease.expires_at)),
        (DIGEST_ANNOTATION.to_owned(), digest(value.as_bytes())),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(cluster)),
            namespace: owner.namespace(),
            labels: Some(BTreeMap::from([(CLUSTER_NAME_LABEL.to_owned(), cluster.to_owned())])),
            annotations: Some(annotations),
            owner_references: owner.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([(VALUE_KEY.to_owned(), ByteString(value.into_bytes()))])),
        ..Secret::default()
    }
}

/// Where a reconcile ended up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The Cluster or this object is paused.
    Paused,
    /// No cluster-name label and no Cluster owner.
    NoCluster,
    /// The named Cluster does not exist.
    ClusterNotFound {
        /// Cluster name.
        cluster: String,
    },
    /// No server is known.
    NoEndpoint {
        /// Cluster name.
        cluster: String,
    },
    /// The workload ServiceAccount does not exist.
    ServiceAccountNotFound {
        /// `namespace/name`.
        service_account: String,
    },
    /// A user-provided Secret holds the name.
    Foreign {
        /// Secret name.
        secret: String,
    },
    /// Our Secret is current.
    Maintained {
        /// Secret name.
        secret: String,
        /// What it holds besides the token.
        access: Access,
        /// The token in it.
        lease: Lease,
    },
}

fn ready(outcome: &Outcome) -> Option<DesiredCondition> {
    let (holds, reason, message) = match outcome {
        Outcome::Paused => return None,
        Outcome::NoCluster => (
            false,
            Reason::WaitingForCluster,
            "no cluster.x-k8s.io/cluster-name label or Cluster owner names the Cluster yet".to_owned(),
        ),
        Outcome::ClusterNotFound { cluster } => (
            false,
            Reason::ClusterNotFound,
            format!("Cluster {cluster:?} does not exist in this namespace"),
        ),
        Outcome::NoEndpoint { cluster } => (
            false,
            Reason::NoControlPlaneEndpoint,
            format!(
                "no spec.server, and neither Cluster {cluster:?} nor its LibvirtCluster has a controlPlaneEndpoint; \
                 the kubeconfig Secret is written once one is set"
            ),
        ),
        Outcome::ServiceAccountNotFound { service_account } => (
            false,
            Reason::WorkloadServiceAccountNotFound,
            format!(
                "ServiceAccount {service_account} does not exist, so no token can be minted for the kubeconfig \
                 Secret; create it (the Helm chart does) or set --workload-service-account"
            ),
        ),
        Outcome::Foreign { secret } => (
            true,
            Reason::UserProvidedKubeconfig,
            format!(
                "Secret {secret:?} exists and is not owned by this SelfManagedControlPlane: it is used as it is and \
                 never changed (delete it to have the manager maintain one)"
            ),
        ),
        Outcome::Maintained { secret, access, .. } => (
            true,
            Reason::KubeconfigAvailable,
            format!(
                "Secret {secret:?} reaches {} as ServiceAccount {} with a token renewed before it expires",
                access.server, access.user
            ),
        ),
    };
    Some(DesiredCondition::new(
        ControlPlaneCondition::Ready,
        Status::from_bool(holds),
        reason,
        message,
    ))
}

/// The status after `outcome`. The contract fields are constant: the control plane is the
/// running cluster, initialized and ready from the start.
#[must_use]
pub fn status(
    current: &SelfManagedControlPlaneStatus,
    generation: Option<i64>,
    outcome: &Outcome,
    now: &Time,
) -> SelfManagedControlPlaneStatus {
    let desired = match ready(outcome) {
        None => vec![DesiredCondition::new(
            ControlPlaneCondition::Paused,
            Status::True,
            Reason::Paused,
            crate::reconcile::owner::PAUSED_MESSAGE,
        )],
        Some(ready) => vec![
            DesiredCondition::new(ControlPlaneCondition::Paused, Status::False, Reason::NotPaused, ""),
            ready,
        ],
    };
    let kubeconfig = match outcome {
        Outcome::Maintained { secret, access, lease } => Some(KubeconfigStatus {
            secret_name: secret.clone(),
            server: access.server.clone(),
            service_account: access.user.clone(),
            issued_at: Some(time(lease.issued_at)),
            expires_at: Some(time(lease.expires_at)),
            renew_at: Some(time(lease.renew_at())),
        }),
        Outcome::Foreign { .. } => None,
        // The Secret written before, if any, is still there.
        _ => current.kubeconfig.clone(),
    };
    SelfManagedControlPlaneStatus {
        external_managed_control_plane: true,
        initialized: true,
        ready: true,
        initialization: Some(ControlPlaneInitialization {
            control_plane_initialized: Some(true),
        }),
        kubeconfig,
        conditions: condition::merge_all(&current.conditions, &desired, now, generation),
        observed_generation: generation,
    }
}

fn time(t: DateTime<Utc>) -> Time {
    // Whole seconds, as the API server stores them, so an unchanged status compares equal.
    let seconds = t.timestamp();
    Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap_or_default())
}

/// When to reconcile again without a watch event: at the renewal, or to retry a missing
/// ServiceAccount; otherwise a change (of the Cluster, the LibvirtCluster, the Secret or this
/// object) is what is waited for.
#[must_use]
pub fn requeue(outcome: &Outcome, now: DateTime<Utc>) -> Option<Duration> {
    match outcome {
        Outcome::Maintained { lease, .. } => Some(
            (lease.renew_at() - now)
                .to_std()
                .ok()
                .filter(|d| !d.is_zero())
                .unwrap_or(MIN_RENEW_DELAY),
        ),
        Outcome::ServiceAccountNotFound { .. } => Some(SERVICE_ACCOUNT_RETRY),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
