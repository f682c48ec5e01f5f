//! The Kubernetes permissions each controller family needs, as data: the single source for the
//! Helm chart's RBAC (`caplv-manager rbac --out-dir helm/caplv/files/rbac` writes one rule file
//! per family, with each rule's reason as a comment) and for the integration tests, which check
//! every request the manager made against these rules.
//!
//! No wildcards. Leader election's Lease rules are separate ([`LEADER_ELECTION`]), and so is
//! minting tokens for the workload ServiceAccount ([`WORKLOAD_ACCESS`]): the chart grants both in
//! the release namespace only.

use std::{fmt::Write as _, path::Path};

use crate::{controllers::Family, reconcile::DEFAULT_WORKLOAD_SERVICE_ACCOUNT};

/// One RBAC rule with the reason it exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// API groups ("" is core).
    pub groups: &'static [&'static str],
    /// Resources, `plural` or `plural/subresource`.
    pub resources: &'static [&'static str],
    /// Only these objects, when not empty.
    pub resource_names: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Why the manager needs it.
    pub why: &'static str,
}

const READ: &[&str] = &["get", "list", "watch"];

const fn rule(
    groups: &'static [&'static str],
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
    why: &'static str,
) -> Rule {
    Rule {
        groups,
        resources,
        resource_names: &[],
        verbs,
        why,
    }
}

/// What every family needs.
pub const COMMON: &[Rule] = &[
    rule(
        &["events.k8s.io"],
        &["events"],
        &["create", "patch"],
        "Events on the objects the controllers reconcile",
    ),
    rule(
        &["cluster.x-k8s.io"],
        &["clusters", "machines"],
        READ,
        "owner Clusters (paused, names) and Machines (bootstrap data, nodes)",
    ),
];

/// Leader election, granted in the manager's own namespace.
pub const LEADER_ELECTION: &[Rule] = &[rule(
    &["coordination.k8s.io"],
    &["leases"],
    &["get", "create", "update", "patch"],
    "the leader-election Lease",
)];

/// Minting tokens for the workload ServiceAccount (CAPLV family), granted in that
/// ServiceAccount's namespace only. The chart substitutes its `workloadAccess.serviceAccountName`
/// for the default name.
pub const WORKLOAD_ACCESS: &[Rule] = &[Rule {
    groups: &[""],
    resources: &["serviceaccounts/token"],
    resource_names: &[DEFAULT_WORKLOAD_SERVICE_ACCOUNT],
    verbs: &["create"],
    why: "mint the bound token of the <cluster>-kubeconfig Secrets, for this ServiceAccount only",
}];

/// The CAPLV family: LibvirtCluster, LibvirtHost, LibvirtMachine, SelfManagedControlPlane, CSR
/// approver, Node linker.
pub const CAPLV: &[Rule] = &[
    rule(
        &["infrastructure.cluster.x-k8s.io"],
        &["libvirtclusters", "libvirthosts", "libvirtmachines"],
        &["get", "list", "watch", "patch"],
        "the CAPLV kinds: watch them, add finalizers and spec.providerID",
    ),
    rule(
        &["infrastructure.cluster.x-k8s.io"],
        &[
            "libvirtclusters/status",
            "libvirthosts/status",
            "libvirtmachines/status",
        ],
        &["patch"],
        "their status (server-side apply)",
    ),
    rule(
        &["infrastructure.cluster.x-k8s.io"],
        &["libvirtmachinetemplates"],
        READ,
        "LibvirtMachineTemplates, whose clones' capacity goes into their status",
    ),
    rule(
        &["infrastructure.cluster.x-k8s.io"],
        &["libvirtmachinetemplates/status"],
        &["patch"],
        "status.capacity and nodeInfo for scale-from-zero (server-side apply)",
    ),
    rule(
        &["cluster.x-k8s.io"],
        &["machines"],
        &["delete"],
        "host maintenance: delete the Machines of a host's VMs, one at a time, so Cluster API drains and replaces them",
    ),
    rule(
        &["infrastructure.cluster.x-k8s.io"],
        &["libvirtmachines"],
        &["delete"],
        "host maintenance: delete a LibvirtMachine that has no owner Machine",
    ),
    rule(
        &["ipam.cluster.x-k8s.io"],
        &["ipaddressclaims"],
        &["get", "create", "delete"],
        "IPAM: claim an address per interface and pool of addressesFromPools, release it at deletion",
    ),
    rule(
        &["ipam.cluster.x-k8s.io"],
        &["ipaddresses"],
        &["get"],
        "IPAM: read the IPAddress a claim is bound to",
    ),
    rule(
        &["controlplane.cluster.x-k8s.io"],
        &["selfmanagedcontrolplanes"],
        &["get", "list", "watch", "create", "patch"],
        "SelfManagedControlPlanes: watch them, create one (server-side apply, which a real API server also authorizes as create) for a Cluster without controlPlaneRef",
    ),
    rule(
        &["controlplane.cluster.x-k8s.io"],
        &["selfmanagedcontrolplanes/status"],
        &["patch"],
        "their status (server-side apply)",
    ),
    rule(
        &["cluster.x-k8s.io"],
        &["clusters"],
        &["patch"],
        "set spec.controlPlaneRef of a Cluster that has none (never replaced or removed)",
    ),
    rule(
        &[""],
        &["secrets"],
        READ,
        "SSH keys of LibvirtHosts (watched for rotation), Machines' bootstrap data, <cluster>-kubeconfig Secrets",
    ),
    rule(
        &[""],
        &["secrets"],
        &["create", "patch"],
        "write the <cluster>-kubeconfig Secret (server-side apply, authorized as create when it makes the Secret) of a SelfManagedControlPlane",
    ),
    rule(
        &[""],
        &["nodes"],
        &["get", "list", "watch", "patch"],
        "link Nodes: providerID while empty, nodeLabels and nodeAnnotations",
    ),
    rule(
        &["certificates.k8s.io"],
        &["certificatesigningrequests"],
        READ,
        "kubelet CSRs of the machines' Nodes",
    ),
    rule(
        &["certificates.k8s.io"],
        &["certificatesigningrequests/approval"],
        &["update", "patch"],
        "approve those CSRs",
    ),
    Rule {
        groups: &["certificates.k8s.io"],
        resources: &["signers"],
        resource_names: &[
            "kubernetes.io/kube-apiserver-client-kubelet",
            "kubernetes.io/kubelet-serving",
        ],
        verbs: &["approve"],
        why: "only the two kubelet signers",
    },
];

/// The Ignition bootstrap family: IgnitionConfig.
pub const IGNITION: &[Rule] = &[
    rule(
        &["bootstrap.cluster.x-k8s.io"],
        &["ignitionconfigs"],
        &["get", "list", "watch", "patch"],
        "IgnitionConfigs",
    ),
    rule(
        &["bootstrap.cluster.x-k8s.io"],
        &["ignitionconfigs/status"],
        &["patch"],
        "their status (server-side apply)",
    ),
    rule(
        &[""],
        &["secrets"],
        &["get", "list", "watch", "create", "patch", "update"],
        "read the source Ignition and write the bootstrap data Secret",
    ),
];

/// The 5-Spot family: ScheduledMachine and ScheduledCapacity.
pub const FIVESPOT: &[Rule] = &[
    rule(
        &["5spot.finos.org"],
        &["scheduledmachines"],
        &["get", "list", "watch", "patch"],
        "ScheduledMachines and their finalizer",
    ),
    rule(
        &["5spot.finos.org"],
        &["scheduledmachines/status"],
        &["patch"],
        "their status (server-side apply)",
    ),
    rule(
        &["5spot.finos.org"],
        &["scheduledcapacities"],
        &["get", "list", "watch", "patch"],
        "ScheduledCapacities, and removing their expired override annotations",
    ),
    rule(
        &["5spot.finos.org"],
        &["scheduledcapacities/status"],
        &["patch"],
        "their status (server-side apply)",
    ),
    rule(
        &["cluster.x-k8s.io"],
        &["machinedeployments", "machinesets"],
        &["get", "list", "watch", "patch"],
        "a ScheduledCapacity's target: watch it, and set spec.replicas (server-side apply, never forced; no create, so an apply can never make one)",
    ),
    rule(
        &["cluster.x-k8s.io"],
        &["machines"],
        &["create", "patch", "delete"],
        "create the window's Machine, adopt it, remove it when the window closes",
    ),
    rule(
        &["infrastructure.cluster.x-k8s.io"],
        &["libvirtmachines"],
        &["get", "create", "delete"],
        "create the window's LibvirtMachine; remove it when no Machine owns it",
    ),
    rule(
        &["infrastructure.cluster.x-k8s.io"],
        &["libvirthosts"],
        READ,
        "learn which ScheduledMachine a LibvirtHost reclaims for its owner (status.reclaim)",
    ),
    rule(
        &["bootstrap.cluster.x-k8s.io"],
        &["ignitionconfigs"],
        &["get", "create", "delete"],
        "create the window's IgnitionConfig; remove it when no Machine owns it",
    ),
    rule(
        &[""],
        &["nodes"],
        &["get", "list", "watch", "patch"],
        "cordon (and uncordon) the worker's Node and keep its spec.nodeTaints",
    ),
    rule(&[""], &["pods"], &["list"], "find the Pods to evict when draining"),
    rule(
        &[""],
        &["pods/eviction"],
        &["create"],
        "evict them through the Eviction API, which honours PodDisruptionBudgets",
    ),
];

/// The rules of `family`.
#[must_use]
pub fn rules(family: Family) -> &'static [Rule] {
    match family {
        Family::Caplv => CAPLV,
        Family::Ignition => IGNITION,
        Family::Fivespot => FIVESPOT,
    }
}

/// The rules granted only in one namespace that `family` needs, besides [`rules`].
#[must_use]
pub fn namespaced_rules(family: Family) -> &'static [Rule] {
    match family {
        Family::Caplv => WORKLOAD_ACCESS,
        Family::Ignition | Family::Fivespot => &[],
    }
}

/// Whether `rules` allow `verb` on `resource` (`plural` or `plural.group`), `subresource` and
/// object `name` ("" for none). A rule with `resource_names` allows only requests naming one of
/// them, as RBAC does (so never a list, a watch or a create of a new object).
#[must_use]
pub fn allows(rules: &[Rule], verb: &str, resource: &str, subresource: &str, name: &str) -> bool {
    let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
    let target = if subresource.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}/{subresource}")
    };
    rules.iter().any(|r| {
        (r.resource_names.is_empty() || (!name.is_empty() && r.resource_names.contains(&name)))
            && r.groups.contains(&group)
            && r.resources.contains(&target.as_str())
            && r.verbs.contains(&verb)
    })
}

/// The requests (verb, resource, subresource, name) that the rules of `families` (plus the
/// common and leader-election rules) do not allow.
#[must_use]
pub fn uncovered<'a>(
    families: &[Family],
    requests: impl IntoIterator<Item = &'a (String, String, String, String)>,
) -> Vec<&'a (String, String, String, String)> {
    let mut all: Vec<Rule> = COMMON.iter().chain(LEADER_ELECTION).copied().collect();
    for f in families {
        all.extend_from_slice(rules(*f));
        all.extend_from_slice(namespaced_rules(*f));
    }
    requests
        .into_iter()
        .filter(|(verb, resource, sub, name)| !allows(&all, verb, resource, sub, name))
        .collect()
}

fn yaml_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// `rules` as a YAML list of PolicyRules, each preceded by its reason as a comment.
#[must_use]
pub fn render(rules: &[Rule]) -> String {
    let mut out = String::new();
    for r in rules {
        let _ = writeln!(out, "# {}", r.why);
        let _ = writeln!(out, "- apiGroups: {}", yaml_list(r.groups));
        let _ = writeln!(out, "  resources: {}", yaml_list(r.resources));
        if !r.resource_names.is_empty() {
            let _ = writeln!(out, "  resourceNames: {}", yaml_list(r.resource_names));
        }
        let _ = writeln!(out, "  verbs: {}", yaml_list(r.verbs));
    }
    out
}

/// The files `rbac --out-dir` writes: (file name, contents).
#[must_use]
pub fn files() -> Vec<(String, String)> {
    let header =
        "# Generated by `caplv-manager rbac --out-dir helm/caplv/files/rbac` from src/cmd/rbac.rs; do not edit.\n";
    let mut out = vec![
        ("common.yaml".to_owned(), format!("{header}{}", render(COMMON))),
        (
            "leader-election.yaml".to_owned(),
            format!("{header}{}", render(LEADER_ELECTION)),
        ),
        (
            "workload-access.yaml".to_owned(),
            format!("{header}{}", render(WORKLOAD_ACCESS)),
        ),
    ];
    for f in Family::ALL {
        out.push((format!("{}.yaml", f.as_str()), format!("{header}{}", render(rules(f)))));
    }
    out
}

/// `caplv-manager rbac`: print every rule file, or write them into `out_dir`.
///
/// # Errors
/// When a file cannot be written.
pub fn run(out_dir: Option<&Path>) -> anyhow::Result<()> {
    for (name, text) in files() {
        match out_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                std::fs::write(dir.join(&name), text)?;
            }
            None => print!("---\n# {name}\n{text}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wildcards_and_every_rule_explained() {
        for f in files() {
            assert!(!f.1.contains("\"*\""), "{}", f.0);
        }
        for r in COMMON
            .iter()
            .chain(LEADER_ELECTION)
            .chain(WORKLOAD_ACCESS)
            .chain(CAPLV)
            .chain(IGNITION)
            .chain(FIVESPOT)
        {
            assert!(!r.why.is_empty());
            assert!(!r.verbs.is_empty() && !r.resources.is_empty());
        }
    }

    #[test]
    fn coverage_checks_group_resource_subresource_and_verb() {
        let req = |v: &str, r: &str, s: &str| (v.to_owned(), r.to_owned(), s.to_owned(), "x".to_owned());
        let asked = [
            req("patch", "libvirtmachines.infrastructure.cluster.x-k8s.io", "status"),
            req("create", "pods", "eviction"),
            req("delete", "nodes", ""),
        ];
        let missing = uncovered(&[Family::Caplv, Family::Fivespot], &asked);
        assert_eq!(missing, [&asked[2]]);
        let missing = uncovered(&[Family::Ignition], &asked);
        assert_eq!(missing.len(), 3);
    }

    #[test]
    fn resource_names_restrict_a_rule_to_the_named_objects() {
        let token = |name: &str| {
            (
                "create".to_owned(),
                "serviceaccounts".to_owned(),
                "token".to_owned(),
                name.to_owned(),
            )
        };
        let asked = [token(DEFAULT_WORKLOAD_SERVICE_ACCOUNT), token("default"), token("")];
        let missing = uncovered(&[Family::Caplv], &asked);
        assert_eq!(
            missing,
            [&asked[1], &asked[2]],
            "only the workload ServiceAccount's tokens"
        );
        assert_eq!(uncovered(&[Family::Fivespot], &asked).len(), 3);
    }

    #[test]
    fn the_chart_rule_files_match_the_code() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("helm/caplv/files/rbac");
        for (name, text) in files() {
            let committed = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            assert!(
                committed == text,
                "helm/caplv/files/rbac/{name} is out of date: run `cargo run -- rbac --out-dir helm/caplv/files/rbac`"
            );
        }
    }
}
