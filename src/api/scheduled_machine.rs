//! `ScheduledMachine`: a CAPI Machine (with its bootstrap and infrastructure objects) that exists
//! only while a day/hour or cron window is open.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    common::{DURATION_PATTERN, preserve_unknown_object},
    condition::Condition,
};

/// A calendar date, `YYYY-MM-DD`.
const DATE_PATTERN: &str = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$";

/// A duration as [`DURATION_PATTERN`], or `auto`.
const LEAD_TIME_PATTERN: &str = r"^(auto|([0-9]+(\.[0-9]+)?(ms|s|m|h))+)$";

/// Desired state of a ScheduledMachine.
#[derive(CustomResource, KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[kube(
    group = "5spot.finos.org",
    version = "v1alpha1",
    kind = "ScheduledMachine",
    namespaced,
    status = "ScheduledMachineStatus",
    shortname = "sm",
    category = "caplv",
    doc = "A Cluster API worker that exists only while its schedule window is open.",
    // The name is the value of the label that ties the Machine, IgnitionConfig and
    // LibvirtMachine to their ScheduledMachine, and label values hold at most 63 characters.
    validation = Rule::new("size(self.metadata.name) <= 63").message(
        "metadata.name: at most 63 characters, as it labels the objects the ScheduledMachine creates"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase"
    ),
    printcolumn(
        name = "InSchedule",
        type_ = "boolean",
        json_path = ".status.inSchedule",
        description = "Whether the window is open now"
    ),
    printcolumn(
        name = "Next",
        type_ = "string",
        json_path = ".status.nextTransition",
        description = "When the controller next acts: provisioning starts, the window opens or closes, or the drain begins (UTC)"
    ),
    printcolumn(
        name = "Lag",
        type_ = "string",
        json_path = ".status.window.schedulableLag",
        description = "How long after the window opened its Node became schedulable"
    ),
    printcolumn(
        name = "Lead",
        type_ = "string",
        json_path = ".status.leadTime",
        description = "How long before the window provisioning starts",
        priority = 1
    ),
    printcolumn(
        name = "Machine",
        type_ = "string",
        json_path = ".status.machineRef.name",
        description = "The CAPI Machine created for the window"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(validation = Rule::new("has(self.bootstrapSpec) != has(self.bootstrapDataSecretName)").message("set exactly one of bootstrapSpec or bootstrapDataSecretName"))]
#[serde(rename_all = "camelCase")]
pub struct ScheduledMachineSpec {
    /// Name of the CAPI Cluster (same namespace) the Machine joins.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub cluster_name: String,
    /// When the machine should exist.
    pub schedule: ScheduleSpec,
    /// The infrastructure object (e.g. a LibvirtMachine) created for each window, named after this object.
    pub infrastructure_spec: InfrastructureTemplate,
    /// The bootstrap config (e.g. an IgnitionConfig) created for each window, named after this object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_spec: Option<BootstrapTemplate>,
    /// An existing bootstrap data Secret to use instead of creating a bootstrap config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub bootstrap_data_secret_name: Option<String>,
    /// Labels and annotations put on the Machine (CAPI syncs them to the Node).
    #[serde(default)]
    pub machine_template: MachineTemplateMetadata,
    /// 0-100. Higher is created first when many windows open together, and is admitted first
    /// by the infrastructure provider when capacity is short (label `5spot.finos.org/priority`).
    #[serde(default = "default_priority")]
    #[schemars(range(min = 0, max = 100))]
    pub priority: i32,
    /// Upper bound on the whole graceful removal (drain and Machine deletion).
    #[serde(default = "default_timeout")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub graceful_shutdown_timeout: String,
    /// Upper bound on draining the Node; passed on to the Machine.
    #[serde(default = "default_timeout")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub node_drain_timeout: String,
    /// Remove the machine at once, without draining, and keep it removed while true.
    #[serde(default)]
    pub kill_switch: bool,
    /// Taints put on the Node once it is Ready, and kept there: one someone removes comes
    /// back, and one dropped from this list is taken off. Taints others put on the Node are
    /// never touched; those this list owns are recorded in the Node's
    /// `5spot.finos.org/owned-taints` annotation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(t, self.exists_one(u, u.key == t.key && u.effect == t.effect))").message("each key and effect pair may appear once"))]
    pub node_taints: Vec<super::node_taint::NodeTaint>,
}

fn default_priority() -> i32 {
    50
}

fn default_timeout() -> String {
    "5m".to_owned()
}

/// When a ScheduledMachine's window is open: day and hour lists, or a cron expression with a duration.
#[derive(KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.cron) == has(self.duration)").message("cron and duration must be set together"))]
#[x_kube(validation = Rule::new("has(self.cron) ? !(has(self.daysOfWeek) || has(self.hoursOfDay)) : (has(self.daysOfWeek) && has(self.hoursOfDay))").message("set either cron with duration, or daysOfWeek with hoursOfDay"))]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// When false the machine is removed and not created again until re-enabled.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Days the window opens on: `mon`..`sun` or full names, comma lists and ranges
    /// (`mon-fri`, `fri-mon` wraps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 7))]
    pub days_of_week: Option<Vec<String>>,
    /// Hours (0-23) the window covers: comma lists and inclusive ranges; `9-17` is 09:00 to
    /// 17:59:59, and `22-6` runs overnight into the next day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 24))]
    pub hours_of_day: Option<Vec<String>>,
    /// IANA time zone the days and hours are read in, e.g. `America/New_York`.
    #[serde(default = "default_timezone")]
    #[schemars(length(min = 1, max = 64))]
    pub timezone: String,
    /// Standard 5-field cron expression for window starts, read in `timezone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub cron: Option<String>,
    /// How long each cron window lasts, e.g. `8h` or `1h30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    pub duration: Option<String>,
    /// Periods when the machine is off although the window is open: holidays, freezes. An
    /// exclusion wins over an inclusion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub exclusions: Vec<SchedulePeriod>,
    /// Extra periods when the machine is on although the window is closed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub inclusions: Vec<SchedulePeriod>,
    /// How long before the window opens provisioning starts, so the Node is schedulable at the
    /// edge: a duration up to `168h` such as `10m`, or `auto` for the median of the last five
    /// provisioning durations (`status.provisioningDurations`; zero until there is one). A Node
    /// that joins early carries the NoSchedule taint `5spot.finos.org/window-closed` until the
    /// window opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = LEAD_TIME_PATTERN))]
    pub lead_time: Option<String>,
    /// When the machine goes: `AtEdge` starts the drain when the window closes;
    /// `DrainBeforeEnd` starts it `gracefulShutdownTimeout` earlier, so the Machine is gone by
    /// the time the window closes.
    #[serde(default, skip_serializing_if = "EndPolicy::is_default")]
    pub end_policy: EndPolicy,
}

impl Default for ScheduleSpec {
    /// Enabled, in UTC, with no window yet.
    fn default() -> Self {
        Self {
            enabled: default_enabled(),
            days_of_week: None,
            hours_of_day: None,
            timezone: default_timezone(),
            cron: None,
            duration: None,
            exclusions: Vec::new(),
            inclusions: Vec::new(),
            lead_time: None,
            end_policy: EndPolicy::default(),
        }
    }
}

/// When, relative to the window's closing edge, the machine is removed.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum EndPolicy {
    /// Drain when the window closes (the machine outlives the window by the drain).
    #[default]
    AtEdge,
    /// Drain `gracefulShutdownTimeout` before the window closes, so nothing runs past it.
    DrainBeforeEnd,
}

impl EndPolicy {
    #[allow(
        clippy::trivially_copy_pass_by_ref,
        reason = "serde's skip_serializing_if passes a reference"
    )]
    fn is_default(&self) -> bool {
        *self == Self::AtEdge
    }
}

/// A period in the schedule's time zone: one whole day (`date`), or `start` to `end`. Each of
/// `start` and `end` is an RFC 3339 instant or a date; a date as `start` means the start of that
/// day, as `end` the end of it, so `{start: 2026-12-24, end: 2026-12-26}` covers three days.
#[derive(KubeSchema, Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.date) != (has(self.start) || has(self.end))").message("set either date, or start with end"))]
#[x_kube(validation = Rule::new("has(self.start) == has(self.end)").message("start and end must be set together"))]
#[serde(rename_all = "camelCase")]
pub struct SchedulePeriod {
    /// A whole day, `YYYY-MM-DD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DATE_PATTERN))]
    pub date: Option<String>,
    /// Where the period begins: RFC 3339 or `YYYY-MM-DD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 10, max = 35))]
    pub start: Option<String>,
    /// Where it ends (exclusive for an instant, inclusive for a date).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 10, max = 35))]
    pub end: Option<String>,
}

fn default_enabled() -> bool {
    true
}

fn default_timezone() -> String {
    "UTC".to_owned()
}

/// An infrastructure object to create: apiVersion and kind in `infrastructure.cluster.x-k8s.io`, and its spec.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InfrastructureTemplate {
    /// API version, in group `infrastructure.cluster.x-k8s.io`.
    #[schemars(regex(pattern = r"^infrastructure\.cluster\.x-k8s\.io/v[0-9a-z]+$"))]
    pub api_version: String,
    /// Kind, e.g. `LibvirtMachine`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
    /// The object's spec, passed through as written.
    #[schemars(schema_with = "preserve_unknown_object")]
    pub spec: serde_json::Value,
}

/// A bootstrap config to create: apiVersion and kind in `bootstrap.cluster.x-k8s.io`, and its spec.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapTemplate {
    /// API version, in group `bootstrap.cluster.x-k8s.io`.
    #[schemars(regex(pattern = r"^bootstrap\.cluster\.x-k8s\.io/v[0-9a-z]+$"))]
    pub api_version: String,
    /// Kind, e.g. `IgnitionConfig`.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
    /// The object's spec, passed through as written.
    #[schemars(schema_with = "preserve_unknown_object")]
    pub spec: serde_json::Value,
}

/// Labels and annotations for the created Machine.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct MachineTemplateMetadata {
    /// Machine labels (e.g. `node-role.kubernetes.io/worker: ""`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Machine annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Lifecycle phases of a ScheduledMachine; none is terminal.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum Phase {
    /// Provisioning ahead of the window (`leadTime`); the Node waits tainted
    /// `5spot.finos.org/window-closed` until the window opens.
    Preparing,
    /// Window open, objects being created.
    Pending,
    /// Machine exists for the open window.
    Active,
    /// Window closed or disabled; draining and removing the Machine.
    ShuttingDown,
    /// Window closed, nothing exists.
    Inactive,
    /// Schedule disabled, nothing exists.
    Disabled,
    /// Kill switch on, nothing exists.
    Terminated,
    /// Its host reclaimed it for the host's owner: being removed, then off for the host's
    /// `coolDown` (condition `Reclaimed` says why).
    Reclaimed,
    /// A problem needs attention; see conditions.
    Error,
}

impl Phase {
    /// The wire form of the phase.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Preparing => "Preparing",
            Self::Pending => "Pending",
            Self::Active => "Active",
            Self::ShuttingDown => "ShuttingDown",
            Self::Inactive => "Inactive",
            Self::Disabled => "Disabled",
            Self::Terminated => "Terminated",
            Self::Reclaimed => "Reclaimed",
            Self::Error => "Error",
        }
    }

    /// Every phase.
    pub const ALL: [Self; 9] = [
        Self::Preparing,
        Self::Pending,
        Self::Active,
        Self::ShuttingDown,
        Self::Inactive,
        Self::Disabled,
        Self::Terminated,
        Self::Reclaimed,
        Self::Error,
    ];
}

/// A reference to an object this ScheduledMachine created.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CreatedObjectReference {
    /// API version of the object.
    pub api_version: String,
    /// Kind of the object.
    pub kind: String,
    /// Name of the object (same namespace).
    pub name: String,
}

/// A reference to the Node the Machine became.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct NodeReference {
    /// Node name.
    pub name: String,
}

/// One window's timeline, for seeing whether the Node was ready at the edge.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WindowRecord {
    /// The window's opening edge (when the machine was created inside an open window whose
    /// opening is unknown, the creation time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens_at: Option<Time>,
    /// When the objects were first created for it (`leadTime` before `opensAt` at best).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_started_at: Option<Time>,
    /// When its Node was first seen Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ready_at: Option<Time>,
    /// When its Node first took pods: Ready, not cordoned, inside the window, the
    /// `5spot.finos.org/window-closed` taint gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedulable_at: Option<Time>,
    /// `schedulableAt - opensAt`, e.g. `12ms` (at the edge) or `4m10s` (late by that much).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedulable_lag: Option<String>,
}

/// A reclaim by the machine's host: why, and until when the machine stays off.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimRecord {
    /// The LibvirtHost that reclaimed the machine.
    pub host: String,
    /// `MemoryPressure` or `CPUPressure`.
    pub reason: String,
    /// The host's measurement and the limit it crossed.
    pub message: String,
    /// When this ScheduledMachine learnt of it and began removing the machine.
    pub started_at: Time,
    /// The host's bound on draining, e.g. `2m`.
    pub drain_timeout: String,
    /// How long the machine stays off once it is gone, e.g. `30m`.
    pub cool_down: String,
    /// Once the machine is gone: it stays off until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_until: Option<Time>,
}

/// Observed state of a ScheduledMachine.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledMachineStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Human-readable summary of the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether the schedule window is open now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_schedule: Option<bool>,
    /// When the window next opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_activation: Option<Time>,
    /// When the window next closes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cleanup: Option<Time>,
    /// When the controller next acts: the earliest of `nextActivation`, `nextCleanup`, the
    /// start of provisioning (`leadTime` early) and, with `DrainBeforeEnd`, of the drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_transition: Option<Time>,
    /// The CAPI Machine created for the current window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_ref: Option<CreatedObjectReference>,
    /// The bootstrap config created for the current window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_ref: Option<CreatedObjectReference>,
    /// The infrastructure object created for the current window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_ref: Option<CreatedObjectReference>,
    /// The Node the Machine joined as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<NodeReference>,
    /// Provider ID of the Machine.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// When the current graceful removal began; bounds draining and the whole removal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_started_at: Option<Time>,
    /// The lead time in effect: `spec.schedule.leadTime`, or what `auto` worked out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_time: Option<String>,
    /// How long the last windows' Machines took from creation to a Ready Node, oldest first
    /// (at most five); `leadTime: auto` uses their median.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provisioning_durations: Vec<String>,
    /// The current or most recent window: when it opened and when its Node was ready and
    /// schedulable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowRecord>,
    /// Set while the machine's host reclaims it for its owner, and through the cool-down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimRecord>,
    /// `Ready`, `ScheduleValid`, `MachineReady`, and `Reclaimed` once a host has reclaimed it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

crate::condition_names! {
    /// Condition types of a ScheduledMachine.
    pub enum ScheduledCondition {
        /// The worker is up for an open window (reason `Active`), or the phase says why not.
        Ready,
        /// The schedule and the rest of the spec are usable.
        ScheduleValid,
        /// The Machine's Node has joined.
        MachineReady,
        /// Its host reclaimed it for the host's owner (reason `MemoryPressure` or `CPUPressure`);
        /// False (`CoolDownOver`) once it may return.
        Reclaimed,
    }
}

crate::condition_names! {
    /// A ScheduledMachine's own reasons; [`Reason`] adds the schedule engine's.
    pub enum ScheduledReason {
        /// `Ready`: the window is open and the Machine runs.
        Active,
        /// `Ready`: phase Preparing.
        Preparing,
        /// `Ready`: phase Pending.
        Pending,
        /// `Ready`: phase ShuttingDown.
        ShuttingDown,
        /// `Ready`: phase Inactive.
        Inactive,
        /// `Ready`: phase Disabled.
        Disabled,
        /// `Ready`: phase Terminated.
        Terminated,
        /// `Ready`: phase Reclaimed.
        Reclaimed,
        /// `Reclaimed`: the cool-down after the last reclaim is over.
        CoolDownOver,
        /// `Ready`: phase Error.
        Error,
        /// `ScheduleValid`: the spec is usable.
        ScheduleValid,
        /// `ScheduleValid`: an object with a child's name exists that we did not create.
        NameConflict,
        /// `ScheduleValid`: a kind the spec names is not served.
        KindNotServed,
        /// `ScheduleValid`: an apiVersion names the wrong group.
        InvalidApiGroup = "InvalidAPIGroup",
        /// `ScheduleValid`: not exactly one of bootstrapSpec and bootstrapDataSecretName.
        InvalidBootstrapSource,
        /// `ScheduleValid`: a label only the controller may set.
        ReservedLabel,
        /// `ScheduleValid`: a label key or value, or an annotation key, that Kubernetes refuses.
        InvalidLabel,
        /// `ScheduleValid`: a node taint with a reserved key prefix, or listed twice.
        InvalidNodeTaint,
        /// `ScheduleValid`: a force-on-until or force-off-until annotation that is not an instant.
        InvalidOverride,
        /// `MachineReady`: no Machine exists.
        NoMachine,
        /// `MachineReady`: the Machine is being deleted.
        MachineDeleting,
        /// `MachineReady`: the Machine's Node has joined.
        MachineRunning,
        /// `MachineReady`: the Machine exists but does not run yet.
        MachineNotRunning,
    }
}

crate::condition_reasons! {
    /// The reason of a ScheduledMachine condition: its own, or why its schedule was refused.
    pub enum Reason {
        /// One of the ScheduledMachine's own.
        Own(ScheduledReason),
        /// The schedule engine refused `spec.schedule` or a duration.
        Schedule(crate::schedule::Reason),
        /// The host's pressure that reclaimed the machine.
        Pressure(crate::api::libvirt_host::PressureReason),
    }
}

impl Phase {
    /// The `Ready=False` reason of this phase.
    #[must_use]
    pub const fn reason(self) -> ScheduledReason {
        match self {
            Self::Preparing => ScheduledReason::Preparing,
            Self::Pending => ScheduledReason::Pending,
            Self::Active => ScheduledReason::Active,
            Self::ShuttingDown => ScheduledReason::ShuttingDown,
            Self::Inactive => ScheduledReason::Inactive,
            Self::Disabled => ScheduledReason::Disabled,
            Self::Terminated => ScheduledReason::Terminated,
            Self::Reclaimed => ScheduledReason::Reclaimed,
            Self::Error => ScheduledReason::Error,
        }
    }
}
