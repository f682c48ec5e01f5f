//! Split of the kube_rs fidelity suite.

use super::*;

#[tokio::test]
async fn watch_replay_selectors_and_expiry() {
    let (server, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client);
    let w = api.create(&PostParams::default(), &widget("a", 1)).await.unwrap();
    let rv = w.resource_version().unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 2}})),
    )
    .await
    .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}})),
    )
    .await
    .unwrap();

    // resume from rv replays the changes after it
    let mut s = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match s.try_next().await.unwrap().unwrap() {
        WatchEvent::Modified(o) => assert_eq!(o.spec.size, 2),
        e => panic!("unexpected {e:?}"),
    }
    assert!(matches!(s.try_next().await.unwrap().unwrap(), WatchEvent::Modified(_)));

    // label-filtered watch: stop matching -> DELETED, match again -> ADDED
    let mut f = api
        .watch(&WatchParams::default().labels("sel=yes").timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(f.try_next().await.unwrap().unwrap(), WatchEvent::Added(_)));
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "no"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(f.try_next().await.unwrap().unwrap(), WatchEvent::Deleted(_)));
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(f.try_next().await.unwrap().unwrap(), WatchEvent::Added(_)));
    api.delete("a", &DeleteParams::default()).await.unwrap();
    match f.try_next().await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => assert_eq!(o.spec.size, 2, "DELETED carries the final object"),
        e => panic!("unexpected {e:?}"),
    }

    // bookmarks arrive periodically
    let mut b = api
        .watch(
            &WatchParams::default().timeout(5),
            &server.resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    assert!(matches!(b.try_next().await.unwrap().unwrap(), WatchEvent::Bookmark(_)));

    // after compaction an old resourceVersion is 410 Expired
    server.compact();
    let mut e = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match e.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(st) => assert_eq!((st.code, st.reason.as_str()), (410, "Expired")),
        e => panic!("unexpected {e:?}"),
    }
}

#[tokio::test]
async fn runtime_watcher_recovers_after_compaction() {
    let (server, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client);
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen2 = seen.clone();
    let task = tokio::spawn(
        watcher(api.clone(), watcher::Config::default())
            .applied_objects()
            .for_each(move |o| {
                if let Ok(o) = o {
                    seen2.lock().unwrap().push(format!("{}:{}", o.name_any(), o.spec.size));
                }
                futures::future::ready(())
            }),
    );
    api.create(&PostParams::default(), &widget("a", 1)).await.unwrap();
    let has = |s: &str| seen.lock().unwrap().iter().any(|x| x == s);
    eventually("first event", || async { has("a:1").then_some(()) }).await;
    // compact, cut the watch, change things: the watcher must relist after 410
    server.compact();
    server.cut_watches();
    api.create(&PostParams::default(), &widget("b", 1)).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 3}})),
    )
    .await
    .unwrap();
    eventually("events after relist", || async {
        (has("b:1") && has("a:3")).then_some(())
    })
    .await;
    task.abort();

    // streaming lists (sendInitialEvents) work too
    let seen3 = Arc::new(AtomicUsize::new(0));
    let s3 = seen3.clone();
    let t = tokio::spawn(
        watcher(api.clone(), watcher::Config::default().streaming_lists())
            .applied_objects()
            .for_each(move |o| {
                if o.is_ok() {
                    s3.fetch_add(1, Ordering::SeqCst);
                }
                futures::future::ready(())
            }),
    );
    eventually("streaming list", || async {
        (seen3.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    t.abort();
}

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed: {0}")]
struct ReconcileError(String);

struct Ctx {
    api: Api<Widget>,
    cleanups: AtomicUsize,
}

async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    finalizer::finalizer(&ctx.api, "example.com/cleanup", w, |ev| async {
        match ev {
            finalizer::Event::Apply(w) => {
                let generation = w.metadata.generation.unwrap_or(0);
                let st = json!({"status": {"observedGeneration": generation,
                    "conditions": [{"type": "Ready", "status": "True"}]}});
                ctx.api
                    .patch_status(&w.name_any(), &PatchParams::default(), &Patch::Merge(st))
                    .await
                    .map_err(|e| ReconcileError(e.to_string()))?;
                Ok::<_, ReconcileError>(Action::await_change())
            }
            finalizer::Event::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ReconcileError(e.to_string()))
}

#[tokio::test]
async fn controller_reconciles_create_update_delete() {
    let (_s, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client);
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        cleanups: AtomicUsize::new(0),
    });
    let ctrl = Controller::new(api.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(100)),
            ctx.clone(),
        )
        .for_each(|_| futures::future::ready(()));
    let handle = tokio::spawn(ctrl);

    api.create(&PostParams::default(), &widget("c", 1)).await.unwrap();
    eventually("observedGeneration 1", || async {
        let w = api.get("c").await.ok()?;
        (w.status?.observed_generation == 1).then_some(())
    })
    .await;
    assert!(
        api.get("c")
            .await
            .unwrap()
            .finalizers()
            .contains(&"example.com/cleanup".to_string())
    );

    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 2}})),
    )
    .await
    .unwrap();
    eventually("observedGeneration 2", || async {
        let w = api.get("c").await.ok()?;
        (w.status?.observed_generation == 2).then_some(())
    })
    .await;

    api.delete("c", &DeleteParams::default()).await.unwrap();
    eventually("object gone after cleanup", || async {
        api.get_opt("c").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
    handle.abort();
}

#[tokio::test]
async fn watch_timeout_ends_the_stream() {
    let (_s, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client);
    let started = tokio::time::Instant::now();
    let s = api
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), "0")
        .await
        .unwrap();
    let n = tokio::time::timeout(DEADLINE, s.count()).await.unwrap();
    assert_eq!(n, 0);
    assert!(started.elapsed() >= Duration::from_millis(900));
}

/// A watcher falls behind only by its own kind's events: a burst of another kind, larger than
/// the buffer, leaves it connected (as the genuine API server's per-resource watch caches do).
#[tokio::test]
async fn a_burst_of_another_kind_does_not_cut_a_watch() {
    let (server, mut s) = widget_watch_with_a_small_buffer().await;
    // Nobody reads the Widget watch while many ConfigMaps change.
    for i in 0..600 {
        server
            .put_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("c{i}"), "namespace": "default"}}))
            .unwrap();
    }
    server
        .put_object(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "after", "namespace": "default"}, "spec": {"size": 1}}))
        .unwrap();
    let first = tokio::time::timeout(DEADLINE, s.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match first {
        WatchEvent::Added(w) => assert_eq!(w.metadata.name.as_deref(), Some("after")),
        other => panic!("the Widget watch should carry on, got {other:?}"),
    }
}

/// A server whose watchers buffer 16 events, and a Widget watch on it that nobody reads yet.
async fn widget_watch_with_a_small_buffer() -> (
    Server,
    futures::stream::BoxStream<'static, kube::Result<WatchEvent<Widget>>>,
) {
    let server = Server::with_config(memkube::Config {
        watch_buffer: 16,
        ..Default::default()
    });
    server.install_crds(&[Widget::crd()]).unwrap();
    let api: Api<Widget> = Api::default_namespaced(server.client());
    let s = api
        .watch(&WatchParams::default().disable_bookmarks(), "0")
        .await
        .unwrap()
        .boxed();
    (server, s)
}

#[tokio::test]
async fn lagging_watcher_gets_410() {
    let (server, mut s) = widget_watch_with_a_small_buffer().await;
    // nobody reads the stream while many events happen
    for i in 0..600 {
        server
            .put_object(json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": format!("w{i}"), "namespace": "default"}, "spec": {"size": 1}}))
            .unwrap();
    }
    let got_410 = tokio::time::timeout(DEADLINE, async {
        while let Some(ev) = s.next().await {
            if let Ok(WatchEvent::Error(st)) = ev {
                return st.code == 410;
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(
        got_410,
        "a lagging watcher must be told 410 instead of silently losing events"
    );
}

/// Watchers of one event with different views (whole objects, metadata only, a selector that
/// turns a change into ADDED) each get their own line, however many watch the same view.
#[tokio::test]
async fn watchers_of_one_event_get_their_own_view_of_it() {
    let (_server, client) = setup();
    let api: Api<Widget> = Api::default_namespaced(client);
    let params = WatchParams::default().timeout(5);
    let mut whole = [
        api.watch(&params, "0").await.unwrap().boxed(),
        api.watch(&params, "0").await.unwrap().boxed(),
    ];
    let mut meta = api.watch_metadata(&params, "0").await.unwrap().boxed();
    let mut selected = api.watch(&params.clone().labels("sel=yes"), "0").await.unwrap().boxed();
    api.create(&PostParams::default(), &widget("a", 1)).await.unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}, "spec": {"size": 2}})),
    )
    .await
    .unwrap();
    for s in &mut whole {
        assert!(matches!(next_event(s).await, WatchEvent::Added(w) if w.spec.size == 1));
        assert!(matches!(next_event(s).await, WatchEvent::Modified(w) if w.spec.size == 2));
    }
    for _ in 0..2 {
        match next_event(&mut meta).await {
            WatchEvent::Added(m) | WatchEvent::Modified(m) => {
                assert_eq!(m.types.as_ref().map(|t| t.kind.as_str()), Some("PartialObjectMetadata"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // The change that made it match is this watcher's ADDED, with the object as changed.
    assert!(matches!(next_event(&mut selected).await, WatchEvent::Added(w) if w.spec.size == 2));
}

async fn next_event<T>(s: &mut futures::stream::BoxStream<'_, kube::Result<WatchEvent<T>>>) -> WatchEvent<T> {
    tokio::time::timeout(DEADLINE, s.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}
