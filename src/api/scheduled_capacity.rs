//! `ScheduledCapacity`: a MachineDeployment's or MachineSet's `spec.replicas` that follows a
//! schedule, `onReplicas` while it is on and `offReplicas` while it is off.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{condition::Condition, scheduled_machine::ScheduleSpec};

/// Desired state of a ScheduledCapacity.
#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "5spot.finos.org",
    version = "v1alpha1",
    kind = "ScheduledCapacity",
    plural = "scheduledcapacities",
    namespaced,
    status = "ScheduledCapacityStatus",
    shortname = "scap",
    category = "caplv",
    doc = "A Cluster API MachineDeployment's or MachineSet's replica count that follows a schedule.",
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.targetRef.name",
        description = "The MachineDeployment or MachineSet whose replicas follow the schedule"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.desiredReplicas",
        description = "The replica count the schedule wants now"
    ),
    printcolumn(
        name = "InSchedule",
        type_ = "boolean",
        json_path = ".status.inSchedule",
        description = "Whether the schedule is on now"
    ),
    printcolumn(
        name = "Next",
        type_ = "string",
        json_path = ".status.nextTransition",
        description = "When the wanted count or the window next changes (UTC)"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledCapacitySpec {
    /// The MachineDeployment or MachineSet, in this namespace, whose `spec.replicas` follows
    /// the schedule. Only that field is written, with server-side apply and never by force.
    pub target_ref: CapacityTargetReference,
    /// When the target runs `onReplicas`: day and hour lists or cron with a duration, with
    /// timezone, exclusions and inclusions, as a ScheduledMachine's schedule. `leadTime` raises
    /// the count that much before the window opens (`auto` is zero here: there is no
    /// provisioning history); `endPolicy` does not apply. `enabled: false` holds it at
    /// `offReplicas`.
    pub schedule: ScheduleSpec,
    /// `spec.replicas` while the schedule is on.
    #[schemars(range(min = 0))]
    pub on_replicas: i32,
    /// `spec.replicas` while the schedule is off.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub off_replicas: i32,
}

/// The object a ScheduledCapacity scales: a Cluster API MachineDeployment or MachineSet.
#[derive(KubeSchema, Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.kind == 'MachineDeployment' || self.kind == 'MachineSet'").message("targetRef.kind must be MachineDeployment or MachineSet"))]
#[serde(rename_all = "camelCase")]
pub struct CapacityTargetReference {
    /// `cluster.x-k8s.io/v1beta1` or `cluster.x-k8s.io/v1beta2`. Either names the same object:
    /// the manager reads and writes it at the contract version the cluster serves.
    #[schemars(regex(pattern = r"^cluster\.x-k8s\.io/v1beta[12]$"))]
    pub api_version: String,
    /// `MachineDeployment` or `MachineSet`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the object, in the ScheduledCapacity's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Observed state of a ScheduledCapacity.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledCapacityStatus {
    /// Whether the window (or an override annotation) is on now; `leadTime` raises the count
    /// before this turns true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_schedule: Option<bool>,
    /// The replica count the schedule wants now: `onReplicas` or `offReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// When the wanted count or `inSchedule` next changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_transition: Option<Time>,
    /// `Ready`, `ScheduleValid`, `ReplicasApplied`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

crate::condition_names! {
    /// Condition types of a ScheduledCapacity.
    pub enum CapacityCondition {
        /// The target has the replica count the schedule wants (reason `InSchedule` or
        /// `OutsideSchedule`), or the reason why not.
        Ready,
        /// The schedule and the override annotations are usable.
        ScheduleValid,
        /// The replica count was applied to the target.
        ReplicasApplied,
    }
}

crate::condition_names! {
    /// A ScheduledCapacity's own reasons; [`CapacityReasons`] adds the schedule engine's.
    pub enum CapacityReason {
        /// `Ready`: the schedule is on and the target has `onReplicas`.
        InSchedule,
        /// `Ready`: the window opens within `leadTime` and the target has `onReplicas` already.
        AheadOfWindow,
        /// `Ready`: the schedule is off (or disabled) and the target has `offReplicas`.
        OutsideSchedule,
        /// `ScheduleValid`: the schedule is usable.
        ScheduleValid,
        /// `ScheduleValid`: a force-on-until or force-off-until annotation that is not an instant.
        InvalidOverride,
        /// `ReplicasApplied`: the target's `spec.replicas` is ours and has the wanted value.
        Applied,
        /// `ReplicasApplied`: another field manager owns the target's `spec.replicas`; not forced.
        FieldConflict,
        /// `ReplicasApplied`: the target does not exist.
        TargetNotFound,
        /// `ReplicasApplied`: the target is not a Cluster API MachineDeployment or MachineSet,
        /// or is a MachineSet a MachineDeployment controls.
        InvalidTarget,
        /// `ReplicasApplied`: nothing is applied while the schedule cannot be read.
        ScheduleInvalid,
    }
}

crate::condition_reasons! {
    /// The reason of a ScheduledCapacity condition: its own, or why its schedule was refused.
    pub enum CapacityReasons {
        /// One of the ScheduledCapacity's own.
        Own(CapacityReason),
        /// The schedule engine refused `spec.schedule`.
        Schedule(crate::schedule::Reason),
    }
}
