//! Reading the world for one ScheduledMachine reconcile: the spec's validity, our Machine (from
//! the watch cache), our bootstrap and infrastructure objects, and the Machine's Node.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams},
    runtime::reflector::{ObjectRef, Store},
};

use super::{
    CORDONED_BY_ANNOTATION, Error,
    expectations::Expectations,
    objects::{self, SCHEDULED_MACHINE_LABEL},
    overrides,
    plan::{MachineSeen, NodeSeen, Observed, Timing, Validity},
    reclaim, taints,
};
use crate::{
    api::{
        LibvirtHost, ScheduledMachine,
        capi::MachineView,
        libvirt_host::PressureReason,
        scheduled_machine::{CreatedObjectReference, EndPolicy, Reason, ScheduledMachineSpec, ScheduledReason},
    },
    reconcile::{ApiError, Context},
    schedule::{Margins, Schedule, parse_duration},
};

/// Annotation the kubelet puts on static (mirror) pods; a drain cannot evict them.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Validate the spec and evaluate the schedule at `now`, with the lead time (`auto` learns from
/// `history`, the status's provisioning durations) and the end policy. The schedule comes back
/// too: the window's edge is looked up from it only when a window is about to start.
#[must_use]
pub fn validity(spec: &ScheduledMachineSpec, history: &[String], now: DateTime<Utc>) -> (Validity, Option<Schedule>) {
    let parsed = objects::validate(spec)
        .map_err(|e| (Reason::from(e.reason()), e.to_string()))
        .and_then(|()| Schedule::parse(&spec.schedule).map_err(|e| (e.reason().into(), format!("spec.{e}"))))
        .and_then(|schedule| {
            let drain = parse_duration("spec.nodeDrainTimeout", &spec.node_drain_timeout);
            let graceful = parse_duration("spec.gracefulShutdownTimeout", &spec.graceful_shutdown_timeout);
            match (drain, graceful) {
                (Ok(d), Ok(g)) => Ok((schedule, d, g)),
                (Err(e), _) | (_, Err(e)) => Err((e.reason().into(), e.to_string())),
            }
        });
    match parsed {
        Ok((schedule, drain_timeout, graceful_timeout)) => {
            let history: Vec<Duration> = history.iter().filter_map(|d| parse_duration("", d).ok()).collect();
            let lead = schedule.lead_time().resolve(&history);
            let drain_before_end = spec.schedule.end_policy == EndPolicy::DrainBeforeEnd;
            let margins = Margins {
                lead,
                drain_ahead: if drain_before_end {
                    graceful_timeout
                } else {
                    Duration::ZERO
                },
            };
            let timing = Timing {
                plan: schedule.plan(now, margins),
                lead: spec.schedule.lead_time.is_some().then_some(lead),
                edge: None,
                drain_before_end,
                drain_timeout,
                graceful_timeout,
            };
            (Validity::Valid(timing), Some(schedule))
        }
        Err((reason, message)) => (Validity::Invalid { reason, message }, None),
    }
}

/// The opening edge a new window's record is measured from: the open run's start, or the next
/// opening during the lead time.
fn window_edge(validity: &mut Validity, schedule: Option<&Schedule>, now: DateTime<Utc>) {
    if let (Validity::Valid(timing), Some(schedule)) = (validity, schedule) {
        timing.edge = if timing.plan.open {
            schedule.last_opening(now)
        } else {
            timing.plan.next_edge
        };
    }
}

/// Let the override annotations decide a valid schedule's state; a malformed one makes the
/// spec invalid.
fn with_overrides(sm: &ScheduledMachine, now: DateTime<Utc>, validity: &mut Validity) -> overrides::Overrides {
    match overrides::read(sm.annotations(), now) {
        Ok(read) => {
            if let Validity::Valid(timing) = validity {
                timing.plan = overrides::apply(timing.plan, read.forced.as_ref());
            }
            read
        }
        Err(message) => {
            *validity = Validity::Invalid {
                reason: ScheduledReason::InvalidOverride.into(),
                message,
            };
            overrides::Overrides::default()
        }
    }
}

/// The host, among `hosts`, that names this ScheduledMachine's LibvirtMachine as the spot
/// machine it reclaims.
pub fn reclaim_request(hosts: &Store<LibvirtHost>, sm: &ScheduledMachine, machine: &str) -> Option<reclaim::Request> {
    let namespace = sm.namespace();
    let name = sm.name_any();
    hosts.state().iter().find_map(|host| {
        let victim = host.status.as_ref()?.reclaim.as_ref()?.victim.as_ref()?;
        let policy = host.spec.reclaim.as_ref()?;
        if host.namespace() != namespace || victim.scheduled_machine != name || victim.machine != machine {
            return None;
        }
        Some(reclaim::Request {
            host: host.name_any(),
            reason: PressureReason::parse(&victim.reason)?,
            message: victim.message.clone(),
            // The host refuses to name victims while these cannot be read.
            drain_timeout: parse_duration("", &policy.drain_timeout).ok()?,
            cool_down: parse_duration("", &policy.cool_down).ok()?,
        })
    })
}

/// Gather everything [`super::plan::decide`] needs. `hosts` is the LibvirtHost cache, when
/// LibvirtHosts are served.
pub async fn observe(
    sm: &ScheduledMachine,
    ctx: &Context,
    machines: &Store<DynamicObject>,
    hosts: Option<&Store<LibvirtHost>>,
    expectations: &Expectations,
) -> Result<Observed, Error> {
    let name = sm.name_any();
    let namespace = sm.namespace().unwrap_or_default();
    let now = ctx.clock.now();
    let refs = objects::references(&name, &sm.spec, ctx.capi);
    let history = sm
        .status
        .as_ref()
        .map_or(&[][..], |s| s.provisioning_durations.as_slice());
    let (mut validity, schedule) = validity(&sm.spec, history, now);
    let read = with_overrides(sm, now, &mut validity);

    let machine_ref = ObjectRef::new_with(&name, ctx.capi.machine()).within(&namespace);
    let uid = sm.uid().unwrap_or_default();
    let cached = machines.get(&machine_ref);
    if cached.is_some() {
        expectations.settled(&uid);
    }
    let machine = match cached {
        Some(obj) if is_ours(&obj, &name) => Some(MachineSeen::from(MachineView::decode(&obj, ctx.capi)?)),
        Some(_) => {
            validity = conflict(&refs.machine);
            None
        }
        // Created a moment ago, not in the cache yet: as it was created.
        None if expectations.awaiting(&uid, Instant::now()) => Some(MachineSeen::default()),
        None => None,
    };
    let (bootstrap_exists, infrastructure_exists) = if machine.is_some() {
        // While our Machine exists CAPI owns its bootstrap and infrastructure objects.
        (refs.bootstrap.is_some(), true)
    } else {
        leftovers(sm, ctx, &refs, expectations, &mut validity).await?
    };

    if machine.is_none() {
        // Only a window about to be created needs its edge (finding it scans back).
        window_edge(&mut validity, schedule.as_ref(), now);
    }
    let wanted_active = matches!(&validity, Validity::Valid(t) if t.plan.wanted);
    let node = match machine.as_ref().and_then(|m| m.node_name.clone()) {
        Some(node_name) => node_seen(ctx, &node_name, &namespace, &name, wanted_active).await?,
        None => None,
    };
    let reclaim_request = hosts.and_then(|hosts| reclaim_request(hosts, sm, &refs.infrastructure.name));
    Ok(Observed {
        now,
        generation: sm.metadata.generation,
        deleting: sm.metadata.deletion_timestamp.is_some(),
        enabled: sm.spec.schedule.enabled,
        kill_switch: sm.spec.kill_switch,
        validity,
        refs,
        machine,
        bootstrap_exists,
        infrastructure_exists,
        node,
        node_taints: sm.spec.node_taints.clone(),
        forced: read.forced,
        expired_overrides: read.expired,
        reclaim_request,
    })
}

/// Whether the bootstrap and infrastructure objects of a ScheduledMachine without a Machine
/// exist (two GETs, skipped while they are known to be absent), so leftovers can be removed.
async fn leftovers(
    sm: &ScheduledMachine,
    ctx: &Context,
    refs: &objects::CreatedRefs,
    expectations: &Expectations,
    validity: &mut Validity,
) -> Result<(bool, bool), Error> {
    let uid = sm.uid().unwrap_or_default();
    if expectations.known_absent(&uid) {
        return Ok((false, false));
    }
    let (name, namespace) = (sm.name_any(), sm.namespace().unwrap_or_default());
    let bootstrap = match &refs.bootstrap {
        Some(r) => exists_as_ours(ctx, &namespace, r, &name, validity).await?,
        None => false,
    };
    let infrastructure = exists_as_ours(ctx, &namespace, &refs.infrastructure, &name, validity).await?;
    // A name conflict or an unserved kind is not an absence: it is looked at again.
    if !bootstrap && !infrastructure && matches!(validity, Validity::Valid(_)) {
        expectations.found_absent(&uid);
    }
    Ok((bootstrap, infrastructure))
}

/// Whether `obj` carries our label, i.e. was created (or adopted) for ScheduledMachine `name`.
pub fn is_ours(obj: &DynamicObject, name: &str) -> bool {
    obj.labels().get(SCHEDULED_MACHINE_LABEL).is_some_and(|v| v == name)
}

fn conflict(r: &CreatedObjectReference) -> Validity {
    Validity::Invalid {
        reason: ScheduledReason::NameConflict.into(),
        message: format!(
            "a {} named {:?} exists that this ScheduledMachine did not create (no {SCHEDULED_MACHINE_LABEL} label); rename one of them",
            r.kind, r.name
        ),
    }
}

/// Whether the object `r` exists and is ours; one that exists but is not ours is a conflict.
async fn exists_as_ours(
    ctx: &Context,
    namespace: &str,
    r: &CreatedObjectReference,
    name: &str,
    validity: &mut Validity,
) -> Result<bool, Error> {
    let resource = match ctx.kinds.resolve(&r.api_version, &r.kind).await {
        Ok(resource) => resource,
        Err(err) => {
            // A kind that is not installed cannot have objects; say so instead of failing.
            *validity = Validity::Invalid {
                reason: ScheduledReason::KindNotServed.into(),
                message: err.to_string(),
            };
            return Ok(false);
        }
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &resource);
    match api.get_opt(&r.name).await.map_err(ApiError::read(&r.kind))? {
        Some(obj) if is_ours(&obj, name) => Ok(true),
        Some(_) => {
            *validity = conflict(r);
            Ok(false)
        }
        None => Ok(false),
    }
}

/// The Node and, when a drain may be needed, how many pods remain to evict.
async fn node_seen(
    ctx: &Context,
    node_name: &str,
    namespace: &str,
    name: &str,
    wanted_active: bool,
) -> Result<Option<NodeSeen>, Error> {
    let Some(node) = ctx.caches.nodes.get_cluster_scoped(node_name).await else {
        return Ok(None);
    };
    let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
    let cordoned_by_us = node
        .annotations()
        .get(CORDONED_BY_ANNOTATION)
        .is_some_and(|v| *v == format!("{namespace}/{name}"));
    // Counting pods costs a list; only a shutdown needs it.
    let pods_to_evict = if wanted_active {
        0
    } else {
        evictable_pods(ctx, node_name).await?.len()
    };
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Ok(Some(NodeSeen {
        name: node_name.to_owned(),
        owned_taints: taints::parse_owned(
            node.annotations()
                .get(taints::OWNED_TAINTS_ANNOTATION)
                .map(String::as_str),
        ),
        resource_version: node.resource_version(),
        taints: node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default(),
        ready,
        cordoned,
        cordoned_by_us,
        pods_to_evict,
    }))
}

/// Pods on `node_name` that a drain must evict: not DaemonSet-managed, not mirror pods, not finished.
pub async fn evictable_pods(ctx: &Context, node_name: &str) -> Result<Vec<Pod>, Error> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={node_name}"));
    let list = pods.list(&params).await.map_err(ApiError::read("Pods"))?;
    Ok(list.items.into_iter().filter(must_evict).collect())
}

fn must_evict(pod: &Pod) -> bool {
    let daemonset = pod
        .owner_references()
        .iter()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let mirror = pod.annotations().contains_key(MIRROR_POD_ANNOTATION);
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !(daemonset || mirror || finished)
}

impl Observed {
    /// What is observed once a create has succeeded: the Machine as it was created, and the
    /// objects it refers to.
    #[must_use]
    pub fn as_created(&self) -> Self {
        Self {
            machine: Some(MachineSeen::default()),
            bootstrap_exists: self.refs.bootstrap.is_some(),
            infrastructure_exists: true,
            ..self.clone()
        }
    }
}
