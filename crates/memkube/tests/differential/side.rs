//! One side of a differential run: memkube in-process, or the genuine kube-apiserver named by
//! the control plane's env. Both are driven through raw HTTP requests, so each side sees the
//! same bytes and the test sees the status code and body exactly as a client would.

use super::crd;
use futures::StreamExt;
use http::{Method, Request};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// Where a side's requests go.
#[derive(Clone)]
pub enum Backend {
    /// memkube, in-process.
    Memkube(memkube::Server),
    /// The genuine kube-apiserver from `scripts/control-plane.sh`.
    Genuine,
}

/// A client for one server and the namespace this test owns there.
#[derive(Clone)]
pub struct Side {
    pub backend: Backend,
    pub client: kube::Client,
    /// Same name on both sides, so messages naming it compare equal.
    pub ns: String,
}

/// A response: code, decoded body (Null when empty, a string when not JSON) and `Warning`s.
#[derive(Debug, Clone)]
pub struct Reply {
    pub code: u16,
    pub body: Value,
    pub warnings: Vec<String>,
}

/// How long any wait on either side may take; the genuine garbage collector and CSR signer
/// usually answer within a second or two.
pub const DEADLINE: Duration = Duration::from_secs(30);

const NEEDS_ENV: &str = "the differential tests need the genuine control plane: run scripts/genuine-test.sh, \
or source DIR/env of `scripts/control-plane.sh up DIR` (KUBECONFIG must name its admin kubeconfig)";

impl Side {
    /// A fresh memkube with the test CRDs and the namespace `ns`.
    pub async fn memkube(ns: &str) -> Side {
        let server = memkube::Server::new();
        server.install_crds(&crd::all()).unwrap();
        let side = Side {
            client: server.client(),
            backend: Backend::Memkube(server),
            ns: ns.into(),
        };
        side.prepare().await;
        side
    }

    /// The genuine API server from `KUBECONFIG` (the control plane's admin, system:masters),
    /// with the test CRDs applied and established and the namespace `ns` created.
    pub async fn genuine(ns: &str) -> Side {
        let path = std::env::var("KUBECONFIG").unwrap_or_else(|_| panic!("KUBECONFIG is not set: {NEEDS_ENV}"));
        assert!(
            std::env::var("CAPLV_CP_API_URL").is_ok_and(|u| u.starts_with("https://127.0.0.1:")),
            "CAPLV_CP_API_URL is not a 127.0.0.1 address: {NEEDS_ENV}"
        );
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)
            .unwrap_or_else(|e| panic!("cannot read KUBECONFIG {path}: {e}: {NEEDS_ENV}"));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("bad KUBECONFIG {path}: {e}"));
        let client = kube::Client::try_from(config).unwrap();
        let side = Side {
            backend: Backend::Genuine,
            client,
            ns: ns.into(),
        };
        for c in crd::all() {
            let name = c["metadata"]["name"].as_str().unwrap().to_string();
            let r = side
                .apply(
                    &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"),
                    "differential",
                    true,
                    &c,
                )
                .await;
            assert!(r.code < 300, "installing CRD {name} on the genuine server: {r:?}");
            side.wait(&format!("CRD {name} established"), || async {
                let r = side
                    .get(&format!(
                        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                    ))
                    .await;
                let conds = r
                    .body
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                conds
                    .iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
                    .then_some(())
            })
            .await;
        }
        side.prepare().await;
        side
    }

    async fn prepare(&self) {
        let r = self
            .post(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}),
            )
            .await;
        assert_eq!(r.code, 201, "creating namespace {} on {}: {r:?}", self.ns, self.name());
    }

    /// "memkube" or "genuine", for messages.
    pub fn name(&self) -> &'static str {
        match self.backend {
            Backend::Memkube(_) => "memkube",
            Backend::Genuine => "genuine",
        }
    }

    /// The memkube server, when this side is memkube.
    pub fn memkube_server(&self) -> Option<&memkube::Server> {
        match &self.backend {
            Backend::Memkube(s) => Some(s),
            Backend::Genuine => None,
        }
    }

    /// `/api/v1/namespaces/<ns>/<rest>`.
    pub fn core(&self, rest: &str) -> String {
        format!("/api/v1/namespaces/{}/{rest}", self.ns)
    }

    /// `/apis/diff.caplv.test/v1/namespaces/<ns>/<rest>`.
    pub fn custom(&self, rest: &str) -> String {
        format!("/apis/{}/v1/namespaces/{}/{rest}", crd::GROUP, self.ns)
    }

    /// Any request; `body` is sent as is with `content_type`.
    pub async fn send(&self, method: Method, path: &str, content_type: &str, body: Vec<u8>) -> Reply {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::ACCEPT, "application/json")
            .body(Body::from(body))
            .unwrap();
        let res = tokio::time::timeout(DEADLINE, self.client.send(req))
            .await
            .unwrap_or_else(|_| panic!("{} did not answer {path} within {DEADLINE:?}", self.name()))
            .unwrap_or_else(|e| panic!("{} request {path} failed: {e}", self.name()));
        let code = res.status().as_u16();
        let warnings = res
            .headers()
            .get_all(http::header::WARNING)
            .iter()
            .filter_map(|v| v.to_str().ok().map(String::from))
            .collect();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Reply { code, body, warnings }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, "application/json", vec![]).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(Method::POST, path, "application/json", body.to_string().into_bytes())
            .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.send(Method::PUT, path, "application/json", body.to_string().into_bytes())
            .await
    }

    pub async fn merge(&self, path: &str, body: &Value) -> Reply {
        self.send(
            Method::PATCH,
            path,
            "application/merge-patch+json",
            body.to_string().into_bytes(),
        )
        .await
    }

    pub async fn json_patch(&self, path: &str, body: &Value) -> Reply {
        self.send(
            Method::PATCH,
            path,
            "application/json-patch+json",
            body.to_string().into_bytes(),
        )
        .await
    }

    pub async fn delete(&self, path: &str, body: &Value) -> Reply {
        self.send(Method::DELETE, path, "application/json", body.to_string().into_bytes())
            .await
    }

    /// Server-side apply as `manager`.
    pub async fn apply(&self, path: &str, manager: &str, force: bool, body: &Value) -> Reply {
        let sep = if path.contains('?') { '&' } else { '?' };
        let path = format!(
            "{path}{sep}fieldManager={manager}{}",
            if force { "&force=true" } else { "" }
        );
        self.send(
            Method::PATCH,
            &path,
            "application/apply-patch+yaml",
            body.to_string().into_bytes(),
        )
        .await
    }

    /// Poll `f` until it returns Some; panics naming `what` and the side at [`DEADLINE`].
    pub async fn wait<T, F, Fut>(&self, what: &str, mut f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(v) = f().await {
                return v;
            }
            assert!(
                Instant::now() < end,
                "{}: timed out after {DEADLINE:?} waiting for {what}",
                self.name()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Wait until GET `path` answers 404.
    pub async fn wait_gone(&self, path: &str) {
        self.wait(&format!("{path} to be gone"), || async {
            (self.get(path).await.code == 404).then_some(())
        })
        .await;
    }

    /// Open a watch and collect its lines until `done` says enough, the server ends the stream,
    /// or [`DEADLINE`] passes (a panic). Returns the HTTP code and the decoded events.
    pub async fn watch(&self, path_and_query: &str, mut done: impl FnMut(&[Value]) -> bool) -> (u16, Vec<Value>) {
        let req = Request::builder()
            .method(Method::GET)
            .uri(path_and_query)
            .header(http::header::ACCEPT, "application/json")
            .body(Body::empty())
            .unwrap();
        let res = self.client.send(req).await.unwrap();
        let code = res.status().as_u16();
        if code >= 300 {
            let bytes = res.into_body().collect().await.unwrap().to_bytes();
            return (code, vec![serde_json::from_slice(&bytes).unwrap_or(Value::Null)]);
        }
        let mut stream = res.into_body().into_data_stream();
        let mut buf = Vec::new();
        let mut events: Vec<Value> = Vec::new();
        let end = Instant::now() + DEADLINE;
        loop {
            if done(&events) {
                return (code, events);
            }
            let chunk = tokio::time::timeout_at(end, stream.next()).await.unwrap_or_else(|_| {
                panic!(
                    "{}: watch {path_and_query} gave only {events:?} within {DEADLINE:?}",
                    self.name()
                )
            });
            let Some(chunk) = chunk else {
                return (code, events);
            };
            let Ok(chunk) = chunk else {
                return (code, events);
            };
            buf.extend_from_slice(&chunk);
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                    events.push(v);
                }
            }
        }
    }
}
