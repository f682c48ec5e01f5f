//! Fidelity tests driving memkube in-process with kube-rs (client, runtime watcher, Controller).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, finalizer, watcher};
use kube::{Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
use memkube::{Fault, Server};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Widget", namespaced)]
#[kube(status = "WidgetStatus", shortname = "wd")]
#[kube(printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#)]
#[kube(
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
pub struct WidgetSpec {
    pub size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    #[serde(default)]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<WidgetCondition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

const DEADLINE: Duration = Duration::from_secs(10);

fn setup() -> (Server, Client) {
    let server = Server::new();
    server.install_crds(&[Widget::crd()]).unwrap();
    let client = server.client();
    (server, client)
}

fn widget(name: &str, size: i64) -> Widget {
    Widget::new(name, WidgetSpec { size, color: None })
}

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected API error, got {other:?}"),
    }
}

/// Poll `f` until it returns Some, or panic at the deadline.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[path = "kube_rs/builtins.rs"]
mod builtins;
#[path = "kube_rs/crud.rs"]
mod crud;
#[path = "kube_rs/watching.rs"]
mod watching;
