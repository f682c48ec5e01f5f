//! ScheduledCapacity against memkube + capi-sim with an injected clock: the replica count
//! across both edges of a window, a MachineSet on a v1beta2-only server, exclusions, the
//! force-off override, a field conflict with another manager (reported, never forced, no hot
//! loop, and resolved once the other manager lets go), a missing or unusable target and an
//! invalid schedule. The first flow also runs on the genuine control plane.

use caplv::api::{
    ScheduledCapacity,
    condition::{self, Condition},
};
use chrono::{DateTime, Utc};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::ApiResource,
};
use serde_json::json;

use crate::support::{Env, apply_yaml, events_about, genuine, wait_until};

/// Monday 2026-12-07, 08:59:58 in New York: two seconds before `mon-fri 9-17` opens.
const BEFORE_OPEN: &str = "2026-12-07T13:59:58Z";
/// The same Monday, 17:59:58 in New York: two seconds before it closes.
const BEFORE_CLOSE: &str = "2026-12-07T22:59:58Z";
/// Noon on that Monday in New York: inside the window.
const MIDDAY: &str = "2026-12-07T17:00:00Z";

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn resource(version: &str, kind: &str) -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: version.into(),
        api_version: format!("cluster.x-k8s.io/{version}"),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

fn targets(env: &Env, version: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(env.client.clone(), "default", &resource(version, kind))
}

/// A MachineDeployment or MachineSet `name` of cluster `spot`, applied as the field manager
/// `test`, with `replicas` in its manifest when given (then `test` owns the field).
async fn target(env: &Env, version: &str, kind: &str, name: &str, replicas: Option<i32>) {
    let (bootstrap, infra) = if version == "v1beta1" {
        (
            "{apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1, kind: IgnitionConfigTemplate, name: workers}",
            "{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtMachineTemplate, name: workers}",
        )
    } else {
        (
            "{apiGroup: bootstrap.cluster.x-k8s.io, kind: IgnitionConfigTemplate, name: workers}",
            "{apiGroup: infrastructure.cluster.x-k8s.io, kind: LibvirtMachineTemplate, name: workers}",
        )
    };
    let replicas = replicas.map_or_else(String::new, |r| format!("  replicas: {r}\n"));
    apply_yaml(
        &env.client,
        &format!(
            "apiVersion: cluster.x-k8s.io/{version}\nkind: {kind}\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  clusterName: spot\n{replicas}  selector: {{matchLabels: {{pool: {name}}}}}\n  template:\n    metadata: {{labels: {{pool: {name}}}}}\n    spec:\n      clusterName: spot\n      bootstrap: {{configRef: {bootstrap}}}\n      infrastructureRef: {infra}\n"
        ),
    )
    .await;
}

/// The LibvirtMachineTemplate and IgnitionConfigTemplate `workers` the targets' templates name,
/// from the seed's ScheduledMachine: genuine core's MachineDeployment controller reads them to
/// make its MachineSet.
async fn machine_templates(env: &Env) {
    let seed: serde_json::Value =
        serde_yaml::from_str(include_str!("../../examples/seed/05-scheduledmachine.yaml")).unwrap();
    for (api_version, kind, spec) in [
        (
            "infrastructure.cluster.x-k8s.io/v1alpha1",
            "LibvirtMachineTemplate",
            &seed["spec"]["infrastructureSpec"]["spec"],
        ),
        (
            "bootstrap.cluster.x-k8s.io/v1alpha1",
            "IgnitionConfigTemplate",
            &seed["spec"]["bootstrapSpec"]["spec"],
        ),
    ] {
        let template = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "workers", "namespace": "default"},
            "spec": {"template": {"spec": spec}}});
        apply_yaml(&env.client, &template.to_string()).await;
    }
}

async fn replicas(env: &Env, version: &str, kind: &str, name: &str) -> Option<i64> {
    targets(env, version, kind)
        .get(name)
        .await
        .unwrap()
        .data
        .pointer("/spec/replicas")
        .and_then(serde_json::Value::as_i64)
}

async fn wait_replicas(env: &Env, version: &str, kind: &str, name: &str, want: i64) {
    wait_until(&format!("{kind} {name} at {want} replicas"), || async {
        replicas(env, version, kind, name).await == Some(want)
    })
    .await;
}

fn scs(env: &Env) -> Api<ScheduledCapacity> {
    Api::namespaced(env.client.clone(), "default")
}

/// A ScheduledCapacity `name` for the target, on for `mon-fri 9-17` in New York, with `edits`
/// merged into its spec.
async fn capacity(env: &Env, name: &str, target_ref: serde_json::Value, edits: serde_json::Value) {
    let mut sc = json!({
        "apiVersion": "5spot.finos.org/v1alpha1", "kind": "ScheduledCapacity",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "targetRef": target_ref,
            "schedule": {"daysOfWeek": ["mon-fri"], "hoursOfDay": ["9-17"], "timezone": "America/New_York"},
            "onReplicas": 3,
            "offReplicas": 1,
        },
    });
    json_patch::merge(&mut sc["spec"], &edits);
    scs(env)
        .create(&PostParams::default(), &serde_json::from_value(sc).unwrap())
        .await
        .unwrap();
}

fn md_ref(name: &str) -> serde_json::Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment", "name": name})
}

async fn condition(env: &Env, name: &str, type_: &str) -> Option<Condition> {
    let sc = scs(env).get(name).await.unwrap();
    condition::find(&sc.status?.conditions, type_).cloned()
}

async fn wait_reason(env: &Env, name: &str, type_: &str, reason: &str) -> Condition {
    wait_until(&format!("{name}: {type_} with reason {reason}"), || async {
        condition(env, name, type_).await.is_some_and(|c| c.reason == reason)
    })
    .await;
    condition(env, name, type_).await.unwrap()
}

/// Make the controller look again after the test moved the clock (as a spec edit would).
async fn nudge(env: &Env, name: &str) {
    let patch = json!({"metadata": {"annotations": {"test/nudge": chrono::Utc::now().to_rfc3339()}}});
    scs(env)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// The field managers owning `spec.replicas`, as `manager/operation`.
async fn replica_owners(env: &Env, version: &str, kind: &str, name: &str) -> Vec<String> {
    let obj = targets(env, version, kind).get(name).await.unwrap();
    obj.managed_fields()
        .iter()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:replicas").is_some())
        })
        .map(|e| {
            format!(
                "{}/{}",
                e.manager.as_deref().unwrap_or(""),
                e.operation.as_deref().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn replicas_follow_the_schedule_across_both_edges() {
    let env = Env::start().await;
    apply_yaml(
        &env.client,
        "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: spot, namespace: default}\nspec: {}\n",
    )
    .await;
    machine_templates(&env).await;
    target(&env, "v1beta1", "MachineDeployment", "workers", None).await;
    // Four seconds before the opening: time to see the off count first, also on genuine
    // components.
    env.clock.set(at(BEFORE_OPEN) - chrono::Duration::seconds(2));
    capacity(&env, "office", md_ref("workers"), json!({})).await;
    wait_replicas(&env, "v1beta1", "MachineDeployment", "workers", 1).await;
    let ready = wait_reason(&env, "office", "Ready", "OutsideSchedule").await;
    assert!(
        ready
            .message
            .contains("outside the schedule until 2026-12-07T14:00:00Z"),
        "{}",
        ready.message
    );
    let status = scs(&env).get("office").await.unwrap().status.unwrap();
    assert_eq!((status.in_schedule, status.desired_replicas), (Some(false), Some(1)));
    assert_eq!(status.next_transition.unwrap().0.to_string(), "2026-12-07T14:00:00Z");
    assert_eq!(
        replica_owners(&env, "v1beta1", "MachineDeployment", "workers").await,
        ["caplv-manager/scheduledcapacity/Apply"],
        "only our apply owns the field"
    );

    // The edge arrives on its own: the controller requeued for it.
    wait_replicas(&env, "v1beta1", "MachineDeployment", "workers", 3).await;
    wait_reason(&env, "office", "Ready", "InSchedule").await;
    if genuine::selected() {
        // Genuine core's MachineDeployment controller passes the count on to its MachineSet.
        let sets = targets(&env, "v1beta1", "MachineSet");
        wait_until("the MachineSet at 3 replicas", || async {
            sets.list(&ListParams::default().labels("cluster.x-k8s.io/deployment-name=workers"))
                .await
                .unwrap()
                .items
                .iter()
                .any(|ms| ms.data.pointer("/spec/replicas") == Some(&json!(3)))
        })
        .await;
    }

    env.clock.set(at(BEFORE_CLOSE));
    nudge(&env, "office").await;
    let status = scs(&env).get("office").await.unwrap().status.unwrap();
    assert_eq!(status.desired_replicas, Some(3), "still on for two seconds");
    wait_replicas(&env, "v1beta1", "MachineDeployment", "workers", 1).await;
    wait_reason(&env, "office", "Ready", "OutsideSchedule").await;
    let status = scs(&env).get("office").await.unwrap().status.unwrap();
    assert_eq!(
        status.next_transition.unwrap().0.to_string(),
        "2026-12-08T14:00:00Z",
        "Tuesday 09:00 New York"
    );
    wait_until("an Event for each switch", || async {
        let events = events_about(&env, "office").await;
        ["InSchedule", "OutsideSchedule"]
            .iter()
            .all(|r| events.iter().any(|e| e.reason.as_deref() == Some(*r)))
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn a_machine_set_follows_on_a_v1beta2_server_and_one_a_deployment_controls_is_refused() {
    let env = Env::start_with(capi_sim::CapiVersions::V1beta2).await;
    env.clock.set(at(MIDDAY));
    target(&env, "v1beta2", "MachineSet", "pool", None).await;
    // The version named in targetRef does not bind: the served contract is used.
    let ms_ref = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineSet", "name": "pool"});
    capacity(&env, "pool", ms_ref, json!({})).await;
    wait_replicas(&env, "v1beta2", "MachineSet", "pool", 3).await;
    wait_reason(&env, "pool", "ReplicasApplied", "Applied").await;

    // A MachineSet its MachineDeployment controls is that controller's to scale.
    target(&env, "v1beta2", "MachineDeployment", "owner", None).await;
    let owner = targets(&env, "v1beta2", "MachineDeployment")
        .get("owner")
        .await
        .unwrap();
    target(&env, "v1beta2", "MachineSet", "owned", Some(2)).await;
    let adopt = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment", "name": "owner",
        "uid": owner.uid().unwrap(), "controller": true,
    }]}});
    targets(&env, "v1beta2", "MachineSet")
        .patch("owned", &PatchParams::default(), &Patch::Merge(adopt))
        .await
        .unwrap();
    let owned_ref = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet", "name": "owned"});
    capacity(&env, "owned", owned_ref, json!({})).await;
    let refused = wait_reason(&env, "owned", "ReplicasApplied", "InvalidTarget").await;
    assert!(
        refused.message.contains("controlled by MachineDeployment owner"),
        "{}",
        refused.message
    );
    if !genuine::selected() {
        // (Genuine core's MachineDeployment controller scales or releases its MachineSets.)
        assert_eq!(
            replicas(&env, "v1beta2", "MachineSet", "owned").await,
            Some(2),
            "untouched"
        );
    }
    env.stop().await;
}

#[tokio::test]
async fn lead_time_an_exclusion_and_a_force_off_override() {
    let env = Env::start().await;
    // Five minutes before the window: a ten-minute lead time has raised the count already.
    env.clock.set(at("2026-12-07T13:55:00Z"));
    target(&env, "v1beta1", "MachineDeployment", "early", None).await;
    capacity(&env, "early", md_ref("early"), json!({"schedule": {"leadTime": "10m"}})).await;
    wait_replicas(&env, "v1beta1", "MachineDeployment", "early", 3).await;
    wait_reason(&env, "early", "Ready", "AheadOfWindow").await;
    let status = scs(&env).get("early").await.unwrap().status.unwrap();
    assert_eq!(status.in_schedule, Some(false), "the window itself opens at 14:00");
    assert_eq!(status.next_transition.unwrap().0.to_string(), "2026-12-07T14:00:00Z");

    env.clock.set(at(MIDDAY));
    target(&env, "v1beta1", "MachineDeployment", "a", None).await;
    target(&env, "v1beta1", "MachineDeployment", "b", None).await;
    capacity(
        &env,
        "holiday",
        md_ref("a"),
        json!({"schedule": {"exclusions": [{"date": "2026-12-07"}]}}),
    )
    .await;
    wait_replicas(&env, "v1beta1", "MachineDeployment", "a", 1).await;
    let status = scs(&env).get("holiday").await.unwrap().status.unwrap();
    assert_eq!(status.in_schedule, Some(false));
    assert_eq!(status.next_transition.unwrap().0.to_string(), "2026-12-08T14:00:00Z");
    scs(&env)
        .patch(
            "holiday",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"schedule": {"exclusions": null}}})),
        )
        .await
        .unwrap();
    wait_replicas(&env, "v1beta1", "MachineDeployment", "a", 3).await;

    capacity(&env, "forced", md_ref("b"), json!({})).await;
    wait_replicas(&env, "v1beta1", "MachineDeployment", "b", 3).await;
    let off = json!({"metadata": {"annotations": {"5spot.finos.org/force-off-until": "2026-12-07T18:00:00Z"}}});
    scs(&env)
        .patch("forced", &PatchParams::default(), &Patch::Merge(off))
        .await
        .unwrap();
    wait_replicas(&env, "v1beta1", "MachineDeployment", "b", 1).await;
    let ready = wait_reason(&env, "forced", "Ready", "OutsideSchedule").await;
    assert!(
        ready.message.contains("forced off by 5spot.finos.org/force-off-until"),
        "{}",
        ready.message
    );

    // The instant passes: the window decides again, and the annotation goes.
    env.clock.set(at("2026-12-07T18:00:01Z"));
    nudge(&env, "forced").await;
    wait_replicas(&env, "v1beta1", "MachineDeployment", "b", 3).await;
    wait_until("the expired override removed", || async {
        !scs(&env)
            .get("forced")
            .await
            .unwrap()
            .annotations()
            .contains_key("5spot.finos.org/force-off-until")
    })
    .await;
    env.stop().await;
}

/// Patches (our applies) and reads of MachineDeployments, by anyone.
fn target_requests(env: &Env) -> (u64, u64) {
    let count = |verb| {
        env.server()
            .request_count(verb, "machinedeployments.cluster.x-k8s.io", "")
    };
    (count("patch"), count("get"))
}

fn status_writes(env: &Env) -> u64 {
    env.server()
        .request_count("patch", "scheduledcapacities.5spot.finos.org", "status")
}

#[tokio::test]
async fn another_field_manager_s_replicas_are_reported_never_forced_and_handed_over() {
    let env = Env::start().await;
    env.clock.set(at(MIDDAY));
    target(&env, "v1beta1", "MachineDeployment", "shared", Some(5)).await;

    // memkube answers an unforced apply of someone else's field as the apiserver does.
    let mds = targets(&env, "v1beta1", "MachineDeployment");
    let other = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
        "metadata": {"name": "shared"}, "spec": {"replicas": 4}});
    let err = mds
        .patch("shared", &PatchParams::apply("other"), &Patch::Apply(other))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else { panic!("{err}") };
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "test": .spec.replicas"#
    );

    capacity(&env, "greedy", md_ref("shared"), json!({})).await;
    let conflict = wait_reason(&env, "greedy", "ReplicasApplied", "FieldConflict").await;
    assert!(
        conflict
            .message
            .starts_with(r#"spec.replicas of MachineDeployment shared is owned by "test"; not forced to 3"#),
        "{}",
        conflict.message
    );
    assert_eq!(
        condition(&env, "greedy", "Ready").await.unwrap().reason,
        "FieldConflict"
    );
    assert_eq!(
        replicas(&env, "v1beta1", "MachineDeployment", "shared").await,
        Some(5),
        "not overwritten"
    );
    wait_until("a Warning Event names the other manager", || async {
        events_about(&env, "greedy").await.iter().any(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("FieldConflict")
                && e.note.as_deref().is_some_and(|n| n.contains("\"test\""))
        })
    })
    .await;
    // No hot loop: neither the apply nor the status write is repeated while nothing changes,
    // not even by a change of the ScheduledCapacity that leaves the wanted count alone; and
    // the target is read from the watch cache, not the API.
    let (requests, writes) = (target_requests(&env), status_writes(&env));
    nudge(&env, "greedy").await;
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(
        (target_requests(&env), status_writes(&env)),
        (requests, writes),
        "no hot loop"
    );

    // The other manager lets go (its manifest no longer sets replicas): the field is ours.
    target(&env, "v1beta1", "MachineDeployment", "shared", None).await;
    wait_replicas(&env, "v1beta1", "MachineDeployment", "shared", 3).await;
    wait_reason(&env, "greedy", "Ready", "InSchedule").await;

    // An autoscaler scaling through /scale takes the field (an update never conflicts); the
    // next apply meets it and leaves its count.
    let scale = json!({"spec": {"replicas": 7}});
    let autoscaler = PatchParams {
        field_manager: Some("autoscaler".into()),
        ..PatchParams::default()
    };
    mds.patch_scale("shared", &autoscaler, &Patch::Merge(scale))
        .await
        .unwrap();
    let conflict = wait_reason(&env, "greedy", "ReplicasApplied", "FieldConflict").await;
    assert!(conflict.message.contains("\"autoscaler\""), "{}", conflict.message);
    assert_eq!(replicas(&env, "v1beta1", "MachineDeployment", "shared").await, Some(7));
    env.stop().await;
}

#[tokio::test]
async fn a_missing_target_or_an_invalid_schedule_is_reported_and_recovers() {
    let env = Env::start().await;
    env.clock.set(at(MIDDAY));
    capacity(&env, "early", md_ref("later"), json!({})).await;
    let missing = wait_reason(&env, "early", "ReplicasApplied", "TargetNotFound").await;
    assert_eq!(
        missing.message,
        r#"MachineDeployment "later" not found in namespace default"#
    );
    target(&env, "v1beta1", "MachineDeployment", "later", None).await;
    wait_replicas(&env, "v1beta1", "MachineDeployment", "later", 3).await;

    target(&env, "v1beta1", "MachineDeployment", "kept", Some(2)).await;
    let kept_ref = md_ref("kept");
    capacity(
        &env,
        "mars",
        kept_ref,
        json!({"schedule": {"timezone": "Mars/Olympus_Mons"}}),
    )
    .await;
    let valid = wait_reason(&env, "mars", "ScheduleValid", "InvalidTimezone").await;
    assert!(valid.message.contains("Mars/Olympus_Mons"), "{}", valid.message);
    assert_eq!(
        condition(&env, "mars", "Ready").await.unwrap().reason,
        "InvalidTimezone"
    );
    assert_eq!(
        replicas(&env, "v1beta1", "MachineDeployment", "kept").await,
        Some(2),
        "untouched"
    );
    let writes = status_writes(&env);
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert_eq!(status_writes(&env), writes, "no hot loop");

    // The API server refuses what the schema can tell, naming the rule.
    for (name, edits, says) in [
        (
            "deploy",
            json!({"targetRef": {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Deployment", "name": "x"}}),
            "targetRef.kind must be MachineDeployment or MachineSet",
        ),
        (
            "apps",
            json!({"targetRef": {"apiVersion": "apps/v1", "kind": "MachineDeployment", "name": "x"}}),
            "spec.targetRef.apiVersion",
        ),
        ("negative", json!({"onReplicas": -1}), "spec.onReplicas"),
    ] {
        let mut sc = json!({
            "apiVersion": "5spot.finos.org/v1alpha1", "kind": "ScheduledCapacity",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"targetRef": md_ref("kept"), "schedule": {"daysOfWeek": ["mon"], "hoursOfDay": ["9"]}, "onReplicas": 1},
        });
        json_patch::merge(&mut sc["spec"], &edits);
        let err = scs(&env)
            .create(&PostParams::default(), &serde_json::from_value(sc).unwrap())
            .await
            .unwrap_err();
        assert!(err.to_string().contains(says), "{name}: {err}");
    }

    let fix = json!({"spec": {"schedule": {"timezone": "America/New_York"}}});
    scs(&env)
        .patch("mars", &PatchParams::default(), &Patch::Merge(fix))
        .await
        .unwrap();
    // `test` owns the 2, so the fixed schedule meets a conflict rather than forcing it.
    wait_reason(&env, "mars", "ReplicasApplied", "FieldConflict").await;
    assert_eq!(condition(&env, "mars", "ScheduleValid").await.unwrap().status, "True");
    env.stop().await;
}
