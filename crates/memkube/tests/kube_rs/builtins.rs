//! Split of the kube_rs fidelity suite.

use super::*;

#[tokio::test]
async fn eviction_respects_pdb() {
    let (_s, client) = setup();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for n in ["e1", "e2"] {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": n, "labels": {"app": "db"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
        pods.patch_status(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    }
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();

    let st = pdbs.get("db").await.unwrap().status.unwrap();
    assert_eq!(
        (
            st.current_healthy,
            st.desired_healthy,
            st.disruptions_allowed,
            st.expected_pods
        ),
        (Some(2), Some(1), Some(1), Some(2))
    );
    pods.evict("e1", &EvictParams::default()).await.unwrap();
    assert_eq!(
        pdbs.get("db").await.unwrap().status.unwrap().disruptions_allowed,
        Some(0)
    );
    assert!(pods.get_opt("e1").await.unwrap().is_none());
    let err = api_err(pods.evict("e2", &EvictParams::default()).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(
        err.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert!(pods.get_opt("e2").await.unwrap().is_some());
}

/// base64 of a PEM block with the CERTIFICATE REQUEST header the apiserver insists on.
const PEM_REQUEST: &str =
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KQUFBQQotLS0tLUVORCBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K";

#[tokio::test]
async fn csr_approval() {
    let (_s, client) = setup();
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let csr: CertificateSigningRequest = serde_json::from_value(json!({"metadata": {"name": "node-csr"},
        "spec": {"request": PEM_REQUEST, "signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": ["client auth"]}})).unwrap();
    csrs.create(&PostParams::default(), &csr).await.unwrap();
    let approval =
        json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]}});
    let got = csrs
        .patch_subresource("approval", "node-csr", &PatchParams::default(), &Patch::Merge(approval))
        .await
        .unwrap();
    let conds = got.status.unwrap().conditions.unwrap();
    assert_eq!(conds[0].type_, "Approved");
    // status subresource sets the certificate
    let got = csrs
        .patch_status(
            "node-csr",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"certificate": "QUJD"}})),
        )
        .await
        .unwrap();
    assert!(got.status.unwrap().certificate.is_some());
}

#[tokio::test]
async fn table_output() {
    let (server, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &widget("t", 4)).await.unwrap();
    api.patch_status(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap();
    let req = http::Request::get("/apis/example.com/v1/namespaces/default/widgets")
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let t: Value = client.request(req).await.unwrap();
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // like the apiextensions server: declared columns only, no implicit Age
    assert_eq!(cols, ["Name", "Size", "Ready"]);
    let row = &t["rows"][0]["cells"];
    assert_eq!(row[0], "t");
    assert_eq!(row[1], 4);
    assert_eq!(row[2], "True");

    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    // built-in columns, in kubectl's order
    server
        .put_object(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.32.0"}}}))
        .unwrap();
    let req = http::Request::get("/api/v1/nodes?includeObject=Object")
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let t: Value = client.request(req).await.unwrap();
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Status", "Roles", "Age", "Version"]);
    let row = &t["rows"][0]["cells"];
    assert_eq!(row[1], "Ready,SchedulingDisabled");
    assert_eq!(row[2], "worker");
    assert!(row[3].as_str().unwrap().ends_with('s'));
    assert_eq!(row[4], "v1.32.0");
    assert_eq!(t["rows"][0]["object"]["kind"], "Node");
}

#[tokio::test]
async fn hooks_faults_counts_and_direct_store() {
    let (server, client) = setup();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    server.inject_fault(Fault::new("create", "configmaps", 500).times(2));
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("f".into());
    for _ in 0..2 {
        let err = api_err(cms.create(&PostParams::default(), &cm).await.unwrap_err());
        assert_eq!(err.code, 500);
    }
    cms.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(server.request_count("create", "configmaps", ""), 3);
    // Counts per client: another component names itself with Impersonate-User.
    let other: Api<ConfigMap> = Api::default_namespaced(server.client_as("other"));
    other.get("f").await.unwrap();
    let key = |verb: &str| (verb.to_owned(), "configmaps".to_owned(), String::new());
    let ours = server.request_counts_of("");
    assert_eq!((ours.get(&key("create")), ours.get(&key("get"))), (Some(&3), None));
    assert_eq!(server.request_counts_of("other").get(&key("get")), Some(&1));
    assert_eq!(server.request_count("get", "configmaps", ""), 1);
    server.reset_counts();
    assert_eq!(server.request_count("create", "configmaps", ""), 0);

    // a test acting as an external controller writes status directly
    server
        .put_object(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "ext", "namespace": "default"},
            "spec": {"size": 1}, "status": {"observedGeneration": 9}}))
        .unwrap();
    let api: Api<Widget> = Api::default_namespaced(client);
    assert_eq!(api.get("ext").await.unwrap().status.unwrap().observed_generation, 9);
    assert!(
        server
            .get_object("example.com/v1", "Widget", "default", "ext")
            .is_some()
    );
    assert_eq!(server.list_objects("example.com/v1", "Widget", None).len(), 1);
    let s2 = server.clone();
    let waiter = tokio::spawn(async move {
        s2.wait_for(DEADLINE, |s| {
            s.get_object("example.com/v1", "Widget", "default", "late").is_some()
        })
        .await
    });
    api.create(&PostParams::default(), &widget("late", 1)).await.unwrap();
    assert!(waiter.await.unwrap());
}

#[tokio::test]
async fn crd_lifecycle_and_errors() {
    let (server, client) = setup();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd = crds.get("widgets.example.com").await.unwrap();
    let conds = crd.status.unwrap().conditions.unwrap();
    assert!(conds.iter().any(|c| c.type_ == "Established" && c.status == "True"));
    assert!(conds.iter().any(|c| c.type_ == "NamesAccepted" && c.status == "True"));

    let api: Api<Widget> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &widget("x", 1)).await.unwrap();
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let err = api_err(api.get("x").await.unwrap_err());
    assert_eq!(err.code, 404);
    assert_eq!(err.message, "the server could not find the requested resource");
    server.install_crds(&[Widget::crd()]).unwrap();
    assert!(
        api.get_opt("x").await.unwrap().is_none(),
        "objects are deleted with their CRD"
    );

    // CRD deletion waits for instances with finalizers
    let mut held = widget("held", 1);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let crd = crds.get("widgets.example.com").await.unwrap();
    assert!(crd.metadata.deletion_timestamp.is_some());
    assert!(api.get("held").await.unwrap().metadata.deletion_timestamp.is_some());
    let err = api_err(
        api.create(&PostParams::default(), &widget("late", 1))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 405);
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(crds.get_opt("widgets.example.com").await.unwrap().is_none());
    assert_eq!(api_err(api.get("held").await.unwrap_err()).code, 404);
    server.install_crds(&[Widget::crd()]).unwrap();

    // bad CRD: name does not match
    let mut bad = Widget::crd();
    bad.metadata.name = Some("wrong.example.com".into());
    let err = api_err(crds.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(err.code, 422);
    assert!(
        err.message.starts_with(
            "CustomResourceDefinition.apiextensions.k8s.io \"wrong.example.com\" is invalid: metadata.name"
        ),
        "{}",
        err.message
    );

    // kind mismatch between URL and body
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "z"}})).unwrap())
        .unwrap();
    let err = api_err(client.request::<Value>(req).await.unwrap_err());
    assert_eq!(err.code, 400);
    // malformed JSON
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("Content-Type", "application/json")
        .body(b"{not json".to_vec())
        .unwrap();
    let err = api_err(client.request::<Value>(req).await.unwrap_err());
    assert_eq!(err.code, 400);
    assert!(err.message.contains("json parse error"), "{}", err.message);
}

#[tokio::test]
async fn malformed_requests_are_4xx() {
    let server = Server::new();
    let client = server.client();
    for (method, path, body) in [
        ("GET", "/apis/nope/v1/things", ""),
        ("GET", "/api/v1/namespaces/default/configmaps/a/b/c/d", ""),
        ("GET", "/api/v1/namespaces//configmaps", ""),
        ("GET", "/api/v1/configmaps?labelSelector=a%20in%20(", ""),
        ("GET", "/api/v1/configmaps?fieldSelector=zzz", ""),
        ("GET", "/api/v1/configmaps?limit=1&continue=zz", ""),
        ("POST", "/api/v1/namespaces/default/configmaps", "]]]"),
        ("POST", "/api/v1/namespaces/default/configmaps", "[1,2]"),
        ("PUT", "/api/v1/namespaces/default/configmaps/x", "null"),
        ("PATCH", "/api/v1/namespaces/default/configmaps/x", "{}"),
        ("POST", "/apis", "{}"),
        ("GET", "/api/v1/nodes/a/eviction", ""),
        (
            "GET",
            "/api/v1/namespaces/default/pods?watch=true&resourceVersion=abc",
            "",
        ),
    ] {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("Content-Type", "application/json")
            .body(body.as_bytes().to_vec())
            .unwrap();
        let res = client.send(req.map(kube::client::Body::from)).await.unwrap();
        let code = res.status().as_u16();
        assert!((400..500).contains(&code), "{method} {path} -> {code}");
    }
}

#[tokio::test]
async fn namespace_termination() {
    let (_s, client) = setup();
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {"name": "t"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "t");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["x/y"]}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    nss.delete("t", &DeleteParams::default()).await.unwrap();
    let t = nss.get("t").await.unwrap();
    assert_eq!(t.status.unwrap().phase.as_deref(), Some("Terminating"));
    let mut other = ConfigMap::default();
    other.metadata.name = Some("new".into());
    let err = api_err(cms.create(&PostParams::default(), &other).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        nss.get_opt("t").await.unwrap().is_none(),
        "empty terminating namespace goes away"
    );
}

#[tokio::test]
async fn metadata_only_lists_and_watches() {
    let (_s, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &widget("m", 1)).await.unwrap();
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("m"));
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let t = tokio::spawn(
        watcher(
            Api::<kube::core::PartialObjectMeta<Widget>>::default_namespaced(client.clone()),
            watcher::Config::default(),
        )
        .applied_objects()
        .for_each(move |o| {
            if o.is_ok() {
                s2.fetch_add(1, Ordering::SeqCst);
            }
            futures::future::ready(())
        }),
    );
    api.create(&PostParams::default(), &widget("n", 1)).await.unwrap();
    eventually("metadata watch events", || async {
        (seen.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    t.abort();
}

#[tokio::test]
async fn event_recorder_publishes() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (_s, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client.clone());
    let w = api.create(&PostParams::default(), &widget("ev", 1)).await.unwrap();
    let rec = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test-ctrl".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("hello".into()),
        action: "Test".into(),
        secondary: None,
    };
    rec.publish(&ev, &w.object_ref(&())).await.unwrap();
    rec.publish(&ev, &w.object_ref(&())).await.unwrap();
    let evs: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(client.clone());
    let list = evs.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1, "the second publish updates the series");
    assert_eq!(list.items[0].reason.as_deref(), Some("Tested"));
    assert_eq!(list.items[0].series.as_ref().map(|s| s.count), Some(2));

    // the same event through the core v1 view, selected as `kubectl describe` does
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(client.clone());
    let sel = format!(
        "involvedObject.name=ev,involvedObject.namespace=default,involvedObject.kind=Widget,involvedObject.uid={}",
        w.uid().unwrap()
    );
    let got = core.list(&ListParams::default().fields(&sel)).await.unwrap();
    assert_eq!(got.items.len(), 1);
    let e = &got.items[0];
    assert_eq!(e.message.as_deref(), Some("hello"));
    assert_eq!(e.involved_object.name.as_deref(), Some("ev"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("Widget"));
    assert_eq!(e.reporting_component.as_deref(), Some("test-ctrl"));
    assert_eq!(e.reporting_instance.as_deref(), Some("test-ctrl"));
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("test-ctrl")
    );
    assert_eq!(e.action.as_deref(), Some("Test"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(Some(2)));
    assert!(e.event_time.is_some());
    let other = core
        .list(&ListParams::default().fields("involvedObject.name=other"))
        .await
        .unwrap();
    assert!(other.items.is_empty());
    let name = e.metadata.name.clone().unwrap();

    // the Table `kubectl get events` prints: no leading Name column
    let req = http::Request::get("/api/v1/namespaces/default/events")
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let t: Value = client.request(req).await.unwrap();
    let cols: Vec<(&str, i64)> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_i64().unwrap()))
        .filter(|(_, p)| *p == 0)
        .collect();
    assert_eq!(
        cols.iter().map(|c| c.0).collect::<Vec<_>>(),
        ["Last Seen", "Type", "Reason", "Object", "Message"]
    );
    let row = &t["rows"][0]["cells"];
    assert_eq!(row[1], "Normal");
    assert_eq!(row[2], "Tested");
    assert_eq!(row[3], "widget/ev");
    assert_eq!(row[6], "hello");
    assert_eq!(row[8], 2);

    // a watch on the core view sees the Recorder's series PATCH
    let mut stream = core
        .watch(
            &kube::api::WatchParams::default(),
            &got.metadata.resource_version.clone().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    rec.publish(&ev, &w.object_ref(&())).await.unwrap();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Modified(e) => {
            assert_eq!(e.series.and_then(|s| s.count), Some(3));
            assert_eq!(e.message.as_deref(), Some("hello"));
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    // writes through the core view show up in events.k8s.io/v1 and vice versa
    core.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"message": "changed", "count": 5, "source": {"component": "x"}})),
    )
    .await
    .unwrap();
    let n = evs.get(&name).await.unwrap();
    assert_eq!(n.note.as_deref(), Some("changed"));
    assert_eq!(n.deprecated_count, Some(5));
    assert_eq!(n.deprecated_source.and_then(|s| s.component).as_deref(), Some("x"));
    assert_eq!(n.reporting_controller.as_deref(), Some("test-ctrl"));
    let created: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "legacy.1"},
        "involvedObject": {"kind": "Widget", "name": "ev", "namespace": "default"},
        "reason": "Old", "message": "legacy", "type": "Warning",
        "source": {"component": "kubelet", "host": "n1"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1,
    }))
    .unwrap();
    let out = core.create(&PostParams::default(), &created).await.unwrap();
    assert_eq!(out.message.as_deref(), Some("legacy"));
    let n = evs.get("legacy.1").await.unwrap();
    assert_eq!(n.note.as_deref(), Some("legacy"));
    assert_eq!(n.regarding.and_then(|r| r.name).as_deref(), Some("ev"));
    assert_eq!(n.reporting_controller.as_deref(), Some("kubelet"));
    assert_eq!(n.reporting_instance.as_deref(), Some("n1"));
    assert!(n.deprecated_first_timestamp.is_some());
    let by_regarding = evs
        .list(&ListParams::default().fields("regarding.name=ev,reason=Old"))
        .await
        .unwrap();
    assert_eq!(by_regarding.items.len(), 1);
    let raw: Value = client
        .request(
            http::Request::get("/apis/events.k8s.io/v1/namespaces/default/events/legacy.1")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        (raw["apiVersion"].as_str(), raw["kind"].as_str()),
        (Some("events.k8s.io/v1"), Some("Event"))
    );
    assert!(
        raw.get("message").is_none() && raw.get("involvedObject").is_none(),
        "{raw}"
    );
    evs.delete("legacy.1", &DeleteParams::default()).await.unwrap();
    assert_eq!(core.list(&ListParams::default()).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn apps_workloads_own_pods() {
    use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
    let (server, client) = setup();
    let spec = json!({"selector": {"matchLabels": {"app": "a"}},
        "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}});
    let ds: Api<DaemonSet> = Api::default_namespaced(client.clone());
    let d = ds
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "agent"}, "spec": spec, "status": {"numberReady": 9}}))
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(d.status.is_none(), "status is a subresource");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut p: Pod = serde_json::from_value(json!({"metadata": {"name": "agent-x"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}))
    .unwrap();
    p.metadata.owner_references = Some(vec![d.controller_owner_ref(&()).unwrap()]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    assert!(
        pods.get_opt("agent-x").await.unwrap().is_some(),
        "owner exists: pod kept"
    );
    ds.patch_status(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "numberReady": 1, "numberMisscheduled": 0}})),
    )
    .await
    .unwrap();
    let req = http::Request::get("/apis/apps/v1/namespaces/default/daemonsets")
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let t: Value = client.request(req).await.unwrap();
    assert_eq!(t["rows"][0]["cells"][3], 1, "{t}");
    ds.delete("agent", &DeleteParams::default()).await.unwrap();
    assert!(
        pods.get_opt("agent-x").await.unwrap().is_none(),
        "owner gone: pod collected"
    );

    let rs: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    rs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "r"}, "spec": spec})).unwrap(),
    )
    .await
    .unwrap();
    let sts: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let mut st: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": spec})).unwrap();
    st.spec.replicas = Some(2);
    sts.create(&PostParams::default(), &st).await.unwrap();
    let r = server.get_object("apps/v1", "ReplicaSet", "default", "r").unwrap();
    assert_eq!(r["spec"]["replicas"], 1, "defaulted like the apiserver");
    assert!(server.get_object("apps/v1", "StatefulSet", "default", "s").is_some());
    let disc: Value = client
        .request(http::Request::get("/apis/apps/v1").body(Vec::new()).unwrap())
        .await
        .unwrap();
    let names: Vec<&str> = disc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for n in [
        "daemonsets",
        "daemonsets/status",
        "replicasets",
        "statefulsets/status",
        "statefulsets/scale",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }

    // the scale subresource reads and writes the parent's replicas
    let scale = sts.get_scale("s").await.unwrap();
    assert_eq!(scale.spec.clone().unwrap().replicas, Some(2));
    assert_eq!(scale.status.clone().unwrap().selector.as_deref(), Some("app=a"));
    sts.patch_scale(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    assert_eq!(sts.get("s").await.unwrap().spec.replicas, Some(5));
    let mut stale = scale.clone();
    stale.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(1) });
    let err = api_err(
        sts.replace_scale("s", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    let err = api_err(
        sts.patch_scale(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": -1}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
}

#[tokio::test]
async fn lease_manager_mutual_exclusion() {
    use kube_lease_manager::LeaseManagerBuilder;
    let (_s, client) = setup();
    let mut rxs = vec![];
    let mut tasks = vec![];
    for id in ["a", "b"] {
        let m = LeaseManagerBuilder::new(client.clone(), "leader")
            .with_identity(id)
            .with_duration(2)
            .with_grace(1)
            .build()
            .await
            .unwrap();
        let (rx, task) = m.watch().await;
        rxs.push(rx);
        tasks.push(task);
    }
    let leaders = |rxs: &Vec<tokio::sync::watch::Receiver<bool>>| rxs.iter().filter(|r| *r.borrow()).count();
    eventually("one leader", || {
        let n = leaders(&rxs);
        async move { (n == 1).then_some(()) }
    })
    .await;
    let end = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < end {
        assert!(leaders(&rxs) <= 1, "two leaders at once");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let leader = rxs.iter().position(|r| *r.borrow()).unwrap();
    let rx = rxs.remove(leader);
    drop(rx);
    let task = tasks.remove(leader);
    let _ = tokio::time::timeout(DEADLINE, task).await;
    eventually("the other takes over", || {
        let n = leaders(&rxs);
        async move { (n == 1).then_some(()) }
    })
    .await;
    drop(rxs);
}

#[tokio::test]
async fn fuzzish_inputs_never_5xx() {
    let (server, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &widget("f", 1)).await.unwrap();
    let csr = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "c"}, "spec": {"request": "AA", "signerName": "x/y"}});
    server.put_object(csr).unwrap();
    let paths = [
        "/apis/example.com/v1/namespaces/default/widgets",
        "/apis/example.com/v1/namespaces/default/widgets/f",
        "/apis/example.com/v1/namespaces/default/widgets/f/status",
        "/apis/example.com/v1/widgets",
        "/api/v1/namespaces/default/pods/f/eviction",
        "/api/v1/namespaces/default",
        "/api/v1/namespaces/default/status",
        "/api/v1/nodes/f",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/c/approval",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
        "/api/v1/namespaces/default/configmaps?labelSelector=%21%21&fieldSelector=a%3D%3D%3D",
        "/%zz/../..",
    ];
    let deep = format!("{}{}", "[".repeat(500), "]".repeat(500));
    let bodies: Vec<(&str, String)> = vec![
        ("application/json", "".into()),
        ("application/json", "null".into()),
        ("application/json", "[1]".into()),
        ("application/json", "\"str\"".into()),
        (
            "application/json",
            r#"{"metadata": "x", "spec": 5, "status": []}"#.into(),
        ),
        (
            "application/json",
            r#"{"metadata": {"name": 7, "labels": "x", "finalizers": "y", "ownerReferences": 3}}"#.into(),
        ),
        (
            "application/json",
            r#"{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "f"}, "spec": {"size": "big"}}"#
                .into(),
        ),
        (
            "application/json",
            r#"{"spec": {"names": "x", "versions": [{"schema": {"openAPIV3Schema": 5}}]}}"#.into(),
        ),
        ("application/json", deep.clone()),
        ("application/yaml", "a: &a [*a]".into()),
        ("application/yaml", "- - - -".into()),
        ("application/merge-patch+json", "[1]".into()),
        ("application/merge-patch+json", "null".into()),
        (
            "application/json-patch+json",
            r#"[{"op": "replace", "path": "", "value": 3}]"#.into(),
        ),
        ("application/json-patch+json", r#"{"op": "x"}"#.into()),
        (
            "application/strategic-merge-patch+json",
            r#"{"$patch": "replace"}"#.into(),
        ),
        ("application/apply-patch+yaml", "5".into()),
        ("application/apply-patch+yaml", "metadata: {name: f}\nspec: [1]".into()),
        ("application/vnd.kubernetes.protobuf", "k8s\0".into()),
    ];
    for path in paths {
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            for (ct, body) in &bodies {
                let uri = if method == "PATCH" && *ct == "application/apply-patch+yaml" {
                    format!("{path}?fieldManager=fz")
                } else {
                    path.to_string()
                };
                let Ok(req) = http::Request::builder()
                    .method(method)
                    .uri(&uri)
                    .header("Content-Type", *ct)
                    .body(body.clone().into_bytes())
                else {
                    continue;
                };
                let res = client.send(req.map(kube::client::Body::from)).await.unwrap();
                let code = res.status().as_u16();
                assert!(code < 500, "{method} {uri} [{ct}] {body:.60} -> {code}");
            }
        }
    }
    // the server still works
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    assert!(nss.list(&ListParams::default()).await.is_ok());
    drop(api);
}

#[tokio::test]
async fn many_owned_objects_stay_fast() {
    let (server, _client) = setup();
    let owner = server
        .put_object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": "default"}}),
        )
        .unwrap();
    let uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    for i in 0..1500 {
        server
            .put_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("c{i}"), "namespace": "default",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}}))
            .unwrap();
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(10), "1500 owned writes took {elapsed:?}");
    let started = std::time::Instant::now();
    server.delete_object("v1", "ConfigMap", "default", "owner").unwrap();
    assert!(
        server.list_objects("v1", "ConfigMap", Some("default")).is_empty(),
        "all dependents collected"
    );
    eprintln!("1500 owned writes: {elapsed:?}, cascade: {:?}", started.elapsed());
}

#[tokio::test]
async fn secret_string_data_is_folded_into_data() {
    let (_s, client) = setup();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(client.clone());
    let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({"metadata": {"name": "sd"},
        "data": {"kept": "a2VwdA=="}, "stringData": {"value": "{not json", "kept": "over"}}))
    .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let got = secrets.get("sd").await.unwrap();
    assert!(got.string_data.is_none(), "stringData is write-only");
    let data = got.data.unwrap();
    assert_eq!(data["value"].0, b"{not json");
    assert_eq!(data["kept"].0, b"over", "stringData wins over data for the same key");
}

#[tokio::test]
async fn token_requests_mint_tokens_for_existing_service_accounts_only() {
    use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    let (_s, client) = setup();
    let sas: Api<ServiceAccount> = Api::default_namespaced(client.clone());
    let request = |seconds: Option<i64>| TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: seconds,
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let err = api_err(
        sas.create_token_request("ghost", &PostParams::default(), &request(None))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (404, "serviceaccounts \"ghost\" not found")
    );

    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let before = chrono::Utc::now();
    let minted = sas
        .create_token_request("robot", &PostParams::default(), &request(Some(86_400)))
        .await
        .unwrap();
    let status = minted.status.unwrap();
    let token = status.token.unwrap();
    assert!(token.len() > 40, "an opaque token");
    let lifetime = status.expiration_timestamp.unwrap().0.as_second() - before.timestamp();
    assert!((86_399..=86_402).contains(&lifetime), "{lifetime}");
    let spec = minted.spec.unwrap();
    assert_eq!(spec.audiences.unwrap(), ["https://kubernetes.default.svc"]);
    let again = sas
        .create_token_request("robot", &PostParams::default(), &request(None))
        .await
        .unwrap();
    assert_ne!(
        again.status.unwrap().token.unwrap(),
        token,
        "every request mints a new token"
    );
    assert_eq!(
        again.spec.unwrap().expiration_seconds,
        Some(3600),
        "the server's default lifetime"
    );

    let err = api_err(
        sas.create_token_request("robot", &PostParams::default(), &request(Some(599)))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(err.message.contains("less than 10 minutes"), "{}", err.message);

    // A token bound to an object needs the object, with its uid.
    let mut bound = request(None);
    bound.spec.as_mut().unwrap().bound_object_ref = Some(BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Secret".into()),
        name: Some("holder".into()),
        uid: None,
    });
    let err = api_err(
        sas.create_token_request("robot", &PostParams::default(), &bound)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404);
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let holder: Secret = serde_json::from_value(json!({"metadata": {"name": "holder"}})).unwrap();
    let holder = secrets.create(&PostParams::default(), &holder).await.unwrap();
    bound.spec.as_mut().unwrap().bound_object_ref.as_mut().unwrap().uid = holder.metadata.uid.clone();
    sas.create_token_request("robot", &PostParams::default(), &bound)
        .await
        .unwrap();
    bound.spec.as_mut().unwrap().bound_object_ref.as_mut().unwrap().uid = Some("other".into());
    let err = api_err(
        sas.create_token_request("robot", &PostParams::default(), &bound)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);

    // Discovery lists the subresource as kubectl expects it.
    let resources = client.list_core_api_resources("v1").await.unwrap();
    let token = resources
        .resources
        .iter()
        .find(|r| r.name == "serviceaccounts/token")
        .unwrap();
    assert_eq!(
        (token.kind.as_str(), token.group.as_deref(), token.verbs.as_slice()),
        (
            "TokenRequest",
            Some("authentication.k8s.io"),
            &["create".to_owned()][..]
        )
    );
}
