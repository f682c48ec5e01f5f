//! What the bench waits on: the Machines, the ScheduledMachines' phases and the reasons the
//! LibvirtMachines report, kept current by watches of its own.

use std::{collections::BTreeMap, time::Duration, time::Instant};

use kube::Api;

/// What the bench waits on, kept current by watches, so waiting costs the server nothing
/// beyond the events it sends anyway (listing 1000 objects every 100 ms would).
#[derive(Clone, Default)]
pub struct Seen {
    pub machines: usize,
    pub phases: BTreeMap<String, String>,
    /// The reason of each LibvirtMachine's `Ready` condition, once it reports one.
    pub ready_reasons: BTreeMap<String, String>,
}

impl Seen {
    pub fn in_phase(&self, phase: &str) -> usize {
        self.phases.values().filter(|p| *p == phase).count()
    }

    pub fn reporting(&self, reason: &str) -> usize {
        self.ready_reasons.values().filter(|r| *r == reason).count()
    }
}

/// Call `seen` with every object `api` lists or watches, from a task of its own.
fn on_each<K>(api: Api<K>, mut seen: impl FnMut(K) + Send + 'static)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(obj) = stream.next().await {
            // The watcher retries on its own after an error.
            if let Ok(obj) = obj {
                seen(obj);
            }
        }
    });
}

pub fn probe(client: &kube::Client) -> tokio::sync::watch::Receiver<Seen> {
    let (tx, rx) = tokio::sync::watch::channel(Seen::default());
    let tx = std::sync::Arc::new(tx);
    let machines: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "cluster.x-k8s.io",
            "v1beta1",
            "Machine",
        )),
    );
    let names = tx.clone();
    let mut seen = std::collections::HashSet::new();
    on_each(machines, move |m| {
        if seen.insert(m.metadata.name.unwrap_or_default()) {
            names.send_modify(|s| s.machines = seen.len());
        }
    });
    let reasons = tx.clone();
    let lms: Api<caplv::api::LibvirtMachine> = Api::namespaced(client.clone(), "default");
    on_each(lms, move |lm| {
        let reason = lm
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.reason);
        if let Some(reason) = reason {
            reasons.send_modify(|s| {
                s.ready_reasons.insert(lm.metadata.name.unwrap_or_default(), reason);
            });
        }
    });
    let sms: Api<caplv::api::ScheduledMachine> = Api::namespaced(client.clone(), "default");
    on_each(sms, move |sm| {
        let phase = sm
            .status
            .and_then(|s| s.phase)
            .map(|p| format!("{p:?}"))
            .unwrap_or_default();
        tx.send_modify(|s| {
            s.phases.insert(sm.metadata.name.unwrap_or_default(), phase);
        });
    });
    rx
}

pub async fn wait(
    what: &str,
    limit: Duration,
    seen: &mut tokio::sync::watch::Receiver<Seen>,
    done: impl FnMut(&Seen) -> bool,
) -> Duration {
    let start = Instant::now();
    if tokio::time::timeout(limit, seen.wait_for(done)).await.is_err() {
        let now = seen.borrow();
        panic!(
            "timed out: {what}; {} Machines, {} Inactive, {} Active",
            now.machines,
            now.in_phase("Inactive"),
            now.in_phase("Active")
        );
    }
    start.elapsed()
}
