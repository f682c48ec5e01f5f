//! Watch streams: initial ADDED events or replay from a resourceVersion, live events filtered
//! like the apiserver's watch cache (selector transitions become ADDED/DELETED), bookmarks,
//! 410 on a compacted or lagging log, timeouts, and the test hook that cuts all streams.

use crate::ops::present;
use crate::registry::ResourceInfo;
use crate::selectors::Selectors;
use crate::server::Shared;
use crate::status::{ApiError, ApiResult};
use crate::store::{Event, EventType};
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// Query parameters of a watch.
#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    /// `resourceVersion`.
    pub resource_version: String,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `sendInitialEvents=true`.
    pub send_initial_events: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Render each object as a one-row Table (`includeObject` mode), as `kubectl get -w` asks.
    pub table: Option<String>,
    /// Send `PartialObjectMetadata` objects (metadata-only watches).
    pub meta_only: bool,
}

struct Filter {
    info: Arc<ResourceInfo>,
    ns: Option<String>,
    sel: Selectors,
    table: Option<String>,
    meta_only: bool,
    /// This watcher's view of an event per event type (ADDED, MODIFIED, DELETED): watchers with
    /// equal views get equal lines, so one rendering serves them all. `None` for Table watches.
    views: Option<[String; 3]>,
}

impl Filter {
    fn matches(&self, o: &Value) -> bool {
        self.ns.as_deref().is_none_or(|ns| crate::meta::namespace(o) == ns) && self.sel_matches(o)
    }

    /// Selectors see the object as this watcher's version shows it (Events convert).
    fn sel_matches(&self, o: &Value) -> bool {
        if crate::events::is_event(&self.info) && !self.sel.fields.is_empty() {
            return self.sel.matches(&present(&self.info, o.clone()));
        }
        self.sel.matches(o)
    }

    fn new(info: Arc<ResourceInfo>, ns: Option<String>, sel: Selectors, p: &WatchParams) -> Self {
        let views = p.table.is_none().then(|| {
            let view = format!("{} {} {}", info.api_version(), info.kind, p.meta_only);
            [EventType::Added, EventType::Modified, EventType::Deleted].map(|t| format!("{} {view}", t.as_str()))
        });
        Self {
            info,
            ns,
            sel,
            table: p.table.clone(),
            meta_only: p.meta_only,
            views,
        }
    }

    /// The line this watcher sends for store event `e`, if it sees it at all.
    fn event_line(&self, e: &Event) -> Option<Bytes> {
        let t = self.translate(e)?;
        let Some(views) = &self.views else {
            return Some(self.line(t.as_str(), e.object.clone()));
        };
        let view = &views[match t {
            EventType::Added => 0,
            EventType::Modified => 1,
            EventType::Deleted => 2,
        }];
        let mut rendered = e.rendered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, line)) = rendered.iter().find(|(v, _)| v == view) {
            return Some(line.clone());
        }
        let line = self.line(t.as_str(), e.object.clone());
        rendered.push((view.clone(), line.clone()));
        Some(line)
    }

    /// Translate a store event into what this watcher sees, if anything.
    fn translate(&self, e: &Event) -> Option<EventType> {
        if e.key != self.info.store_key() {
            return None;
        }
        let now = self.matches(&e.object);
        let before = e.old.as_ref().map(|o| self.matches(o));
        let t = match (e.etype, before, now) {
            (EventType::Added, _, true) => EventType::Added,
            (EventType::Deleted, _, true) => EventType::Deleted,
            (EventType::Modified, Some(true), true) => EventType::Modified,
            (EventType::Modified, Some(false) | None, true) => EventType::Added,
            (EventType::Modified, Some(true), false) => EventType::Deleted,
            _ => return None,
        };
        Some(t)
    }

    fn line(&self, t: &str, obj: Value) -> Bytes {
        let obj = match (t, &self.table) {
            ("ERROR" | "BOOKMARK", _) => obj,
            (_, Some(include)) => {
                let rv = crate::meta::resource_version(&obj).to_string();
                crate::table::table(&self.info, &[present(&self.info, obj)], &rv, include)
            }
            _ if self.meta_only => crate::table::partial(&obj),
            _ => present(&self.info, obj),
        };
        let mut s = json!({"type": t, "object": obj}).to_string();
        s.push('\n');
        Bytes::from(s)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        self.line(
            "BOOKMARK",
            json!({"apiVersion": self.info.api_version(), "kind": self.info.kind, "metadata": md}),
        )
    }
}

fn expired_line(f: &Filter, msg: &str) -> Bytes {
    f.line("ERROR", ApiError::expired(msg).to_status())
}

/// Start a watch; returns the streaming response.
pub fn start(
    shared: Arc<Shared>,
    info: Arc<ResourceInfo>,
    ns: Option<String>,
    sel: Selectors,
    p: WatchParams,
) -> ApiResult<Response> {
    let filter = Filter::new(info, ns, sel, &p);
    let rv_param = p.resource_version.as_str();
    let mut first: Vec<Bytes> = vec![];
    let (rx, start_rv, expired) = {
        let mut st = shared.lock();
        let key = filter.info.store_key();
        let start_rv = st.store.rv();
        let mut expired = false;
        if p.send_initial_events || rv_param.is_empty() || rv_param == "0" {
            for o in st.store.list(&key, filter.ns.as_deref()) {
                if filter.sel_matches(&o) {
                    first.push(filter.line("ADDED", o));
                }
            }
            if p.send_initial_events {
                first.push(filter.bookmark(start_rv, true));
            }
        } else {
            let rv: u64 = rv_param
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv_param}")))?;
            match st.store.events_since(&key, rv) {
                Ok(evs) => {
                    first.extend(evs.iter().filter_map(|e| filter.event_line(e)));
                }
                Err(oldest) => {
                    first.push(expired_line(
                        &filter,
                        &format!("too old resource version: {rv} ({oldest})"),
                    ));
                    expired = true;
                }
            }
        }
        (st.store.subscribe_key(&key), start_rv, expired)
    };
    let (tx, out) = mpsc::channel::<Bytes>(256);
    let mut cut = shared.cut_rx();
    let period = shared.config.bookmark_interval;
    tokio::spawn(async move {
        for b in first {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        if expired {
            return;
        }
        run(tx, rx, filter, p, start_rv, period, &mut cut).await;
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(out);
    let body = Body::from_stream(futures::StreamExt::map(stream, Ok::<Bytes, std::convert::Infallible>));
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| ApiError::new(500, "InternalError", e.to_string()))
}

async fn run(
    tx: mpsc::Sender<Bytes>,
    mut rx: broadcast::Receiver<Arc<Event>>,
    filter: Filter,
    p: WatchParams,
    mut seen_rv: u64,
    period: Duration,
    cut: &mut tokio::sync::watch::Receiver<u64>,
) {
    let deadline = p.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut tick = tokio::time::interval(period.max(Duration::from_millis(10)));
    tick.tick().await;
    loop {
        let timeout = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(e) => {
                    seen_rv = e.rv;
                    if let Some(line) = filter.event_line(&e)
                        && tx.send(line).await.is_err()
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let _ = tx.send(expired_line(&filter, "watch fell behind; resourceVersion too old")).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tick.tick() => {
                if p.bookmarks && tx.send(filter.bookmark(seen_rv, false)).await.is_err() {
                    return;
                }
            }
            _ = timeout => return,
            _ = cut.changed() => return,
            _ = tx.closed() => return,
        }
    }
}
