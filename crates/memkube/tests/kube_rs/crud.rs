//! Split of the kube_rs fidelity suite.

use super::*;

#[tokio::test]
async fn crud_metadata_and_conflicts() {
    let (_s, client) = setup();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("a".into());
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    // ConfigMaps have no generation (custom resources and workloads do).
    assert_eq!(created.metadata.generation, None);
    let rv1 = created.resource_version().unwrap();

    let err = api_err(cms.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(err.message, "configmaps \"a\" already exists");

    // no-op update does not bump the resourceVersion
    let same = cms.replace("a", &PostParams::default(), &created).await.unwrap();
    assert_eq!(same.resource_version().unwrap(), rv1);

    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let updated = cms.replace("a", &PostParams::default(), &changed).await.unwrap();
    assert_ne!(updated.resource_version().unwrap(), rv1);

    // stale resourceVersion
    let err = api_err(cms.replace("a", &PostParams::default(), &changed).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // unconditional update (no resourceVersion) is allowed
    changed.metadata.resource_version = None;
    cms.replace("a", &PostParams::default(), &changed).await.unwrap();

    // generateName
    let mut g = ConfigMap::default();
    g.metadata.generate_name = Some("gen-".into());
    let g = cms.create(&PostParams::default(), &g).await.unwrap();
    assert_eq!(g.name_any().len(), "gen-".len() + 5);

    // not found
    let err = api_err(cms.get("nope").await.unwrap_err());
    assert_eq!(err.code, 404);
    assert_eq!(err.message, "configmaps \"nope\" not found");

    // missing namespace
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "missing");
    let err = api_err(other.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!(err.code, 404);
    assert_eq!(err.message, "namespaces \"missing\" not found");

    // dry run stores nothing
    let mut d = ConfigMap::default();
    d.metadata.name = Some("dry".into());
    cms.create(
        &PostParams {
            dry_run: true,
            ..Default::default()
        },
        &d,
    )
    .await
    .unwrap();
    assert!(cms.get_opt("dry").await.unwrap().is_none());
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let (_s, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client);
    let mut w = widget("w", 1);
    w.status = Some(WidgetStatus {
        observed_generation: 7,
        conditions: vec![],
    });
    let w = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(w.status.is_none(), "status is dropped on create");
    assert_eq!(w.metadata.generation, Some(1));

    // status written through the main resource is ignored
    let p = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 3}})),
        )
        .await
        .unwrap();
    assert!(p.status.is_none());

    // status subresource changes only status
    let p = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 99}, "status": {"observedGeneration": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(p.status.as_ref().unwrap().observed_generation, 1);
    assert_eq!(p.spec.size, 1);
    assert_eq!(p.metadata.generation, Some(1), "status writes do not bump generation");

    let p = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    let p = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        p.metadata.generation,
        Some(2),
        "metadata changes do not bump generation"
    );

    // JSON patch and strategic merge (415 for custom resources)
    let p = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(json!([{"op": "replace", "path": "/spec/size", "value": 5}])).unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.spec.size, 5);
    let err = api_err(
        api.patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 6}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 415);
    // patching a missing object is 404
    let err = api_err(
        api.patch("nope", &PatchParams::default(), &Patch::Merge(json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn server_side_apply() {
    let (_s, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client);
    let pp = PatchParams::apply("mgr-a").force();
    let a1 = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "s", "labels": {"l": "1"}},
        "spec": {"size": 1, "color": "red"}});
    let w = api.patch("s", &pp, &Patch::Apply(&a1)).await.unwrap();
    assert_eq!(w.spec.color.as_deref(), Some("red"));
    let mf = w.metadata.managed_fields.clone().unwrap();
    assert!(
        mf.iter()
            .any(|e| e.manager.as_deref() == Some("mgr-a") && e.operation.as_deref() == Some("Apply"))
    );

    // another manager sets a label; mgr-a drops color and its label
    api.patch(
        "s",
        &PatchParams::apply("mgr-b"),
        &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "s", "labels": {"other": "x"}}})),
    )
    .await
    .unwrap();
    let a2 = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "s"}, "spec": {"size": 2}});
    let w = api.patch("s", &pp, &Patch::Apply(&a2)).await.unwrap();
    assert_eq!(w.spec.size, 2);
    assert_eq!(w.spec.color, None, "field dropped from the applied config is removed");
    let labels = w.labels();
    assert!(!labels.contains_key("l"));
    assert_eq!(labels.get("other").map(String::as_str), Some("x"));

    // conflicts: mgr-b may not change a field mgr-a owns unless it forces
    let steal =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "s"}, "spec": {"size": 9}});
    let err = api_err(
        api.patch("s", &PatchParams::apply("mgr-b"), &Patch::Apply(&steal))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        r#"Apply failed with 1 conflict: conflict with "mgr-a": .spec.size"#
    );
    let w = api
        .patch("s", &PatchParams::apply("mgr-b").force(), &Patch::Apply(&steal))
        .await
        .unwrap();
    assert_eq!(w.spec.size, 9);
    // mgr-a lost .spec.size: re-applying without it does not remove it
    api.patch(
        "s",
        &pp,
        &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "s"}, "spec": {}})),
    )
    .await
    .unwrap();
    assert_eq!(api.get("s").await.unwrap().spec.size, 9);

    // apply on the status subresource
    let w = api
        .patch_status(
            "s",
            &pp,
            &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "status": {"observedGeneration": 4, "conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(w.status.unwrap().observed_generation, 4);
}

#[tokio::test]
async fn finalizers_and_garbage_collection() {
    let (_s, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut w = widget("owner", 1);
    w.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let owner = api.create(&PostParams::default(), &w).await.unwrap();
    let mut child = ConfigMap::default();
    child.metadata.name = Some("child".into());
    child.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    cms.create(&PostParams::default(), &child).await.unwrap();

    api.delete("owner", &DeleteParams::default()).await.unwrap();
    let o = api.get("owner").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(cms.get_opt("child").await.unwrap().is_some(), "owner still exists");
    // adding finalizers while deleting is forbidden
    let err = api_err(
        api.patch(
            "owner",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "x/y"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    api.patch(
        "owner",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("owner").await.unwrap().is_none());
    assert!(cms.get_opt("child").await.unwrap().is_none(), "dependent collected");

    // Orphan keeps the dependent and strips its ownerReference
    let owner = api.create(&PostParams::default(), &widget("o2", 1)).await.unwrap();
    let mut child = ConfigMap::default();
    child.metadata.name = Some("child2".into());
    child.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    cms.create(&PostParams::default(), &child).await.unwrap();
    api.delete("o2", &DeleteParams::orphan()).await.unwrap();
    let c = cms.get("child2").await.unwrap();
    assert!(c.metadata.owner_references.unwrap_or_default().is_empty());

    // Foreground: owner waits for a blocking dependent with a finalizer
    let owner = api.create(&PostParams::default(), &widget("o3", 1)).await.unwrap();
    let mut child = ConfigMap::default();
    child.metadata.name = Some("child3".into());
    child.metadata.finalizers = Some(vec!["x/y".into()]);
    let mut oref = owner.controller_owner_ref(&()).unwrap();
    oref.block_owner_deletion = Some(true);
    child.metadata.owner_references = Some(vec![oref]);
    cms.create(&PostParams::default(), &child).await.unwrap();
    api.delete("o3", &DeleteParams::foreground()).await.unwrap();
    let o = api.get("o3").await.unwrap();
    assert!(o.finalizers().contains(&"foregroundDeletion".to_string()));
    assert!(cms.get("child3").await.unwrap().metadata.deletion_timestamp.is_some());
    cms.patch(
        "child3",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("o3").await.unwrap().is_none());

    // preconditions
    let cm = cms.get("child2").await.unwrap();
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let err = api_err(cms.delete("child2", &dp).await.unwrap_err());
    assert_eq!(err.code, 409);
    let _ = cm;

    // deletecollection with a label selector
    for (n, l) in [("d1", "a"), ("d2", "a"), ("d3", "b")] {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(n.into());
        c.metadata.labels = Some([("grp".to_string(), l.to_string())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    cms.delete_collection(&DeleteParams::default(), &ListParams::default().labels("grp=a"))
        .await
        .unwrap();
    let left: Vec<String> = cms
        .list(&ListParams::default().labels("grp"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(left, vec!["d3".to_string()]);
}

#[tokio::test]
async fn selectors_and_pagination() {
    let (_s, client) = setup();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for i in 0..5 {
        let p: Pod = serde_json::from_value(
            json!({"metadata": {"name": format!("p{i}"), "labels": {"app": if i % 2 == 0 { "even" } else { "odd" }}},
            "spec": {"nodeName": format!("n{}", i % 2), "containers": [{"name": "c", "image": "x"}]}}),
        )
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<Pod>| l.items.iter().map(|p| p.name_any()).collect::<Vec<_>>();
    assert_eq!(
        names(pods.list(&ListParams::default().labels("app=even")).await.unwrap()),
        ["p0", "p2", "p4"]
    );
    assert_eq!(
        names(
            pods.list(&ListParams::default().labels("app in (odd),app!=even"))
                .await
                .unwrap()
        ),
        ["p1", "p3"]
    );
    assert_eq!(
        names(pods.list(&ListParams::default().labels("!app")).await.unwrap()).len(),
        0
    );
    assert_eq!(
        names(
            pods.list(&ListParams::default().fields("spec.nodeName=n1"))
                .await
                .unwrap()
        ),
        ["p1", "p3"]
    );
    assert_eq!(
        names(
            pods.list(&ListParams::default().fields("metadata.name!=p0,status.phase=Pending"))
                .await
                .unwrap()
        )
        .len(),
        4
    );
    let err = api_err(pods.list(&ListParams::default().labels("app in in")).await.unwrap_err());
    assert_eq!(err.code, 400);

    let first = pods.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(first.clone()), ["p0", "p1"]);
    let tok = first.metadata.continue_.clone().unwrap();
    let second = pods
        .list(&ListParams::default().limit(2).continue_token(&tok))
        .await
        .unwrap();
    assert_eq!(names(second), ["p2", "p3"]);

    // all-namespaces list
    let all: Api<Pod> = Api::all(client);
    assert_eq!(all.list(&ListParams::default()).await.unwrap().items.len(), 5);
}

#[tokio::test]
async fn schema_defaults_pruning_and_cel_transition_rules() {
    let (server, client) = setup();
    server
        .install_crds(&[json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "required": ["id"], "properties": {
                            "id": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "id is immutable"}]},
                            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"}}},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}
        })])
        .unwrap();
    let ar = kube::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let api: Api<kube::api::DynamicObject> = Api::default_namespaced_with(client, &ar);
    let g: kube::api::DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"id": "a", "unknown": 1}}))
    .unwrap();
    let g = api.create(&PostParams::default(), &g).await.unwrap();
    assert_eq!(
        g.data["spec"],
        json!({"id": "a", "mode": "slow"}),
        "defaulted and pruned"
    );

    let err = api_err(
        api.patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"id": "b"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(
        err.message.starts_with(r#"Gadget.example.com "g" is invalid: spec.id"#),
        "{}",
        err.message
    );
    assert!(err.message.contains("id is immutable"), "{}", err.message);
    let causes = err.details.unwrap().causes;
    assert_eq!(causes[0].field, "spec.id");

    let err = api_err(
        api.patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "warp"}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        err.message.contains(r#"spec.mode: Unsupported value: "warp""#),
        "{}",
        err.message
    );
    // validation also runs on status writes
    let err = api_err(
        api.patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": 5}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
}
