//! One window of the seed's schedule, run whole for a few ScheduledMachines (open, provision on
//! the test-driver host, run, close, teardown), with what the fault and crash suites check
//! after it: each object's incarnations, what is left, the manager's requests.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
};

use caplv::{api::scheduled_machine::Phase, app::Shared};
use chrono::{Datelike, NaiveDate, Weekday};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::DynamicObject,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    scheduled_machine::{
        at, ignition_configs, libvirt_machines, machines, nudge, provision, scheduled_machine, wait_phase, wait_running,
    },
    support::{Env, MANAGER_USER, wait_until},
};

/// The UIDs each object name had, per kind, as seen by watches: more than one UID for a name
/// means the object was created twice.
#[derive(Clone, Default)]
pub(crate) struct Incarnations(Arc<Mutex<BTreeMap<KindAndName, BTreeSet<String>>>>);

pub(crate) type KindAndName = (String, String);

impl Incarnations {
    pub(crate) fn follow(&self, kind: &'static str, api: Api<DynamicObject>, stop: CancellationToken) {
        let seen = self.clone();
        tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            let mut stream = std::pin::pin!(stream.take_until(stop.cancelled_owned()));
            while let Some(obj) = stream.next().await {
                if let Ok(obj) = obj {
                    let mut all = seen.0.lock().unwrap();
                    all.entry((kind.to_owned(), obj.name_any()))
                        .or_default()
                        .insert(obj.uid().unwrap_or_default());
                }
            }
        });
    }

    pub(crate) fn twice(&self) -> Vec<KindAndName> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|(_, uids)| uids.len() > 1)
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub(crate) fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// The manager's requests so far, watches aside.
pub(crate) fn manager_requests(env: &Env) -> u64 {
    env.server()
        .request_counts_of(MANAGER_USER)
        .iter()
        .filter(|((verb, ..), _)| verb != "watch")
        .map(|(_, n)| n)
        .sum()
}

/// The `n`-th weekday from Monday 7 December 2026 (the seed's windows are Monday to Friday).
pub(crate) fn weekday(n: u32) -> NaiveDate {
    let mut day = NaiveDate::from_ymd_opt(2026, 12, 7).unwrap();
    let mut left = n;
    while left > 0 || matches!(day.weekday(), Weekday::Sat | Weekday::Sun) {
        if !matches!(day.weekday(), Weekday::Sat | Weekday::Sun) {
            left -= 1;
        }
        day = day.succ_opt().unwrap();
    }
    day
}

/// The seed's window on `date` (New York's 09:00 to 18:00) for the ScheduledMachines `names`:
/// open, provision, run, close; then every child, its bootstrap data and its domain must be
/// gone. Returns the manager's requests for it.
pub(crate) async fn window(env: &Env, date: NaiveDate, names: &[&str]) -> u64 {
    let before = manager_requests(env);
    env.clock.set(at(&format!("{date}T13:59:58Z")));
    for name in names {
        nudge(env, name).await;
    }
    for name in names {
        wait_phase(env, name, Phase::Active).await;
    }
    for name in names {
        provision(env, name).await;
        wait_running(env, name).await;
    }
    env.clock.set(at(&format!("{date}T22:59:58Z")));
    for name in names {
        nudge(env, name).await;
    }
    for name in names {
        wait_phase(env, name, Phase::Inactive).await;
    }
    assert_nothing_left(env, names, &env.manager_shared()).await;
    manager_requests(env) - before
}

/// No Machine, LibvirtMachine, IgnitionConfig, bootstrap data Secret or domain of `names`
/// (domains as the manager with `view` sees them: see [`domains`]).
pub(crate) async fn assert_nothing_left(env: &Env, names: &[&str], view: &Shared) {
    for name in names {
        assert!(machines(env, "v1beta1").get_opt(name).await.unwrap().is_none());
        assert!(libvirt_machines(&env.client).get_opt(name).await.unwrap().is_none());
        assert!(ignition_configs(&env.client).get_opt(name).await.unwrap().is_none());
        let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "default");
        wait_until(&format!("the bootstrap data of {name} collected"), || async {
            secrets.get_opt(name).await.unwrap().is_none()
        })
        .await;
    }
    assert_eq!(domains(env, view).await, Vec::<String>::new(), "no domain is left");
}

/// The domains on the test-driver host `laptop`, as the manager with `view` sees them: such a
/// host's state lives in each connection, so only the manager's own shows its domains (a
/// restarted manager starts with an empty host; domains that outlive a crash are the
/// real-libvirt suites' to check).
pub(crate) async fn domains(env: &Env, view: &Shared) -> Vec<String> {
    let hosts: Api<caplv::api::LibvirtHost> = Api::namespaced(env.client.clone(), "default");
    let host = hosts.get("laptop").await.unwrap();
    let conn = view.hosts.get(&env.client, &host).await.unwrap().into_open().unwrap();
    let mut names = conn.hypervisor().list_domains().unwrap();
    names.sort();
    names
}

/// The ScheduledMachines `names` (Inactive, before Monday's window) and watches that record
/// every object's incarnations.
pub(crate) async fn setup(env: &Env, names: &[&str], stop: &CancellationToken) -> Incarnations {
    env.clock.set(at("2026-12-07T12:00:00Z"));
    for name in names {
        scheduled_machine(env, name, json!({})).await;
    }
    for name in names {
        wait_phase(env, name, Phase::Inactive).await;
    }
    let seen = Incarnations::default();
    seen.follow("Machine", machines(env, "v1beta1"), stop.clone());
    seen.follow("LibvirtMachine", libvirt_machines(&env.client), stop.clone());
    seen.follow("IgnitionConfig", ignition_configs(&env.client), stop.clone());
    seen
}
