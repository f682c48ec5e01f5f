//! `capi-sim`: a small, faithful-enough stand-in for Cluster API (CAPI) core.
//!
//! Real CAPI core needs a real API server, cert-manager and webhooks; tests and the sandbox
//! of `caplv-manager` only need *what CAPI core does to the objects a provider sees*. This crate
//! runs those loops against any [`kube::Client`] (normally an in-process `memkube` server).
//!
//! # What is simulated
//! - **CRDs** for `clusters.cluster.x-k8s.io` and `machines.cluster.x-k8s.io` in v1beta1
//!   (CAPI ≤1.10, OpenShift 4.16–4.20), v1beta2 (CAPI ≥1.11) or both served ([`crds()`]), and
//!   for `machinedeployments` and `machinesets` (schema trimmed to the replica count and the
//!   fields core requires, with the `scale` subresource), which are served but not reconciled,
//!   and for the IPAM contract's `ipaddressclaims` and `ipaddresses` (`ipam.cluster.x-k8s.io`,
//!   served but never bound: an IPAM provider, or a test playing one, binds claims).
//! - **Cluster controller**: ownerRef + `cluster.x-k8s.io/cluster-name` label on the
//!   InfraCluster and the control plane object (a controller ref with blockOwnerDeletion under
//!   v1beta1, a plain ref under v1beta2, as core v1.10 and v1.14 do), infrastructure readiness mirrored from `status.ready` /
//!   `status.initialization.provisioned`, `spec.controlPlaneEndpoint` copied when empty, the
//!   control plane reported initialized (the sandbox models an existing, externally managed
//!   control plane), phases Pending → Provisioning → Provisioned.
//! - **Machine controller**: finalizer, cluster-name label, adoption of stand-alone Machines
//!   by their Cluster, ownership of the bootstrap config and InfraMachine, `dataSecretName`,
//!   `providerID`, addresses and failure domain copied once ready, `nodeRef` by exact
//!   `providerID` match, label sync to the Node and core's annotations on it
//!   (`cluster.x-k8s.io/{cluster-name,cluster-namespace,machine,annotations-from-machine}`,
//!   `owner-kind`/`owner-name` for a controlled Machine), readiness booleans written only
//!   once true, phases, and the deletion sequence (pre-drain
//!   hooks, cordon + drain with PDB-aware eviction retries and `nodeDrainTimeout`,
//!   pre-terminate hooks, infra then bootstrap deletion, Node deletion, finalizer removal).
//! - **Reads through caches**, as core's controllers read through informers: Clusters and the
//!   provider objects a Machine refers to come from watches, and only an object a watch has not
//!   seen yet is read from the server (a 1000-window burst: 9 requests per Machine instead of 27).
//! - **Contract resolution** as core does it: ref kinds are looked up via discovery and the
//!   CRD's `cluster.x-k8s.io/<contract>` label; a missing label is an error, as in core.
//! - **Emulated kubelet** (optional): registers a Node once the InfraMachine is provisioned
//!   and files real PKCS#10 client and serving CSRs, issuing a placeholder certificate once a
//!   CSR is approved. For a genuine control plane (real kube-apiserver, kube-controller-manager
//!   and Cluster API core) use [`kubelet_agent::KubeletAgent`] instead: only the kubelet is
//!   emulated there, with real certificates and the node's own identity.
//!
//! `tests/genuine_capi.rs` runs one Machine lifecycle against capi-sim and against genuine
//! core (both contracts, `scripts/genuine-test.sh`) and compares these facts.
//!
//! # What is not simulated
//! What MachineDeployments and MachineSets do (rollouts, MachineSets and Machines made from
//! their templates, replica status), MachineHealthChecks, ClusterClass/topology, control-plane
//! providers (their object is owned, its readiness not read), Cluster deletion cascades and
//! the `cluster.cluster.x-k8s.io` finalizer (garbage collection by ownerRefs does that part),
//! webhooks and defaulting, the `Failed` phase and `failureReason/Message` copying,
//! `MachineDrainRule`s, waiting for volume detach, `nodeDeletionTimeout`, periodic kubelet
//! heartbeats, and conversion between v1beta1 and v1beta2 (with both served, objects are
//! *not* converted: only use that mode for discovery tests).
//!
//! Also more lenient than core, found by running the integration tests on genuine core: Nodes
//! are linked without a `<cluster>-kubeconfig` Secret (core's ClusterCache needs one whose
//! server answers), drained and deleted without a `controlPlaneRef` to an externally managed
//! control plane (core refuses: `errNoControlPlaneNodes`), and durations are stored as written
//! (core's webhooks re-encode `300s` as `5m0s`).
//!
//! # Deliberate strictness (as core)
//! - Provider readiness is read under the contract the CRD's label selects: `status.ready`
//!   for v1beta1, `status.initialization.*` for v1beta2. Writing only one is a visible bug.
//! - A provider CRD without a `cluster.x-k8s.io/<contract>` label is never touched.
//! - Nodes are linked, drained and deleted only once the Cluster's infrastructure is ready,
//!   because that is when core's ClusterCache connects (switch off with
//!   [`SimulatorBuilder::nodes_need_cluster_infra`]). The workload cluster *is* the
//!   management cluster: Nodes are read through the same client.
//! - The `Deleting` condition (reasons `WaitingForPreDrainHook`, `DrainingNode`,
//!   `WaitingForPreTerminateHook`, `WaitingForInfrastructureDeletion`,
//!   `WaitingForBootstrapDeletion`, `DeletingNode`) is written in both API versions so tests
//!   can follow deletion; v1beta1 core reports the same steps through other condition types.
//!
//! # Use
//! ```no_run
//! # async fn f(client: kube::Client) -> capi_sim::Result<()> {
//! use std::time::Duration;
//! use capi_sim::{CapiVersions, KubeletMode, Simulator};
//! capi_sim::install(&client, CapiVersions::V1beta1).await?;
//! let sim = Simulator::builder(client)
//!     .versions(CapiVersions::V1beta1)
//!     .drain_retry(Duration::from_millis(100))
//!     .kubelet(KubeletMode::WithProviderId)
//!     .build()
//!     .spawn();
//! // ... create Clusters, Machines and provider objects; watch the Machines progress ...
//! sim.stop().await?;
//! # Ok(()) }
//! ```

mod cluster;
mod conditions;
pub mod crds;
pub mod csr;
mod dynamic;
mod error;
mod kubelet;
pub mod kubelet_agent;
mod machine;
mod patch;
mod ref_index;
mod sim;
mod view;

pub use crds::{CapiVersions, crds, install};
pub use error::{Error, Result};
pub use kubelet::{CSR_KIND_ANNOTATION, CSR_MACHINE_ANNOTATION, CSR_NODE_ANNOTATION};
pub use sim::{Simulator, SimulatorBuilder, SimulatorHandle};

/// Label that ties every CAPI object to its Cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Finalizer core puts on every Machine.
pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
/// API group of the CAPI core types.
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";
/// Annotation prefix of hooks that block draining a deleted Machine.
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io";
/// Annotation prefix of hooks that block deleting a deleted Machine's infrastructure.
pub const PRE_TERMINATE_HOOK_PREFIX: &str = "pre-terminate.delete.hook.machine.cluster.x-k8s.io";
/// Annotation that skips draining the Machine's Node.
pub const EXCLUDE_DRAIN_ANNOTATION: &str = "machine.cluster.x-k8s.io/exclude-node-draining";

/// What the emulated kubelet does, if anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KubeletMode {
    /// No kubelet: Nodes are created by the test (or never).
    #[default]
    Off,
    /// Register the Node with `spec.providerID` set, as a kubelet started with
    /// `--provider-id` does.
    WithProviderId,
    /// Register the Node without `spec.providerID`, to test providers that patch it in.
    WithoutProviderId,
}
