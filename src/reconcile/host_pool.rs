//! Host pools (pure): which LibvirtHosts a machine with `spec.hostSelector` may go to, and in
//! what order admission tries them: the least allocated first, so machines spread.

use kube::{
    ResourceExt,
    core::{Selector, SelectorExt},
};

use super::placement::{self, Resources};
use crate::api::{condition, libvirt_host::HostCondition, libvirt_host::LibvirtHost, libvirt_machine::LibvirtMachine};

/// The machine's `hostSelector` while it has no host yet; `None` once it has one (or names
/// one with `hostRef`).
///
/// # Errors
/// A selector Kubernetes would refuse (an unknown operator, `In` without values), naming the
/// field.
pub fn unbound_selector(machine: &LibvirtMachine) -> Result<Option<Selector>, String> {
    if machine.host_name().is_some() {
        return Ok(None);
    }
    let Some(selector) = machine.spec.host_selector.clone() else {
        return Ok(None);
    };
    Selector::try_from(selector)
        .map(Some)
        .map_err(|e| format!("spec.hostSelector: {e}"))
}

/// Whether `host` is in the pool of a machine waiting with `selector`: it matches, and it is
/// in `failure_domain` when the Machine names one.
#[must_use]
pub fn in_pool(host: &LibvirtHost, selector: &Selector, failure_domain: Option<&str>) -> bool {
    selector.matches(host.labels()) && failure_domain.is_none_or(|fd| host.spec.failure_domain.as_deref() == Some(fd))
}

/// Whether the unbound `machine` waits in `host`'s admission queue.
#[must_use]
pub fn queues_on(machine: &LibvirtMachine, host: &LibvirtHost) -> bool {
    machine.namespace() == host.namespace()
        && unbound_selector(machine)
            .ok()
            .flatten()
            .is_some_and(|s| s.matches(host.labels()))
}

/// Why a host of the pool cannot take machines now, if it cannot.
#[must_use]
pub fn unusable(host: &LibvirtHost) -> Option<&'static str> {
    let Some(status) = host.status.as_ref() else {
        return Some("not checked yet");
    };
    if !status.ready {
        return Some("not ready");
    }
    if host.spec.maintenance {
        return Some("in maintenance");
    }
    condition::is_true(&status.conditions, HostCondition::UnderPressure.as_str()).then_some("under pressure")
}

/// The share of what `host` offers that is committed: the larger of the vCPU and memory
/// shares; a host that offers nothing counts as full.
#[must_use]
pub fn allocated_fraction(host: &LibvirtHost, committed: Resources) -> f64 {
    let Some(offered) = placement::offered(host) else {
        return f64::INFINITY;
    };
    let share = |used: i64, of: i64| {
        if of <= 0 {
            f64::INFINITY
        } else {
            #[allow(clippy::cast_precision_loss, reason = "a share needs no more than f64's 52 bits")]
            let share = used as f64 / of as f64;
            share
        }
    };
    share(committed.vcpus, offered.vcpus).max(share(committed.memory_mib, offered.memory_mib))
}

/// `hosts` in the order admission tries them: the least allocated first, then by name.
#[must_use]
pub fn rank(mut hosts: Vec<LibvirtHost>, committed: impl Fn(&LibvirtHost) -> Resources) -> Vec<LibvirtHost> {
    let mut keyed: Vec<(f64, LibvirtHost)> = hosts
        .drain(..)
        .map(|h| (allocated_fraction(&h, committed(&h)), h))
        .collect();
    keyed.sort_by(|(a, ha), (b, hb)| a.total_cmp(b).then_with(|| ha.name_any().cmp(&hb.name_any())));
    keyed.into_iter().map(|(_, h)| h).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, labels: serde_json::Value, failure_domain: Option<&str>, vcpus: i32) -> LibvirtHost {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"uri": "test:///default", "failureDomain": failure_domain,
                     "reservedResources": {"vcpus": 0, "memoryMB": 0}},
            "status": {"ready": true, "capacity": {"totalVCPUs": vcpus, "totalMemoryMB": 16384,
                       "availableVCPUs": vcpus, "availableMemoryMB": 16384}}
        }))
        .unwrap()
    }

    fn machine(spec_host: serde_json::Value) -> LibvirtMachine {
        let mut spec = serde_json::json!({
            "rootDisk": {"baseImage": "b", "storagePool": "p", "size": "20Gi"},
            "network": {"type": "network", "name": "default", "addresses": ["10.0.0.2/24"]}
        });
        json_patch::merge(&mut spec, &spec_host);
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtMachine",
            "metadata": {"name": "m", "namespace": "ns"}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn a_selector_picks_matching_hosts_in_the_failure_domain() {
        let m = machine(serde_json::json!({"hostSelector": {"matchLabels": {"pool": "lab"}}}));
        let selector = unbound_selector(&m).unwrap().unwrap();
        let (a, b, other) = (
            host("a", serde_json::json!({"pool": "lab"}), Some("rack-1"), 8),
            host("b", serde_json::json!({"pool": "lab"}), Some("rack-2"), 8),
            host("c", serde_json::json!({"pool": "desk"}), Some("rack-1"), 8),
        );
        assert!(in_pool(&a, &selector, None) && in_pool(&b, &selector, None));
        assert!(!in_pool(&other, &selector, None));
        assert!(in_pool(&a, &selector, Some("rack-1")) && !in_pool(&b, &selector, Some("rack-1")));
        assert!(queues_on(&m, &a) && !queues_on(&m, &other));
        // Bound (by admission or by hostRef): no longer a pool machine.
        let mut bound = m.clone();
        bound.status = Some(serde_json::from_value(serde_json::json!({"hostRef": {"name": "a"}})).unwrap());
        assert_eq!(unbound_selector(&bound).unwrap().map(|s| s.to_string()), None);
        assert_eq!(bound.host_name(), Some("a"));
        let named = machine(serde_json::json!({"hostRef": {"name": "h"}}));
        assert!(unbound_selector(&named).unwrap().is_none());
    }

    #[test]
    fn a_malformed_selector_is_named() {
        let m =
            machine(serde_json::json!({"hostSelector": {"matchExpressions": [{"key": "pool", "operator": "Near"}]}}));
        let err = unbound_selector(&m).unwrap_err();
        assert!(err.starts_with("spec.hostSelector: "), "{err}");
    }

    #[test]
    fn the_least_allocated_host_goes_first() {
        let (small, big) = (
            host("small", serde_json::json!({}), None, 4),
            host("big", serde_json::json!({}), None, 16),
        );
        // 2 of 4 vCPUs on small (half), 4 of 16 on big (a quarter).
        let committed = |h: &LibvirtHost| Resources {
            vcpus: if h.name_any() == "small" { 2 } else { 4 },
            memory_mib: 1024,
        };
        let ranked: Vec<String> = rank(vec![small.clone(), big.clone()], committed)
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        assert_eq!(ranked, ["big", "small"]);
        // Equal shares: by name.
        let ranked: Vec<String> = rank(vec![small, big], |_| Resources::default())
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        assert_eq!(ranked, ["big", "small"]);
    }

    #[test]
    fn hosts_not_ready_or_under_pressure_are_passed_over() {
        let mut h = host("a", serde_json::json!({}), None, 4);
        assert_eq!(unusable(&h), None);
        h.status.as_mut().unwrap().ready = false;
        assert_eq!(unusable(&h), Some("not ready"));
    }
}
