//! Publishes Kubernetes Events, aggregated as client-go's events library does: the first
//! occurrence is created, repeats within [`SERIES_WINDOW`] only bump the Event's `series`.
//!
//! kube-runtime's `Recorder` does the same but keeps a full copy of every Event it wrote for
//! six minutes (about 3 KB each: 6 MB after 1000 windows open) and sweeps that cache on every
//! publish. This one keeps, per series, its key's hash, the Event's name and its count.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};

/// How long a repeat joins the last Event's series rather than making a new Event (client-go
/// and kube-runtime use the same six minutes).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// One series: the Event that counts it.
struct Series {
    namespace: String,
    name: String,
    count: i32,
    last: Instant,
}

/// The manager's Event publisher, shared by every controller.
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    series: Mutex<Book>,
}

#[derive(Default)]
struct Book {
    by_key: HashMap<u64, Series>,
    swept: Option<Instant>,
}

impl Book {
    /// Forget series older than the window, at most once a minute, so a burst costs O(1) each.
    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(60))
        {
            return;
        }
        self.by_key.retain(|_, s| now.duration_since(s.last) < SERIES_WINDOW);
        self.swept = Some(now);
    }
}

/// What makes two Events one series, as client-go's events library keys them.
fn series_key(reporter: &Reporter, ev: &Event, regarding: &ObjectReference) -> u64 {
    let mut h = DefaultHasher::new();
    matches!(ev.type_, EventType::Warning).hash(&mut h);
    (&ev.action, &ev.reason, &reporter.controller, &reporter.instance).hash(&mut h);
    for r in std::iter::once(regarding).chain(ev.secondary.as_ref()) {
        (&r.api_version, &r.kind, &r.namespace, &r.name, &r.uid, &r.field_path).hash(&mut h);
    }
    h.finish()
}

impl EventRecorder {
    /// A recorder reporting as `reporter`.
    #[must_use]
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            series: Mutex::default(),
        }
    }

    /// Publish `ev` about `regarding`: a new Event, or a repeat counted on the last one.
    ///
    /// # Errors
    /// When the API server refuses the Event.
    pub async fn publish(&self, ev: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        let key = series_key(&self.reporter, ev, regarding);
        let now = Instant::now();
        let repeat = {
            let mut book = self.book();
            book.sweep(now);
            book.by_key
                .get(&key)
                .filter(|s| now.duration_since(s.last) < SERIES_WINDOW)
                .map(|s| (s.namespace.clone(), s.name.clone(), s.count + 1))
        };
        let written = match repeat {
            Some((namespace, name, count)) => match self.count_repeat(&namespace, &name, count).await {
                // The Event expired on the server (its TTL is an hour by default): start anew.
                Err(kube::Error::Api(e)) if e.code == 404 => self.create(ev, regarding).await?,
                other => other.map(|()| Series {
                    namespace,
                    name,
                    count,
                    last: now,
                })?,
            },
            None => self.create(ev, regarding).await?,
        };
        let mut book = self.book();
        book.by_key.insert(key, Series { last: now, ..written });
        Ok(())
    }

    /// The series book; a panic elsewhere cannot leave it inconsistent (each update is one insert).
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.series.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn count_repeat(&self, namespace: &str, name: &str, count: i32) -> kube::Result<()> {
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let series = EventSeries {
            count,
            last_observed_time: MicroTime(Timestamp::now()),
        };
        let patch = serde_json::json!({ "series": series });
        events
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    async fn create(&self, ev: &Event, regarding: &ObjectReference) -> kube::Result<Series> {
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".to_owned());
        let now = Timestamp::now();
        let controller = &self.reporter.controller;
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(controller),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            type_: Some(match ev.type_ {
                EventType::Normal => "Normal".to_owned(),
                EventType::Warning => "Warning".to_owned(),
            }),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(self.reporter.instance.clone().unwrap_or_else(|| controller.clone())),
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            ..K8sEvent::default()
        };
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        events.create(&PostParams::default(), &event).await?;
        Ok(Series {
            namespace,
            name,
            count: 1,
            last: Instant::now(),
        })
    }
}

#[cfg(all(test, feature = "sandbox"))]
mod tests {
    use super::*;
    use kube::api::{DeleteParams, ListParams};

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            note: Some(format!("{reason} happened")),
            action: "Reconcile".to_owned(),
            secondary: None,
        }
    }

    #[tokio::test]
    async fn repeats_count_on_one_event_and_a_deleted_one_starts_a_new_series() {
        let server = memkube::Server::new();
        let events: Api<K8sEvent> = Api::namespaced(server.client(), "default");
        let reporter = Reporter {
            controller: "caplv-manager".to_owned(),
            instance: None,
        };
        let recorder = EventRecorder::new(server.client(), reporter);
        let regarding = ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("ConfigMap".to_owned()),
            namespace: Some("default".to_owned()),
            name: Some("cm".to_owned()),
            uid: Some("u1".to_owned()),
            ..ObjectReference::default()
        };
        for _ in 0..3 {
            recorder.publish(&event("HostUnreachable"), &regarding).await.unwrap();
        }
        recorder.publish(&event("HostKeyMismatch"), &regarding).await.unwrap();
        let mut written = events.list(&ListParams::default()).await.unwrap().items;
        written.sort_by_key(|e| e.reason.clone());
        let summary: Vec<_> = written
            .iter()
            .map(|e| (e.reason.clone().unwrap(), e.series.as_ref().map(|s| s.count)))
            .collect();
        assert_eq!(
            summary,
            [
                ("HostKeyMismatch".to_owned(), None),
                ("HostUnreachable".to_owned(), Some(3))
            ]
        );
        let unreachable = &written[1];
        assert_eq!(unreachable.note.as_deref(), Some("HostUnreachable happened"));
        assert_eq!(unreachable.reporting_instance.as_deref(), Some("caplv-manager"));
        assert_eq!(
            unreachable.regarding.as_ref().and_then(|r| r.uid.as_deref()),
            Some("u1")
        );

        // The server dropped the Event (its TTL): the next repeat creates a fresh one.
        let name = unreachable.metadata.name.clone().unwrap();
        events.delete(&name, &DeleteParams::default()).await.unwrap();
        recorder.publish(&event("HostUnreachable"), &regarding).await.unwrap();
        let after = events.list(&ListParams::default()).await.unwrap().items;
        let fresh: Vec<_> = after
            .iter()
            .filter(|e| e.reason.as_deref() == Some("HostUnreachable"))
            .collect();
        assert_eq!(fresh.len(), 1);
        assert_ne!(fresh[0].metadata.name.as_deref(), Some(name.as_str()));
        assert!(fresh[0].series.is_none(), "a new series starts at one");
    }

    #[test]
    fn the_series_key_tells_objects_reasons_and_types_apart() {
        let reporter = Reporter {
            controller: "c".to_owned(),
            instance: None,
        };
        let a = ObjectReference {
            name: Some("a".to_owned()),
            uid: Some("1".to_owned()),
            ..ObjectReference::default()
        };
        let b = ObjectReference {
            uid: Some("2".to_owned()),
            ..a.clone()
        };
        let warn = event("R");
        let normal = Event {
            type_: EventType::Normal,
            ..event("R")
        };
        let key = |e: &Event, r: &ObjectReference| series_key(&reporter, e, r);
        assert_eq!(key(&warn, &a), key(&event("R"), &a));
        assert_ne!(key(&warn, &a), key(&warn, &b), "a recreated object is another series");
        assert_ne!(key(&warn, &a), key(&event("S"), &a));
        assert_ne!(key(&warn, &a), key(&normal, &a));
    }
}
