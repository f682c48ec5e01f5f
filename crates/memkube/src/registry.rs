//! The resource kinds the server knows: built-ins plus kinds registered from CRDs.

use crate::schema::CompiledSchema;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Everything the server needs to know about one group/version/resource.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group ("" for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for discovery.
    pub short_names: Vec<String>,
    /// Categories for discovery.
    pub categories: Vec<String>,
    /// Subresources: `status`, `approval`, `eviction`, `scale`, `token`.
    pub subresources: Vec<String>,
    /// Defined by a CRD (JSON-only patches, schema validation).
    pub crd: bool,
    /// Compiled schema of this version (CRDs only).
    pub schema: Option<CompiledSchema>,
    /// `additionalPrinterColumns` of this version.
    pub printer_columns: Vec<Value>,
    /// Replica paths of the `scale` subresource.
    pub scale: Option<crate::scale::ScalePaths>,
}

impl ResourceInfo {
    fn builtin(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        ResourceInfo {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            short_names: vec![],
            categories: vec![],
            subresources: vec![],
            crd: false,
            schema: None,
            printer_columns: vec![],
            scale: None,
        }
    }

    fn short(mut self, s: &[&str]) -> Self {
        self.short_names = s.iter().map(|x| x.to_string()).collect();
        self
    }

    /// A `scale` subresource at the apps/v1 paths.
    fn scalable(mut self) -> Self {
        self.subresources.push("scale".into());
        self.scale = Some(crate::scale::ScalePaths::apps());
        self
    }

    /// In the `all` category (`kubectl get all`).
    fn all(mut self) -> Self {
        self.categories = vec!["all".into()];
        self
    }

    fn subs(mut self, s: &[&str]) -> Self {
        self.subresources = s.iter().map(|x| x.to_string()).collect();
        self
    }

    /// `group/version`, or `version` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Key under which objects are stored (shared by all versions of a kind).
    pub fn store_key(&self) -> String {
        if crate::events::is_event(self) {
            return crate::events::STORE_KEY.into();
        }
        format!("{}/{}", self.group, self.plural)
    }

    /// Whether `/status` is a separate subresource.
    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    /// Whether the apiserver keeps `metadata.generation` for this kind: custom resources and
    /// CRDs, workloads, PodDisruptionBudgets, NetworkPolicies and (since 1.33) Pods. ConfigMaps,
    /// Secrets, Nodes, Namespaces, Services, Events, Leases, CSRs and RBAC objects have none.
    pub fn has_generation(&self) -> bool {
        self.crd
            || matches!(
                self.group.as_str(),
                "apps" | "policy" | "networking.k8s.io" | "apiextensions.k8s.io"
            )
            || (self.group.is_empty() && self.plural == "pods")
    }

    /// Whether an immediate DELETE answers with the deleted object (the apiserver's
    /// `ReturnDeletedObject`) rather than a `Status` of `Success`.
    pub fn returns_deleted_object(&self) -> bool {
        match self.group.as_str() {
            "" => matches!(
                self.plural.as_str(),
                "pods"
                    | "services"
                    | "namespaces"
                    | "serviceaccounts"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
                    | "resourcequotas"
                    | "podtemplates"
            ),
            "storage.k8s.io" | "resource.k8s.io" => true,
            _ => false,
        }
    }

    /// Whether the subresource exists.
    pub fn has_sub(&self, sub: &str) -> bool {
        self.subresources.iter().any(|s| s == sub)
    }
}

/// All served resources, keyed by (group, version, plural).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    by_gvr: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
}

/// Sort key for Kubernetes versions: GA > beta > alpha, then higher numbers first.
pub fn version_priority(v: &str) -> (u8, i64, i64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<i64>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (lvl, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match num.parse::<i64>() {
        Ok(n) => (lvl, major, n),
        Err(_) => (0, 0, 0),
    }
}

impl Registry {
    /// The built-in kinds controllers and the Helm chart use.
    pub fn builtin() -> Self {
        let b = ResourceInfo::builtin;
        let all = vec![
            b("", "v1", "namespaces", "Namespace", false)
                .short(&["ns"])
                .subs(&["status"]),
            b("", "v1", "secrets", "Secret", true),
            b("", "v1", "configmaps", "ConfigMap", true).short(&["cm"]),
            b("", "v1", "nodes", "Node", false).short(&["no"]).subs(&["status"]),
            b("", "v1", "pods", "Pod", true)
                .short(&["po"])
                .subs(&["status", "eviction"])
                .all(),
            b("", "v1", "events", "Event", true).short(&["ev"]),
            b("", "v1", "serviceaccounts", "ServiceAccount", true)
                .short(&["sa"])
                .subs(&["token"]),
            b("", "v1", "services", "Service", true)
                .short(&["svc"])
                .subs(&["status"])
                .all(),
            b("events.k8s.io", "v1", "events", "Event", true).short(&["ev"]),
            b("coordination.k8s.io", "v1", "leases", "Lease", true),
            b(
                "certificates.k8s.io",
                "v1",
                "certificatesigningrequests",
                "CertificateSigningRequest",
                false,
            )
            .short(&["csr"])
            .subs(&["status", "approval"]),
            b("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", true)
                .short(&["pdb"])
                .subs(&["status"]),
            b("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", true).short(&["netpol"]),
            b(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
            )
            .short(&["crd", "crds"])
            .subs(&["status"]),
            b("apps", "v1", "deployments", "Deployment", true)
                .short(&["deploy"])
                .subs(&["status"])
                .scalable()
                .all(),
            b("apps", "v1", "daemonsets", "DaemonSet", true)
                .short(&["ds"])
                .subs(&["status"])
                .all(),
            b("apps", "v1", "replicasets", "ReplicaSet", true)
                .short(&["rs"])
                .subs(&["status"])
                .scalable()
                .all(),
            b("apps", "v1", "statefulsets", "StatefulSet", true)
                .short(&["sts"])
                .subs(&["status"])
                .scalable()
                .all(),
            b("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", false),
            b(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterrolebindings",
                "ClusterRoleBinding",
                false,
            ),
            b("rbac.authorization.k8s.io", "v1", "roles", "Role", true),
            b("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", true),
        ];
        let mut r = Registry::default();
        for i in all {
            r.register(i);
        }
        r
    }

    /// Add or replace a resource.
    pub fn register(&mut self, info: ResourceInfo) {
        self.by_gvr.insert(
            (info.group.clone(), info.version.clone(), info.plural.clone()),
            Arc::new(info),
        );
    }

    /// Remove every version of a CRD-defined resource.
    pub fn unregister(&mut self, group: &str, plural: &str) {
        self.by_gvr.retain(|(g, _, p), i| !(g == group && p == plural && i.crd));
    }

    /// Look up by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Look up by `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.by_gvr
            .values()
            .find(|i| i.group == g && i.version == v && i.kind == kind)
            .cloned()
    }

    /// Groups with their versions, preferred first.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (g, v, _) in self.by_gvr.keys() {
            let e = out.entry(g.clone()).or_default();
            if !e.contains(v) {
                e.push(v.clone());
            }
        }
        for vs in out.values_mut() {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }

    /// Resources served in one group/version.
    pub fn resources(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.by_gvr
            .iter()
            .filter(|((g, v, _), _)| g == group && v == version)
            .map(|(_, i)| i.clone())
            .collect()
    }

    /// Every store key of namespaced resources (namespace deletion).
    pub fn namespaced_store_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .by_gvr
            .values()
            .filter(|i| i.namespaced)
            .map(|i| i.store_key())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}
