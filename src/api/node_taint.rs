//! Node taints a ScheduledMachine puts on its Node, as finos/5-spot's `spec.nodeTaints`.
//!
//! Keys, values and effects are validated as the Kubernetes API validates a Node's taints
//! (a qualified name, a label value, one of three effects); keys under the prefixes Kubernetes
//! and this project reserve are refused.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A qualified name: an optional DNS-subdomain prefix and `/`, then up to 63 characters.
pub const TAINT_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A label value: empty, or up to 63 characters starting and ending alphanumeric.
pub const TAINT_VALUE_PATTERN: &str = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";
/// Key prefixes a ScheduledMachine may not taint with: the kubelet's, Kubernetes' and ours.
pub const RESERVED_TAINT_PREFIXES: [&str; 4] = [
    "kubernetes.io/",
    "node.kubernetes.io/",
    "node-role.kubernetes.io/",
    "5spot.finos.org/",
];

/// One taint for the Node.
#[derive(KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!['kubernetes.io/', 'node.kubernetes.io/', 'node-role.kubernetes.io/', '5spot.finos.org/'].exists(p, self.key.startsWith(p))").message(kube::core::Message::Expression("'key ' + self.key + ' uses a reserved prefix'".into())))]
#[serde(rename_all = "camelCase")]
pub struct NodeTaint {
    /// The taint key, a qualified name such as `spot.example.com/ephemeral`.
    #[schemars(length(min = 1, max = 316), regex(pattern = TAINT_KEY_PATTERN))]
    pub key: String,
    /// The taint value, a label value (may be empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = TAINT_VALUE_PATTERN))]
    pub value: Option<String>,
    /// What the taint does to pods that do not tolerate it.
    pub effect: TaintEffect,
}

/// The effects Kubernetes knows.
#[derive(schemars::JsonSchema, Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaintEffect {
    /// No new pod is scheduled unless it tolerates the taint.
    NoSchedule,
    /// The scheduler avoids the Node for pods that do not tolerate it.
    PreferNoSchedule,
    /// Pods that do not tolerate it are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The wire form.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }

    /// The effect named `s`, if Kubernetes knows it.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        [Self::NoSchedule, Self::PreferNoSchedule, Self::NoExecute]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
}

impl NodeTaint {
    /// The reserved prefix this taint's key uses, if any.
    #[must_use]
    pub fn reserved_prefix(&self) -> Option<&'static str> {
        RESERVED_TAINT_PREFIXES.into_iter().find(|p| self.key.starts_with(p))
    }
}
