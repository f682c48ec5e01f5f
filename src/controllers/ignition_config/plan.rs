//! The pure half of the controller: from what was read to the data Secret and status to write.
//!
//! Nothing here performs I/O, so every decision (which reason, whether to write, what stays
//! latched) is unit-tested without an API server.

use std::collections::BTreeMap;

use k8s_openapi::{
    ByteString,
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time},
};
use kube::{Resource, ResourceExt};

use crate::{
    api::{
        CLUSTER_NAME_LABEL,
        condition::{self, DesiredCondition, Status},
        ignition_config::{
            BootstrapInitialization, ConfigCondition, ConfigReason, IgnitionConfig, IgnitionConfigStatus, Reason,
        },
    },
    ignition::{self, MAX_CONFIG_BYTES},
};

/// `type` of the bootstrap data Secret, as the CAPI contract requires.
pub const DATA_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// Key of the data Secret (and optionally of the source Secret) naming the payload format.
pub const FORMAT_KEY: &str = "format";
/// Key of the data Secret holding the bootstrap data.
pub const VALUE_KEY: &str = "value";
/// The only format the data Secret carries.
pub const FORMAT_IGNITION: &str = "ignition";
/// The source format translated with [`ignition::butane::translate`].
pub const FORMAT_BUTANE: &str = "butane";

/// Bootstrap data produced from a valid source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    /// The Ignition JSON: the source bytes unchanged for Ignition, the translation for Butane.
    pub json: Vec<u8>,
    /// Its Ignition spec version.
    pub version: String,
    /// Whether it was translated from Butane.
    pub from_butane: bool,
}

/// Why no bootstrap data can be written. Messages name Secrets, keys, sizes, positions and
/// versions, never the content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The source Secret does not exist.
    SecretNotFound {
        /// Secret name.
        secret: String,
    },
    /// The source Secret lacks the key.
    KeyNotFound {
        /// Secret name.
        secret: String,
        /// The missing key.
        key: String,
    },
    /// The source Secret's `format` is neither `ignition` nor `butane`.
    UnsupportedFormat {
        /// Secret name.
        secret: String,
    },
    /// Validation or translation failed.
    Invalid {
        /// Secret name.
        secret: String,
        /// Key read.
        key: String,
        /// The library's error (content-free by construction).
        error: Box<ignition::Error>,
    },
    /// A Secret with the data Secret's name exists and is not ours.
    Conflict {
        /// The data Secret name.
        name: String,
    },
}

impl Problem {
    /// The condition reason.
    #[must_use]
    pub fn reason(&self) -> Reason {
        match self {
            Self::SecretNotFound { .. } => ConfigReason::SourceSecretNotFound.into(),
            Self::KeyNotFound { .. } => ConfigReason::SourceKeyNotFound.into(),
            Self::UnsupportedFormat { .. } => ConfigReason::UnsupportedFormat.into(),
            Self::Invalid { error, .. } => error.reason().into(),
            Self::Conflict { .. } => ConfigReason::DataSecretConflict.into(),
        }
    }

    /// The condition message.
    #[must_use]
    pub fn message(&self) -> String {
        match self {
            Self::SecretNotFound { secret } => {
                format!("source Secret {secret:?} does not exist in this namespace; waiting for it")
            }
            Self::KeyNotFound { secret, key } => format!("source Secret {secret:?} has no key {key:?}"),
            Self::UnsupportedFormat { secret } => format!(
                "source Secret {secret:?} has a {FORMAT_KEY:?} key that is neither {FORMAT_IGNITION:?} nor {FORMAT_BUTANE:?}"
            ),
            Self::Invalid { secret, key, error } => format!("source Secret {secret:?} key {key:?}: {error}"),
            Self::Conflict { name } => format!(
                "Secret {name:?} already exists and is not owned by this IgnitionConfig; it is left alone (delete or \
                 rename it to let the bootstrap data be written)"
            ),
        }
    }
}

/// Whether the source Secret asks for Butane translation: its `format` key, trimmed,
/// case-insensitive. `None` when the key holds something else.
fn source_is_butane(data: &BTreeMap<String, ByteString>) -> Option<bool> {
    let Some(format) = data.get(FORMAT_KEY) else {
        return Some(false);
    };
    let format = String::from_utf8_lossy(&format.0);
    let format = format.trim();
    if format.eq_ignore_ascii_case(FORMAT_BUTANE) {
        Some(true)
    } else if format.eq_ignore_ascii_case(FORMAT_IGNITION) {
        Some(false)
    } else {
        None
    }
}

/// Validate (or translate) the source Secret's payload. `source` is `None` when the Secret
/// does not exist.
///
/// # Errors
/// The [`Problem`] that prevents writing bootstrap data.
pub fn payload(secret: &str, key: &str, source: Option<&Secret>) -> Result<Payload, Problem> {
    let Some(source) = source else {
        return Err(Problem::SecretNotFound {
            secret: secret.to_owned(),
        });
    };
    let empty = BTreeMap::new();
    let data = source.data.as_ref().unwrap_or(&empty);
    let Some(bytes) = data.get(key) else {
        return Err(Problem::KeyNotFound {
            secret: secret.to_owned(),
            key: key.to_owned(),
        });
    };
    let invalid = |error| Problem::Invalid {
        secret: secret.to_owned(),
        key: key.to_owned(),
        error: Box::new(error),
    };
    match source_is_butane(data) {
        None => Err(Problem::UnsupportedFormat {
            secret: secret.to_owned(),
        }),
        Some(true) => {
            let translated = ignition::butane::translate(&bytes.0).map_err(invalid)?;
            if translated.json.len() > MAX_CONFIG_BYTES {
                return Err(invalid(ignition::Error::TooLarge {
                    size: translated.json.len(),
                    limit: MAX_CONFIG_BYTES,
                }));
            }
            Ok(Payload {
                json: translated.json,
                version: translated.version,
                from_butane: true,
            })
        }
        Some(false) => {
            let validated = ignition::validate(&bytes.0).map_err(invalid)?;
            Ok(Payload {
                json: bytes.0.clone(),
                version: validated.version,
                from_butane: false,
            })
        }
    }
}

/// A digest of the fields the controller sets on a data Secret.
pub type Fingerprint = [u8; 32];

/// The fingerprint of `desired`, a data Secret as [`data_secret`] builds it. Its serialization
/// is deterministic (fields in declaration order, maps sorted).
#[must_use]
pub fn fingerprint(desired: &Secret) -> Fingerprint {
    use sha2::Digest;
    sha2::Sha256::digest(serde_json::to_vec(desired).unwrap_or_default()).into()
}

/// The Secret with the data Secret's name, as found.
#[derive(Clone, Debug, PartialEq)]
pub enum Existing {
    /// No such Secret.
    Absent,
    /// Not in the synced Secret cache, nor written by us: created rather than applied, so a
    /// Secret of that name that appeared meanwhile is not taken over.
    Unseen,
    /// It carries an ownerRef to this IgnitionConfig.
    Ours(Box<Secret>),
    /// Ours, not read again: unchanged since it was known to hold what the fingerprint says.
    Unchanged(Fingerprint),
    /// Someone else's: never overwritten.
    Foreign,
}

impl Existing {
    /// Classify `found` against the IgnitionConfig's `uid`.
    #[must_use]
    pub fn classify(found: Option<Secret>, uid: &str) -> Self {
        match found {
            None => Self::Absent,
            Some(s) if s.owner_references().iter().any(|r| r.uid == uid) => Self::Ours(Box::new(s)),
            Some(_) => Self::Foreign,
        }
    }
}

/// What a reconcile found.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// The IgnitionConfig or its Cluster is paused.
    Paused,
    /// Everything needed to decide.
    Active {
        /// The payload, or why there is none.
        source: Result<Payload, Problem>,
        /// The data Secret as it is.
        existing: Existing,
        /// The cluster name for the label, when known.
        cluster_name: Option<String>,
    },
}

/// The decision of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The data Secret to apply, when it must change.
    pub write: Option<Secret>,
    /// The fingerprint of the data Secret as it must be (written now, or found so).
    pub fingerprint: Option<Fingerprint>,
    /// The status (written only when it differs from the current one).
    pub status: IgnitionConfigStatus,
}

/// The data Secret for `config`: same name and namespace, contract type, `value` + `format`,
/// cluster-name label when known, controller ownerRef to the IgnitionConfig.
#[must_use]
pub fn data_secret(config: &IgnitionConfig, payload: &Payload, cluster_name: Option<&str>) -> Secret {
    let owner = OwnerReference {
        api_version: IgnitionConfig::api_version(&()).into_owned(),
        kind: IgnitionConfig::kind(&()).into_owned(),
        name: config.name_any(),
        uid: config.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let labels = cluster_name.map(|c| BTreeMap::from([(CLUSTER_NAME_LABEL.to_owned(), c.to_owned())]));
    Secret {
        metadata: ObjectMeta {
            name: Some(config.name_any()),
            namespace: config.namespace(),
            labels,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        type_: Some(DATA_SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([
            (VALUE_KEY.to_owned(), ByteString(payload.json.clone())),
            (FORMAT_KEY.to_owned(), ByteString(FORMAT_IGNITION.as_bytes().to_vec())),
        ])),
        ..Secret::default()
    }
}

/// Whether `existing` lacks anything `desired` sets. Fields others added (extra keys, labels)
/// are left alone; a label we no longer want is removed by the apply only if we set it.
#[must_use]
pub fn differs(existing: &Secret, desired: &Secret) -> bool {
    let empty = BTreeMap::new();
    let have = existing.data.as_ref().unwrap_or(&empty);
    let data_differs = desired.data.iter().flatten().any(|(k, v)| have.get(k) != Some(v));
    let labels_differ = desired
        .labels()
        .iter()
        .any(|(k, v)| existing.labels().get(k) != Some(v));
    let owner_differs = desired.owner_references().iter().any(|want| {
        !existing
            .owner_references()
            .iter()
            .any(|r| r.uid == want.uid && r.controller == want.controller)
    });
    existing.type_ != desired.type_ || data_differs || labels_differ || owner_differs
}

/// Whether the one-time contract signal has been given.
fn latched(current: &IgnitionConfigStatus) -> bool {
    current.ready
        || current
            .initialization
            .as_ref()
            .and_then(|i| i.data_secret_created)
            .unwrap_or(false)
}

/// Paused: only the `Paused` condition changes.
fn paused(current: IgnitionConfigStatus, generation: Option<i64>, now: &Time) -> Plan {
    let paused = DesiredCondition::new(
        ConfigCondition::Paused,
        Status::True,
        ConfigReason::Paused,
        crate::reconcile::owner::PAUSED_MESSAGE,
    );
    let status = IgnitionConfigStatus {
        conditions: condition::merge(&current.conditions, &paused, now, generation),
        observed_generation: generation,
        ..current
    };
    Plan {
        write: None,
        fingerprint: None,
        status,
    }
}

/// Decide the data Secret write and the status. Pure.
#[must_use]
pub fn plan(config: &IgnitionConfig, observation: &Observation, now: &Time) -> Plan {
    let current = config.status.clone().unwrap_or_default();
    let generation = config.metadata.generation;
    let Observation::Active {
        source,
        existing,
        cluster_name,
    } = observation
    else {
        return paused(current, generation, now);
    };
    let not_paused = DesiredCondition::new(ConfigCondition::Paused, Status::False, ConfigReason::NotPaused, "");
    let name = config.name_any();
    let outcome = source.as_ref().map_err(Clone::clone).and_then(|p| match existing {
        Existing::Foreign => Err(Problem::Conflict { name: name.clone() }),
        Existing::Absent | Existing::Unseen | Existing::Ours(_) | Existing::Unchanged(_) => Ok(p),
    });
    let mut wanted = None;
    let (write, ready_condition, ready_now) = match outcome {
        Ok(p) => {
            let desired = data_secret(config, p, cluster_name.as_deref());
            let print = fingerprint(&desired);
            wanted = Some(print);
            let write = match existing {
                Existing::Ours(s) if !differs(s, &desired) => None,
                Existing::Unchanged(held) if *held == print => None,
                _ => Some(desired),
            };
            let origin = if p.from_butane { ", translated from Butane" } else { "" };
            let message = format!(
                "data Secret {name:?} holds Ignition {} ({} bytes{origin})",
                p.version,
                p.json.len()
            );
            let ready = DesiredCondition::new(
                ConfigCondition::Ready,
                Status::True,
                ConfigReason::DataSecretCreated,
                message,
            );
            (write, ready, true)
        }
        Err(problem) => {
            let ready = DesiredCondition::new(
                ConfigCondition::Ready,
                Status::False,
                problem.reason(),
                problem.message(),
            );
            (None, ready, false)
        }
    };
    let created = latched(&current) || ready_now;
    let status = IgnitionConfigStatus {
        ready: created,
        data_secret_name: created.then_some(name),
        initialization: Some(BootstrapInitialization {
            data_secret_created: Some(created),
        }),
        conditions: condition::merge_all(&current.conditions, &[not_paused, ready_condition], now, generation),
        observed_generation: generation,
    };
    Plan {
        write,
        fingerprint: wanted,
        status,
    }
}

#[cfg(test)]
mod tests;
