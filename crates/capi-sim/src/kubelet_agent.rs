//! An emulated kubelet for a genuine control plane: the part of a worker's life the tests cannot
//! boot for real (RHCOS, CRI-O and a kubelet), done with the credentials a real kubelet has.
//!
//! Once an InfraMachine is provisioned, its "kubelet":
//! 1. files a client CSR (signer `kubernetes.io/kube-apiserver-client-kubelet`) with a bootstrap
//!    identity, so the API server records who asked, exactly as for a real node;
//! 2. waits until someone approves it and kube-controller-manager's signer issues the
//!    certificate;
//! 3. with that certificate (`system:node:<name>` in `system:nodes`), registers its Node with the
//!    provider ID and posts a Ready status: the Node authorizer and NodeRestriction admission
//!    judge those requests as they judge a real kubelet's;
//! 4. files its serving CSR (`kubernetes.io/kubelet-serving`) as the node;
//! 5. finishes Pods bound to it that are being deleted (evicted by a drain), since no container
//!    runtime is there to stop them;
//! 6. when its InfraMachine is gone, reports the Node `Ready=Unknown`, as a stopped kubelet's
//!    Node becomes.
//!
//! The node's name and provider ID come from the InfraMachine (`status.addresses` InternalDNS or
//! Hostname, `spec.providerID`), which is what the machine's Ignition gives the real kubelet.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::csr;
use crate::error::{Error, Result};
use crate::kubelet::{node_name, ready_status, serving_sans};
use crate::view::str_at;

/// How the agent reaches the API server with a node's own certificate.
#[derive(Clone, Debug)]
pub struct ApiAccess {
    /// `https://host:port` of the API server.
    pub url: http::Uri,
    /// DER certificates that verify its serving certificate.
    pub root_certs: Vec<Vec<u8>>,
}

impl ApiAccess {
    /// The server and trust roots of an existing client configuration (its credentials are not
    /// used).
    #[must_use]
    pub fn of(config: &kube::Config) -> Self {
        Self {
            url: config.cluster_url.clone(),
            root_certs: config.root_cert.clone().unwrap_or_default(),
        }
    }
}

/// Configuration of the agent; see the module docs.
pub struct KubeletAgent {
    /// Reads the InfraMachines (stands in for what a kubelet knows about its own host).
    pub observer: kube::Client,
    /// Files the client CSRs: a bootstrap identity such as OpenShift's node-bootstrapper.
    pub bootstrap: kube::Client,
    /// Where the node identities connect.
    pub api: ApiAccess,
    /// The InfraMachine kind to follow.
    pub infra: ApiResource,
    /// `status.nodeInfo.kubeletVersion` of the Nodes.
    pub kubelet_version: String,
    /// Register the Node with `spec.providerID`, as a kubelet started with `--provider-id`
    /// does; without it, the provider must set it.
    pub with_provider_id: bool,
}

/// What the agent knows of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Waiting for its client certificate.
    Joining,
    /// Registered with its own certificate.
    Registered,
    /// Its InfraMachine is gone; the Node was reported `Ready=Unknown`.
    Stopped,
    /// Joining failed; the message says why.
    Failed(String),
}

type States = Arc<Mutex<BTreeMap<String, NodeState>>>;

/// The running agent.
pub struct AgentHandle {
    task: JoinHandle<()>,
    shutdown: CancellationToken,
    states: States,
}

impl AgentHandle {
    /// Each node the agent has seen, with its state.
    #[must_use]
    pub fn nodes(&self) -> BTreeMap<String, NodeState> {
        self.states.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stop every loop of the agent.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

fn set_state(states: &States, node: &str, state: NodeState) {
    if let Ok(mut s) = states.lock() {
        s.insert(node.to_string(), state);
    }
}

fn provisioned(obj: &DynamicObject) -> bool {
    let status = obj.data.get("status");
    let flag = |path: &[&str]| {
        let mut v = status;
        for p in path {
            v = v.and_then(|x| x.get(*p));
        }
        v.and_then(Value::as_bool).unwrap_or(false)
    };
    flag(&["ready"]) || flag(&["initialization", "provisioned"])
}

impl KubeletAgent {
    /// Start following InfraMachines on the current runtime.
    #[must_use]
    pub fn spawn(self) -> AgentHandle {
        let shutdown = CancellationToken::new();
        let states: States = Arc::default();
        let task = tokio::spawn(run(Arc::new(self), states.clone(), shutdown.clone()));
        AgentHandle { task, shutdown, states }
    }
}

/// A kubelet's clients, one per registered node, for the loops that act as that node.
type NodeClients = Arc<Mutex<BTreeMap<String, kube::Client>>>;

async fn run(agent: Arc<KubeletAgent>, states: States, shutdown: CancellationToken) {
    let api: Api<DynamicObject> = Api::all_with(agent.observer.clone(), &agent.infra);
    let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let clients: NodeClients = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => break,
            e = events.next() => e,
        };
        let Some(event) = event else { break };
        match event {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                let Some((node, provider_id)) = identity(&obj) else {
                    continue;
                };
                if !provisioned(&obj) || known(&states, &node) {
                    continue;
                }
                set_state(&states, &node, NodeState::Joining);
                let (agent, states, clients, token) =
                    (agent.clone(), states.clone(), clients.clone(), shutdown.clone());
                tasks.spawn(async move {
                    let joined = tokio::select! {
                        () = token.cancelled() => return,
                        r = join(&agent, &obj, &node, &provider_id) => r,
                    };
                    match joined {
                        Ok(client) => {
                            if let Ok(mut c) = clients.lock() {
                                c.insert(node.clone(), client.clone());
                            }
                            set_state(&states, &node, NodeState::Registered);
                            tokio::select! {
                                () = token.cancelled() => {}
                                () = finish_deleted_pods(client, &node) => {}
                            }
                        }
                        Err(e) => {
                            tracing::warn!(node = %node, error = %e, "emulated kubelet could not join");
                            set_state(&states, &node, NodeState::Failed(e.to_string()));
                        }
                    }
                });
            }
            Ok(watcher::Event::Delete(obj)) => {
                let Some((node, _)) = identity(&obj) else { continue };
                let client = clients.lock().ok().and_then(|mut c| c.remove(&node));
                if let Some(client) = client {
                    if let Err(e) = report_stopped(&client, &node).await {
                        tracing::debug!(node = %node, error = %e, "emulated kubelet could not report its Node stopped");
                    }
                    set_state(&states, &node, NodeState::Stopped);
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "InfraMachine watch error; retrying"),
        }
    }
    tasks.shutdown().await;
}

fn known(states: &States, node: &str) -> bool {
    states
        .lock()
        .map(|s| matches!(s.get(node), Some(NodeState::Joining | NodeState::Registered)))
        .unwrap_or(false)
}

/// `status.addresses` of an InfraMachine, `null` when it has none.
fn addresses(infra: &DynamicObject) -> Value {
    infra
        .data
        .get("status")
        .and_then(|s| s.get("addresses"))
        .cloned()
        .unwrap_or(Value::Null)
}

fn identity(obj: &DynamicObject) -> Option<(String, String)> {
    let node = node_name(obj.data.get("status")?.get("addresses")?)?;
    let provider_id = str_at(&obj.data, &["spec", "providerID"]).filter(|p| !p.is_empty())?;
    Some((node, provider_id))
}

/// Steps 1–4: the client certificate, the Node, its status and the serving CSR.
async fn join(agent: &KubeletAgent, infra: &DynamicObject, node: &str, provider_id: &str) -> Result<kube::Client> {
    let client_req = csr::keyed_client_csr(node)?;
    let cert = request_certificate(
        &agent.bootstrap,
        node,
        csr::CLIENT_SIGNER,
        &csr::CLIENT_USAGES,
        &client_req.csr,
    )
    .await?;
    let client = node_client(&agent.api, node, &cert, &client_req.key)?;
    register(
        &client,
        agent,
        infra,
        node,
        agent.with_provider_id.then_some(provider_id),
    )
    .await?;
    let (dns, ips) = serving_sans(node, &addresses(infra));
    let serving = csr::serving_csr(node, &dns, &ips)?;
    request_certificate(&client, node, csr::SERVING_SIGNER, &csr::SERVING_USAGES, &serving).await?;
    Ok(client)
}

/// File a CSR and wait until its certificate is issued; a denied or failed request is an error.
async fn request_certificate(
    client: &kube::Client,
    node: &str,
    signer: &str,
    usages: &[&str],
    pem: &str,
) -> Result<String> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let suffix: String = uuid::Uuid::new_v4().simple().to_string().chars().take(8).collect();
    let name = format!("csr-{node}-{suffix}");
    let obj = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.as_bytes().to_vec()),
            signer_name: signer.to_string(),
            usages: Some(usages.iter().map(|u| (*u).to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| Error::kube(format!("filing CSR {name} ({signer})"), e))?;
    let done = kube::runtime::wait::await_condition(api, &name, |c: Option<&CertificateSigningRequest>| {
        c.and_then(|c| c.status.as_ref()).is_some_and(|s| {
            s.certificate.as_ref().is_some_and(|b| !b.0.is_empty())
                || s.conditions
                    .iter()
                    .flatten()
                    .any(|c| matches!(c.type_.as_str(), "Denied" | "Failed") && c.status == "True")
        })
    })
    .await
    .map_err(|e| Error::Invalid {
        what: format!("CSR {name}"),
        detail: e.to_string(),
    })?;
    let status = done.and_then(|c| c.status).unwrap_or_default();
    match status.certificate {
        Some(cert) if !cert.0.is_empty() => String::from_utf8(cert.0).map_err(|e| Error::Invalid {
            what: format!("certificate of CSR {name}"),
            detail: e.to_string(),
        }),
        _ => Err(Error::Invalid {
            what: format!("CSR {name}"),
            detail: "denied or failed".into(),
        }),
    }
}

/// A client that authenticates with the node's own certificate.
fn node_client(api: &ApiAccess, node: &str, cert_pem: &str, key_pem: &str) -> Result<kube::Client> {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut config = kube::Config::new(api.url.clone());
    config.root_cert = Some(api.root_certs.clone());
    config.auth_info.client_certificate_data = Some(b64(cert_pem));
    config.auth_info.client_key_data = Some(b64(key_pem).into());
    kube::Client::try_from(config).map_err(|e| Error::kube(format!("building the client of node {node}"), e))
}

async fn register(
    client: &kube::Client,
    agent: &KubeletAgent,
    infra: &DynamicObject,
    node: &str,
    provider_id: Option<&str>,
) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let spec = provider_id.map_or_else(|| json!({}), |id| json!({"providerID": id}));
    let obj: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": {
            "kubernetes.io/hostname": node,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }},
        "spec": spec,
    }))
    .map_err(|e| Error::json("building Node", e))?;
    match nodes.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(Error::kube(format!("registering Node {node}"), e)),
    }
    let status = ready_status(&addresses(infra), &agent.kubelet_version, "emulated");
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .map_err(|e| Error::kube(format!("posting status of Node {node}"), e))?;
    Ok(())
}

/// Step 5: a Pod bound to this node and being deleted is gone once its containers stopped;
/// with no containers, at once.
async fn finish_deleted_pods(client: kube::Client, node: &str) {
    let pods: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut events = watcher(pods.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(event) = events.next().await {
        let Ok(pod) = event else { continue };
        if pod.metadata.deletion_timestamp.is_none() {
            continue;
        }
        let (Some(ns), Some(name)) = (pod.metadata.namespace.clone(), pod.metadata.name.clone()) else {
            continue;
        };
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(e) = Api::<Pod>::namespaced(pods.clone().into_client(), &ns)
            .delete(&name, &params)
            .await
        {
            tracing::debug!(pod = %name, error = %e, "emulated kubelet could not finish a deleted Pod");
        }
    }
}

/// Step 6: the kubelet stopped with its machine.
async fn report_stopped(client: &kube::Client, node: &str) -> Result<()> {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = json!({"status": {"conditions": [{
        "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    }]}});
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(status))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(Error::kube(format!("reporting Node {node} stopped"), e)),
    }
}
