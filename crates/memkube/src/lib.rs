//! # memkube: an in-memory Kubernetes API server for tests
//!
//! Serves kube-rs (in-process through [`Server::client`], or over TCP) and the real `kubectl`.
//!
//! ```no_run
//! # async fn f() -> anyhow::Result<()> {
//! let server = memkube::Server::new();
//! let client: kube::Client = server.client(); // in-process, default namespace "default"
//! let addr = server.serve("127.0.0.1:0".parse()?).await?; // plain http for kubectl
//! std::fs::write("kubeconfig", memkube::kubeconfig_yaml(addr))?;
//! # Ok(()) }
//! ```
//!
//! Test hooks on [`Server`]: [`Server::inject_fault`] ([`Fault`]), [`Server::set_latency`],
//! [`Server::cut_watches`], [`Server::compact`], [`Server::request_count`] /
//! [`Server::reset_counts`], direct store access ([`Server::get_object`],
//! [`Server::list_objects`], [`Server::put_object`], [`Server::delete_object`]),
//! [`Server::wait_for`] and [`Server::install_crds`].
//!
//! ## Faithful
//! `tests/differential` sends the same requests to memkube and to a genuine kube-apiserver
//! (`scripts/genuine-test.sh`) and compares the answers field by field; what still differs is
//! listed under *Simplified* and asserted there, so a change on either side shows up.
//! - Discovery (`/version`, `/api`, `/apis`, group and resource lists with short names,
//!   categories, verbs and subresources); no aggregated discovery. `/openapi/v3` answers 404
//!   and `/openapi/v2` an empty protobuf document, so kubectl finds no client-side schema and
//!   `kubectl apply` works without `--validate=false` (the server validates custom resources).
//! - CRDs: registered on create (`NamesAccepted`/`Established` True, `acceptedNames`);
//!   deletion deletes the instances (their finalizers run), then unregisters the kind.
//!   Schema defaulting, pruning, structural validation and CEL rules (incl. `oldSelf`) via
//!   [`schema`]; errors are 422 with `details.causes`. `fieldValidation=Strict` (kubectl's
//!   default) rejects unknown fields with 400 `strict decoding error`, `Warn` (the default)
//!   answers with `Warning` headers, `Ignore` prunes silently.
//! - CRUD for namespaced and cluster-scoped kinds; built-ins are listed in `registry.rs`.
//!   Creating in a missing namespace gives 404 for the namespace (lists there are empty);
//!   namespaces terminate (content
//!   deleted, 403 for new content, gone once empty).
//! - Metadata: uid, one global resourceVersion (no bump on no-op writes), generation for the
//!   kinds that have one (custom resources, CRDs, workloads, PDBs, NetworkPolicies, Pods; not
//!   ConfigMaps, Secrets, Nodes, ...): bumped on spec changes (any non-metadata change for
//!   kinds without `/status`) and when deletionTimestamp is set; creationTimestamp,
//!   generateName, empty labels/annotations/finalizers/ownerReferences dropped, Secrets
//!   defaulted to `type: Opaque`, managedFields with per-manager field ownership in the
//!   apiserver's order (operation, time, manager), `.` for maps an update created,
//!   finalizers owned item by item (`v:"..."`), and no new time for an apply that changed
//!   nothing.
//! - 409 Conflict on a stale resourceVersion, 409 AlreadyExists, status subresource
//!   separation (status dropped on create and ignored on main-resource writes).
//! - Merge, JSON (test-of-absent-against-null passes, as client-go's server does) and
//!   strategic merge patches (415 for strategic on custom resources); server-side apply:
//!   create if absent (201), field ownership, conflicts (409 `Apply failed with N conflict...`)
//!   unless `force=true`, removal of fields the manager stopped applying.
//! - Deletion: finalizers, deletionTimestamp, Background/Foreground/Orphan propagation,
//!   ownerReference GC, preconditions (409 worded by Kind), deletecollection, dryRun=All;
//!   DeleteOptions from the body, or from the query only when the body is empty; an immediate
//!   delete answers `Status` Success (the object for pods, services, namespaces and the other
//!   `ReturnDeletedObject` kinds), 200 unless `orphanDependents: false` meets finalizers (202).
//! - Errors worded like the apiserver's: JSON-patch failures (422 with no detail), unknown
//!   patch types (415), `error decoding patch`, truncated bodies, apply without
//!   `fieldManager` (`PatchOptions`), apply conflicts (causes only, `using <version>` for
//!   Update managers), an immutable uid, new finalizers on a deleting object, a
//!   resourceVersion on create (500 without reason); Invalid messages name each distinct
//!   cause once.
//! - CSRs: the request must be a PEM `CERTIFICATE REQUEST`; `Approved`/`Denied` conditions
//!   must be `True` and cannot be removed.
//! - List: label/field selectors (field selectors checked per kind, with the apiserver's two
//!   wordings; Events not checked), limit/continue (limit ignored with `resourceVersion=0`, as
//!   the watch cache does), `resourceVersionMatch` validation. Watch: replay from a resourceVersion, 410
//!   after compaction or when a watcher lags behind its own kind's events (one channel per kind,
//!   as the per-resource watch caches), bookmarks, `sendInitialEvents` streaming lists,
//!   selector transitions (ADDED/DELETED), timeouts, DELETED with the final object.
//! - Table output, also on watches (`kubectl get -w`): CRDs show Name plus their declared
//!   printer columns (Name and Age when they declare none, as the apiextensions server does;
//!   `date` columns render as ages like `5m`, and as `<invalid>` when in the future);
//!   printer-column JSONPath handles `.a.b`, escaped dots (`.a.b\.c`), quoted keys
//!   (`.metadata.labels['cluster\.x-k8s\.io/cluster-name']`), `[n]`, `[-n]`, `[*]` and
//!   `[?(@.k=="v")]`; built-ins show kubectl's usual columns;
//!   `PartialObjectMetadata` responses for metadata-only clients; eviction with
//!   PodDisruptionBudgets (429); CSR `approval`; `meta.k8s.io/v1 Status` errors.
//! - TokenRequest (`POST serviceaccounts/{name}/token`, `authentication.k8s.io/v1`): 404 for
//!   a missing ServiceAccount, `expirationSeconds` defaulted to 3600 and refused (422) below
//!   10 minutes or above 2^32 s, empty `audiences` defaulted, `boundObjectRef` to a Pod, Secret
//!   or Node checked for existence and uid; 201 with `status.token` and
//!   `status.expirationTimestamp`.
//! - Events: core `v1` and `events.k8s.io/v1` Events are one stored resource with two views
//!   converted field by field (`note`/`message`, `regarding`/`involvedObject`,
//!   `reportingController`/`reportingComponent`, `deprecatedSource`/`source`,
//!   `deprecated{Count,FirstTimestamp,LastTimestamp}`/`count`, `firstTimestamp`,
//!   `lastTimestamp`; `eventTime`, `series`, `action`, `reason`, `type`, `related`,
//!   `reportingInstance` shared). Create, update, patch, list, watch and field selectors
//!   (`involvedObject.uid=...` as `kubectl describe` sends, `regarding.name=...`) work in
//!   either view, so kube-runtime's `Recorder` (create, then merge-patch of `series`) shows
//!   up in `kubectl get events` (the apiserver's LAST SEEN/TYPE/REASON/OBJECT/MESSAGE Table,
//!   wide columns included) and `kubectl describe`.
//! - apps/v1 Deployment, DaemonSet, ReplicaSet and StatefulSet with `status` subresources,
//!   the `all` category (with pods and services) and `spec.replicas` defaulted to 1; the
//!   `scale` subresource (`autoscaling/v1 Scale`, `kubectl scale`) on Deployments,
//!   ReplicaSets, StatefulSets and CRDs declaring `subresources.scale`.
//!
//! ## Simplified
//! - Server-side apply field sets cover maps and lists whose items share a `type`, `name`,
//!   `uid` or `key` field with a distinct value each; other lists are atomic (a real server
//!   reads `x-kubernetes-list-type` from the schema instead: a CRD list without it, such as
//!   `status.addresses` with several `InternalIP` entries, is atomic there too). Update operations own the leaf fields they
//!   changed. Conflicts are only checked for applies, as on a real server.
//! - Strategic merge knows merge keys by field name only (ownerReferences, finalizers,
//!   containers, initContainers, volumes, env, volumeMounts, taints, conditions); other
//!   lists are replaced.
//! - The garbage collector runs synchronously after each write; Orphan removes ownerRefs at once.
//! - Multi-version CRDs share one store without conversion (objects are re-labelled).
//! - Pods are never scheduled or run; deleting a pod is immediate (no grace period);
//!   PodDisruptionBudget status is kept current by the server (pods count as healthy when
//!   their Ready condition is True, or when Running without conditions).
//! - Events: the core view fills an empty `source` from `reportingComponent`/
//!   `reportingInstance` and the `events.k8s.io` view an empty `reportingController`/
//!   `reportingInstance` from `source` (what `kubectl describe` shows as From; a real
//!   server leaves them empty). Fields unknown to `events.k8s.io/v1` are dropped on writes
//!   through that view; no event-specific validation (required `eventTime`, `action`, ...)
//!   and no TTL.
//! - No controllers: workloads never get pods or status unless a test writes them; of the
//!   built-in defaults only apps/v1 `spec.replicas` is applied.
//! - Unknown-field detection (`fieldValidation`) applies to custom resources only; built-in
//!   kinds are stored as sent.
//! - Minted tokens are random opaque strings, not JWTs, and nothing verifies them (there is no
//!   authentication); `--service-account-max-token-expiration` is not modelled.
//! - No authentication, authorization, admission webhooks, aggregated discovery or protobuf
//!   (protobuf bodies get 415, protobuf-only Accept gets 406). So a CSR keeps the
//!   `spec.username`/`groups` a client sends (an emulated kubelet can claim
//!   `system:node:<name>`) and gets no `extra`; the apiserver stamps the caller's identity.
//! - CSRs are never signed: `status.certificate` stays empty after approval (kube-controller-
//!   manager signs on a real cluster; capi-sim's emulated kubelet writes a placeholder).
//! - No history: a list with `resourceVersionMatch=Exact` of an old resourceVersion returns
//!   the current objects (watches do replay from the event log).
//! - Streaming lists (`sendInitialEvents`) are served as if the WatchList feature gate were
//!   on; a 1.33 apiserver with default gates answers 422.
//! - Orphan propagation orphans at once, and the DELETE answers like an immediate delete; the
//!   apiserver first answers with the deleting owner carrying the `orphan` finalizer.
//! - A whole number is checked against a fractional `minimum`/`maximum` as it is; the apiserver
//!   truncates the bound first, so `0` passes `minimum: 0.1` there (schemas that must refuse it
//!   add a CEL rule, which both evaluate alike).
//! - Applying an empty keyed list records the list itself as owned (memkube knows no list
//!   types); the apiserver records nothing for it.
//! - Texts that come from parsers or internals differ in detail while code and reason match:
//!   YAML parse errors (serde_yaml's), continue tokens (memkube's own encoding), an
//!   apiVersion/kind that does not match the URL, and the property named inside messages of
//!   `/status` schema errors (`status.phase in body`, the apiserver says `phase in body`).

pub mod schema;

mod crd;
mod csr;
mod discovery;
mod events;
mod eviction;
mod gc;
mod hooks;
mod index;
mod meta;
mod objects;
mod ops;
mod patch;
mod registry;
mod routes;
mod scale;
mod selectors;
mod server;
mod ssa;
mod status;
mod store;
mod table;
mod token;
mod watch;

pub use hooks::{Fault, FaultMode, RequestInfo};
pub use server::{Config, Server, kubeconfig_yaml};
pub use status::ApiError;
