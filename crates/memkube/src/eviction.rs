//! `pods/eviction`: delete a pod unless a PodDisruptionBudget selecting it would be violated
//! (429 TooManyRequests with the apiserver's message).

use crate::gc::DeleteOpts;
use crate::meta;
use crate::ops::State;
use crate::registry::ResourceInfo;
use crate::selectors::LabelSelector;
use crate::status::{ApiError, ApiResult};
use serde_json::{Value, json};

fn healthy(p: &Value) -> bool {
    if meta::is_deleting(p) {
        return false;
    }
    let conds = p.pointer("/status/conditions").and_then(Value::as_array);
    match conds.and_then(|c| c.iter().find(|c| c["type"] == "Ready")) {
        Some(c) => c["status"] == "True",
        None => p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"),
    }
}

/// Resolve an int-or-percent against `total`, rounding up like the disruption controller.
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p.parse::<i64>().ok().map(|p| (p * total + 99) / 100),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// Store key of PodDisruptionBudgets.
pub const PDB_KEY: &str = "policy/poddisruptionbudgets";

fn strip_times(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(Value::Array(cs)) = v.pointer_mut("/conditions") {
        for c in cs {
            if let Value::Object(m) = c {
                m.remove("lastTransitionTime");
            }
        }
    }
    v
}

impl State {
    /// (expected pods, currently healthy, desired healthy) for a PDB, as the disruption
    /// controller computes them.
    fn budget(&self, pdb: &Value) -> (i64, i64, i64) {
        let ns = meta::namespace(pdb);
        let sel = LabelSelector::from_json(&pdb.pointer("/spec/selector").cloned().unwrap_or(json!({})));
        let matching: Vec<Value> = if sel.is_empty() {
            vec![]
        } else {
            self.store
                .list("/pods", Some(ns))
                .into_iter()
                .filter(|p| sel.matches(p))
                .collect()
        };
        let expected = matching.len() as i64;
        let current = matching.iter().filter(|p| healthy(p)).count() as i64;
        let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
            scaled(min, expected).unwrap_or(0)
        } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
            (expected - scaled(max, expected).unwrap_or(0)).max(0)
        } else {
            0
        };
        (expected, current, desired)
    }

    /// Keep every PodDisruptionBudget's status current (stands in for the disruption controller).
    pub fn refresh_pdbs(&mut self) {
        for pdb in self.store.list(PDB_KEY, None) {
            let (expected, current, desired) = self.budget(&pdb);
            let allowed = (current - desired).max(0);
            let generation = pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1));
            let old = pdb.get("status").cloned().unwrap_or(json!({}));
            let (cs, reason) = if allowed > 0 {
                ("True", "SufficientPods")
            } else {
                ("False", "InsufficientPods")
            };
            let mut status = json!({
                "observedGeneration": generation, "expectedPods": expected, "currentHealthy": current,
                "desiredHealthy": desired, "disruptionsAllowed": allowed,
                "conditions": [{"type": "DisruptionAllowed", "status": cs, "reason": reason, "message": "",
                    "observedGeneration": generation, "lastTransitionTime": meta::now()}],
            });
            if strip_times(&old) == strip_times(&status) {
                continue;
            }
            if old.pointer("/conditions/0/status").and_then(Value::as_str) == Some(cs)
                && let Some(t) = old.pointer("/conditions/0/lastTransitionTime")
            {
                status["conditions"][0]["lastTransitionTime"] = t.clone();
            }
            let mut new = pdb.clone();
            new["status"] = status;
            self.store.put(PDB_KEY, new);
        }
    }

    /// POST pods/{name}/eviction.
    pub fn evict(&mut self, pods: &ResourceInfo, ns: &str, name: &str, body: &Value) -> ApiResult<Value> {
        let pod = self
            .store
            .get(&pods.store_key(), ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found("pods", "", name))?;
        let dry_run = body
            .pointer("/deleteOptions/dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !meta::is_deleting(&pod) {
            let pdbs: Vec<Value> = self
                .store
                .list("policy/poddisruptionbudgets", Some(ns))
                .into_iter()
                .filter(|pdb| {
                    let sel = pdb.pointer("/spec/selector").cloned().unwrap_or(json!({}));
                    let ls = LabelSelector::from_json(&sel);
                    !ls.is_empty() && ls.matches(&pod)
                })
                .collect();
            if pdbs.len() > 1 {
                return Err(ApiError::new(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(pdb) = pdbs.first() {
                let (_, current, desired) = self.budget(pdb);
                let always =
                    pdb.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow");
                let allowed = if healthy(&pod) {
                    current > desired
                } else {
                    always || current >= desired
                };
                if !allowed {
                    let pdb_name = meta::name(pdb);
                    return Err(ApiError {
                        code: 429,
                        reason: "TooManyRequests".into(),
                        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                        details: Some(json!({"causes": [{"reason": "DisruptionBudget",
                            "message": format!("The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently")}]})),
                    });
                }
            }
        }
        if !dry_run {
            let prop = body
                .pointer("/deleteOptions/propagationPolicy")
                .and_then(Value::as_str)
                .map(String::from);
            self.delete(
                pods,
                ns,
                name,
                &DeleteOpts {
                    propagation: prop,
                    ..Default::default()
                },
            )?;
        }
        Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
    }
}
