//! An emulated kubelet: once a Machine's InfraMachine is provisioned it files a client CSR,
//! registers the Node (named after the `InternalDNS`, else `Hostname`, address, as the
//! OpenShift CSR approver expects) and, after the client CSR is approved, files a serving CSR.
//! Approved CSRs get a placeholder certificate, standing in for the kube-controller-manager
//! signer. When the InfraMachine goes away the Node turns `Ready=Unknown`, as it would once
//! heartbeats stop; the Node itself stays until the Machine controller deletes it.
//!
//! Not simulated: periodic heartbeats, certificate rotation, Pods.

use std::net::IpAddr;
use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::KubeletMode;
use crate::csr;
use crate::error::{Error, Result};
use crate::sim::Ctx;
use crate::view::{MachineView, str_at};

/// Annotation naming the Node a simulated CSR belongs to.
pub const CSR_NODE_ANNOTATION: &str = "capi-sim.cluster.x-k8s.io/node";
/// Annotation saying `client` or `serving`.
pub const CSR_KIND_ANNOTATION: &str = "capi-sim.cluster.x-k8s.io/csr-kind";
/// Annotation naming the Machine (`namespace/name`) whose kubelet filed the CSR.
pub const CSR_MACHINE_ANNOTATION: &str = "capi-sim.cluster.x-k8s.io/machine";

/// The Node name a kubelet on this machine would register: `InternalDNS`, else `Hostname`.
pub(crate) fn node_name(addresses: &Value) -> Option<String> {
    let list = addresses.as_array()?;
    let find = |ty: &str| {
        list.iter()
            .find(|a| a.get("type").and_then(Value::as_str) == Some(ty))
            .and_then(|a| str_at(a, &["address"]))
            .filter(|s| !s.is_empty())
    };
    find("InternalDNS").or_else(|| find("Hostname"))
}

/// DNS and IP SANs a kubelet puts in its serving CSR.
pub(crate) fn serving_sans(node: &str, addresses: &Value) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns = vec![node.to_string()];
    let mut ips = Vec::new();
    for a in addresses.as_array().into_iter().flatten() {
        let ty = a.get("type").and_then(Value::as_str).unwrap_or("");
        let Some(addr) = str_at(a, &["address"]) else { continue };
        match ty {
            "InternalIP" | "ExternalIP" => {
                if let Ok(ip) = addr.parse::<IpAddr>()
                    && !ips.contains(&ip)
                {
                    ips.push(ip);
                }
            }
            "Hostname" | "InternalDNS" | "ExternalDNS" if !dns.contains(&addr) => dns.push(addr),
            _ => {}
        }
    }
    (dns, ips)
}

fn annotation<'a>(csr: &'a CertificateSigningRequest, key: &str) -> Option<&'a str> {
    csr.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

fn approved(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Approved" && c.status == "True"))
}

async fn file_csr(ctx: &Ctx, m: &MachineView, node: &str, kind: &str, pem: String) -> Result<()> {
    let (signer, user, groups, usages): (&str, String, Vec<String>, &[&str]) = if kind == "client" {
        let sa_ns = ctx
            .cfg
            .node_bootstrapper
            .strip_prefix("system:serviceaccount:")
            .and_then(|r| r.split_once(':'))
            .map(|(ns, _)| ns.to_string());
        let mut groups = vec!["system:serviceaccounts".to_string()];
        if let Some(ns) = sa_ns {
            groups.push(format!("system:serviceaccounts:{ns}"));
        }
        groups.push("system:authenticated".into());
        (
            csr::CLIENT_SIGNER,
            ctx.cfg.node_bootstrapper.clone(),
            groups,
            &csr::CLIENT_USAGES,
        )
    } else {
        (
            csr::SERVING_SIGNER,
            csr::node_user(node),
            vec![csr::NODES_GROUP.into(), "system:authenticated".into()],
            &csr::SERVING_USAGES,
        )
    };
    let suffix: String = uuid::Uuid::new_v4().simple().to_string().chars().take(5).collect();
    let obj = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(format!("csr-{suffix}")),
            annotations: Some(
                [
                    (CSR_NODE_ANNOTATION.to_string(), node.to_string()),
                    (CSR_KIND_ANNOTATION.to_string(), kind.to_string()),
                    (
                        CSR_MACHINE_ANNOTATION.to_string(),
                        format!("{}/{}", m.namespace, m.name),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: signer.into(),
            username: Some(user),
            groups: Some(groups),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| Error::kube(format!("filing {kind} CSR for Node {node}"), e))?;
    Ok(())
}

/// Files CSRs and registers the Node for a provisioned InfraMachine.
pub(crate) async fn ensure_node(ctx: &Ctx, m: &MachineView, infra: &DynamicObject, provider_id: &str) -> Result<()> {
    let addresses = infra
        .data
        .get("status")
        .and_then(|s| s.get("addresses"))
        .cloned()
        .unwrap_or(Value::Null);
    let Some(name) = node_name(&addresses) else {
        tracing::warn!(machine = %m.name, "emulated kubelet: no InternalDNS/Hostname address; not registering a Node");
        return Ok(());
    };
    let csrs: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    let ours: Vec<CertificateSigningRequest> = csrs
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube("listing CSRs", e))?
        .items
        .into_iter()
        .filter(|c| annotation(c, CSR_NODE_ANNOTATION) == Some(name.as_str()))
        .collect();
    let client = ours
        .iter()
        .find(|c| annotation(c, CSR_KIND_ANNOTATION) == Some("client"));
    let client_approved = client.is_some_and(approved);
    if client.is_none() {
        file_csr(ctx, m, &name, "client", csr::client_csr(&name)?).await?;
    }
    if ctx.cfg.kubelet_waits_for_client_csr && !client_approved {
        return Ok(());
    }
    register(ctx, m, &name, provider_id, &addresses).await?;
    let has_serving = ours
        .iter()
        .any(|c| annotation(c, CSR_KIND_ANNOTATION) == Some("serving"));
    if client_approved && !has_serving {
        let (dns, ips) = serving_sans(&name, &addresses);
        file_csr(ctx, m, &name, "serving", csr::serving_csr(&name, &dns, &ips)?).await?;
    }
    Ok(())
}

async fn register(ctx: &Ctx, m: &MachineView, name: &str, provider_id: &str, addresses: &Value) -> Result<()> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    if nodes
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(format!("reading Node {name}"), e))?
        .is_some()
    {
        return Ok(());
    }
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
            },
        },
        "spec": {},
    });
    if ctx.cfg.kubelet == KubeletMode::WithProviderId {
        node["spec"]["providerID"] = json!(provider_id);
    }
    let node: Node = serde_json::from_value(node).map_err(|e| Error::json("building Node", e))?;
    nodes
        .create(&PostParams::default(), &node)
        .await
        .map_err(|e| Error::kube(format!("registering Node {name}"), e))?;
    let version = str_at(&m.spec, &["version"]).unwrap_or_else(|| "v1.32.0".into());
    let status = ready_status(addresses, &version, "simulated");
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .map_err(|e| Error::kube(format!("posting status of Node {name}"), e))?;
    Ok(())
}

/// The status a kubelet posts once it runs: Ready, its addresses and what it runs on
/// (`runtime` names the stand-in: "simulated" or "emulated").
pub(crate) fn ready_status(addresses: &Value, kubelet_version: &str, runtime: &str) -> Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({"status": {
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }],
        "addresses": addresses.as_array().cloned().unwrap_or_default(),
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": format!("Red Hat Enterprise Linux CoreOS ({runtime})"),
            "containerRuntimeVersion": format!("cri-o://{runtime}"),
            "kubeletVersion": kubelet_version, "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": "amd64",
        },
    }})
}

/// The kubelet is gone with its machine: Ready turns Unknown.
pub(crate) async fn stop_node(ctx: &Ctx, m: &MachineView) -> Result<()> {
    let Some(name) = m
        .node_ref_name
        .clone()
        .or_else(|| m.status.get("addresses").and_then(node_name))
    else {
        return Ok(());
    };
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let Some(node) = nodes
        .get_opt(&name)
        .await
        .map_err(|e| Error::kube(format!("reading Node {name}"), e))?
    else {
        return Ok(());
    };
    let mut conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
    let Some(ready) = conditions.iter_mut().find(|c| c.type_ == "Ready") else {
        return Ok(());
    };
    if ready.status == "Unknown" {
        return Ok(());
    }
    ready.status = "Unknown".into();
    ready.reason = Some("NodeStatusUnknown".into());
    ready.message = Some("Kubelet stopped posting node status.".into());
    ready.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    nodes
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await
        .map_err(|e| Error::kube(format!("marking Node {name} NotReady"), e))?;
    Ok(())
}

/// Issues certificates for approved simulated CSRs and wakes their Machines.
pub(crate) async fn csr_loop(ctx: Arc<Ctx>, machine_tx: mpsc::UnboundedSender<ObjectRef<DynamicObject>>) {
    if ctx.cfg.kubelet == KubeletMode::Off {
        return futures::future::pending().await;
    }
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    let mut events = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(ev) = events.next().await {
        let csr = match ev {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "CSR watch error; retrying");
                continue;
            }
        };
        let Some(node) = annotation(&csr, CSR_NODE_ANNOTATION) else {
            continue;
        };
        let issued = csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some();
        if approved(&csr)
            && !issued
            && let Err(e) = issue(&api, &csr, node).await
        {
            tracing::warn!(error = %e, "emulated signer could not issue a certificate");
        }
        if let Some((ns, name)) = annotation(&csr, CSR_MACHINE_ANNOTATION).and_then(|m| m.split_once('/')) {
            let r = ObjectRef::new_with(name, ctx.machine_ar.clone()).within(ns);
            let _ = machine_tx.unbounded_send(r);
        }
    }
}

async fn issue(api: &Api<CertificateSigningRequest>, csr: &CertificateSigningRequest, node: &str) -> Result<()> {
    let pem = csr::placeholder_certificate(&csr::node_user(node))?;
    let name = csr.metadata.name.clone().unwrap_or_default();
    let cert = ByteString(pem.into_bytes());
    let patch = json!({"status": {"certificate": cert}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| Error::kube(format!("issuing certificate for CSR {name}"), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_name_prefers_internal_dns() {
        let a = json!([
            {"type": "Hostname", "address": "host"},
            {"type": "InternalDNS", "address": "w0.example"},
            {"type": "InternalIP", "address": "10.0.0.5"}
        ]);
        assert_eq!(node_name(&a).as_deref(), Some("w0.example"));
        let (dns, ips) = serving_sans("w0.example", &a);
        assert_eq!(dns, vec!["w0.example".to_string(), "host".to_string()]);
        assert_eq!(ips, vec!["10.0.0.5".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            node_name(&json!([{"type": "Hostname", "address": "h"}])).as_deref(),
            Some("h")
        );
        assert_eq!(node_name(&json!([])), None);
    }
}
