//! The Node's taints as `spec.nodeTaints` wants them (pure). Only the taints this
//! ScheduledMachine owns are ever changed: the Node's annotation [`OWNED_TAINTS_ANNOTATION`]
//! lists them as `key:Effect`, so a taint dropped from the spec is taken off and one removed
//! by hand comes back, while the kubelet's, the cloud's or an administrator's stay as they are.
//! A wanted taint whose key and effect someone else already holds is left to them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Taint;

use crate::api::node_taint::{NodeTaint, TaintEffect};

/// Annotation on the Node listing the taints this manager put there, as `key:Effect,…`.
pub const OWNED_TAINTS_ANNOTATION: &str = "5spot.finos.org/owned-taints";

/// NoSchedule taint that holds a Node provisioned ahead of its window (`leadTime`) until the
/// window opens.
pub const WINDOW_CLOSED_TAINT: &str = "5spot.finos.org/window-closed";

/// What the Node should carry: `spec.nodeTaints` once it is Ready (before that, only those
/// already applied, so a Node that turns NotReady for a moment keeps them), and
/// [`WINDOW_CLOSED_TAINT`] while the window is not yet open.
#[must_use]
pub fn wanted(spec: &[NodeTaint], ready: bool, owned: &BTreeSet<TaintId>, window_open: bool) -> Vec<NodeTaint> {
    let mut wanted: Vec<NodeTaint> = spec
        .iter()
        .filter(|t| ready || owned.contains(&(t.key.clone(), t.effect.as_str().to_owned())))
        .cloned()
        .collect();
    if !window_open {
        wanted.push(NodeTaint {
            key: WINDOW_CLOSED_TAINT.to_owned(),
            value: None,
            effect: TaintEffect::NoSchedule,
        });
    }
    wanted
}

/// Whether `taints` still hold the Node back for its window.
#[must_use]
pub fn window_closed(taints: &[Taint]) -> bool {
    taints.iter().any(|t| t.key == WINDOW_CLOSED_TAINT)
}

/// A taint's identity on a Node: its key and effect.
pub type TaintId = (String, String);

/// The taints the annotation says we own.
#[must_use]
pub fn parse_owned(annotation: Option<&str>) -> BTreeSet<TaintId> {
    annotation
        .unwrap_or_default()
        .split(',')
        .filter_map(|entry| entry.rsplit_once(':'))
        .filter(|(key, effect)| !key.is_empty() && !effect.is_empty())
        .map(|(key, effect)| (key.to_owned(), effect.to_owned()))
        .collect()
}

/// The annotation value for `owned`; empty when we own nothing.
#[must_use]
pub fn format_owned(owned: &BTreeSet<TaintId>) -> String {
    owned
        .iter()
        .map(|(key, effect)| format!("{key}:{effect}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The Node's new taints and the new owned list.
#[derive(Clone, Debug, PartialEq)]
pub struct TaintUpdate {
    /// Every taint the Node should carry: others' unchanged, then ours in spec order.
    pub taints: Vec<Taint>,
    /// What we own afterwards.
    pub owned: BTreeSet<TaintId>,
}

fn id(t: &Taint) -> TaintId {
    (t.key.clone(), t.effect.clone())
}

/// What to write so the Node carries `wanted`, or `None` when it already does.
#[must_use]
pub fn reconcile(current: &[Taint], owned: &BTreeSet<TaintId>, wanted: &[NodeTaint]) -> Option<TaintUpdate> {
    let foreign: Vec<Taint> = current.iter().filter(|t| !owned.contains(&id(t))).cloned().collect();
    let held: BTreeSet<TaintId> = foreign.iter().map(id).collect();
    let ours: Vec<Taint> = wanted
        .iter()
        .map(|w| Taint {
            key: w.key.clone(),
            value: w.value.clone().filter(|v| !v.is_empty()),
            effect: w.effect.as_str().to_owned(),
            time_added: None,
        })
        .filter(|t| !held.contains(&id(t)))
        .map(|t| kept_time(current, t))
        .collect();
    let new_owned: BTreeSet<TaintId> = ours.iter().map(id).collect();
    let mut taints = foreign;
    taints.extend(ours);
    let same = taints.len() == current.len() && taints.iter().all(|t| current.contains(t));
    (!same || new_owned != *owned).then_some(TaintUpdate {
        taints,
        owned: new_owned,
    })
}

/// `t`, with the `timeAdded` the Node already records for the same taint.
fn kept_time(current: &[Taint], mut t: Taint) -> Taint {
    if let Some(existing) = current
        .iter()
        .find(|c| c.key == t.key && c.effect == t.effect && c.value == t.value)
    {
        t.time_added.clone_from(&existing.time_added);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn wanted(key: &str, value: Option<&str>, effect: TaintEffect) -> NodeTaint {
        NodeTaint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
        }
    }

    fn ids(list: &[(&str, &str)]) -> BTreeSet<TaintId> {
        list.iter().map(|(k, e)| ((*k).to_owned(), (*e).to_owned())).collect()
    }

    const NOT_READY: &str = "node.kubernetes.io/not-ready";

    #[test]
    fn the_annotation_round_trips_and_ignores_junk() {
        let owned = ids(&[("a.example.com/x", "NoSchedule"), ("b", "NoExecute")]);
        assert_eq!(parse_owned(Some(&format_owned(&owned))), owned);
        assert!(parse_owned(None).is_empty());
        assert_eq!(
            parse_owned(Some("junk,:NoSchedule,k:,c:NoSchedule")),
            ids(&[("c", "NoSchedule")])
        );
    }

    #[test]
    fn wanted_taints_are_added_beside_foreign_ones() {
        let current = [taint(NOT_READY, None, "NoSchedule")];
        let update = reconcile(
            &current,
            &BTreeSet::new(),
            &[wanted(
                "spot.example.com/ephemeral",
                Some("true"),
                TaintEffect::NoSchedule,
            )],
        )
        .unwrap();
        assert_eq!(
            update.taints,
            [
                taint(NOT_READY, None, "NoSchedule"),
                taint("spot.example.com/ephemeral", Some("true"), "NoSchedule")
            ]
        );
        assert_eq!(update.owned, ids(&[("spot.example.com/ephemeral", "NoSchedule")]));
        assert_eq!(
            reconcile(
                &update.taints,
                &update.owned,
                &[wanted(
                    "spot.example.com/ephemeral",
                    Some("true"),
                    TaintEffect::NoSchedule
                )]
            ),
            None,
            "converged"
        );
    }

    #[test]
    fn drift_is_undone_and_a_dropped_taint_is_removed() {
        let owned = ids(&[("a", "NoSchedule"), ("b", "NoExecute")]);
        // Someone removed "a" and changed "b"'s value.
        let current = [
            taint("b", Some("edited"), "NoExecute"),
            taint("other", None, "NoSchedule"),
        ];
        let spec = [
            wanted("a", None, TaintEffect::NoSchedule),
            wanted("b", Some("v"), TaintEffect::NoExecute),
        ];
        let update = reconcile(&current, &owned, &spec).unwrap();
        assert_eq!(
            update.taints,
            [
                taint("other", None, "NoSchedule"),
                taint("a", None, "NoSchedule"),
                taint("b", Some("v"), "NoExecute")
            ]
        );
        // "b" dropped from the spec: it goes, "other" stays.
        let update = reconcile(&update.taints, &update.owned, &spec[..1]).unwrap();
        assert_eq!(
            update.taints,
            [taint("other", None, "NoSchedule"), taint("a", None, "NoSchedule")]
        );
        assert_eq!(update.owned, ids(&[("a", "NoSchedule")]));
    }

    #[test]
    fn a_taint_someone_else_holds_is_left_to_them() {
        let current = [taint("shared", Some("theirs"), "NoSchedule")];
        let spec = [wanted("shared", Some("ours"), TaintEffect::NoSchedule)];
        assert_eq!(reconcile(&current, &BTreeSet::new(), &spec), None);
    }

    #[test]
    fn the_window_closed_taint_holds_an_early_node_and_goes_at_the_edge() {
        let spec = [wanted("spot.example.com/ephemeral", None, TaintEffect::NoSchedule)];
        // Not Ready yet, before the window: only the window-closed taint.
        let early = super::wanted(&spec, false, &BTreeSet::new(), false);
        let update = reconcile(&[], &BTreeSet::new(), &early).unwrap();
        assert_eq!(update.taints, [taint(WINDOW_CLOSED_TAINT, None, "NoSchedule")]);
        assert!(window_closed(&update.taints));
        // Ready before the window: the spec's taints join it.
        let ready = super::wanted(&spec, true, &update.owned, false);
        let update = reconcile(&update.taints, &update.owned, &ready).unwrap();
        assert_eq!(update.taints.len(), 2);
        // A moment NotReady keeps what was applied.
        let blip = super::wanted(&spec, false, &update.owned, false);
        assert_eq!(reconcile(&update.taints, &update.owned, &blip), None);
        // The window opens: only the window-closed taint goes.
        let open = super::wanted(&spec, true, &update.owned, true);
        let update = reconcile(&update.taints, &update.owned, &open).unwrap();
        assert_eq!(update.taints, [taint("spot.example.com/ephemeral", None, "NoSchedule")]);
        assert!(!window_closed(&update.taints));
    }

    #[test]
    fn an_empty_spec_removes_only_what_we_own() {
        let current = [taint("ours", None, "NoSchedule"), taint("theirs", None, "NoSchedule")];
        let update = reconcile(&current, &ids(&[("ours", "NoSchedule")]), &[]).unwrap();
        assert_eq!(update.taints, [taint("theirs", None, "NoSchedule")]);
        assert!(update.owned.is_empty());
        assert_eq!(reconcile(&current[1..], &BTreeSet::new(), &[]), None);
    }
}
