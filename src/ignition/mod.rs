//! Ignition: validation, a Butane subset, and per-VM injection. Pure functions, no I/O.
//!
//! - [`validate()`]: checks bootstrap Ignition (spec 3.0.0–3.6.0, at most [`MAX_CONFIG_BYTES`]) with
//!   `ignition-config` and returns the version and unused-key warnings. Spec 2.x, which the Machine
//!   Config Server serves to clients that do not ask for 3.x, gets its own error with the `curl`
//!   line that fetches 3.x. Used by the IgnitionConfig controller.
//! - [`butane::translate`]: a Butane subset (`variant: fcos` 1.0.0–1.7.0 and `variant: openshift`
//!   4.8.0–4.22.0; files, directories, links, units and drop-ins, users and groups) to Ignition JSON
//!   at the spec version Butane itself would emit. Anything else is rejected by field path.
//! - [`render()`]: the shared bootstrap Ignition plus one VM's [`MachineFacts`] gives that VM's
//!   config, with `/etc/hostname`, a kubelet provider-ID drop-in and a static NetworkManager
//!   keyfile merged into `storage.files` (see [`inject`]).
//! - [`dataurl`] and [`keyfile`]: the encoders behind it, with decoders/parsers for reading back.
//!
//! Errors ([`Error`]) carry a bounded [`Error::reason`] for conditions and never quote the
//! document, which holds secrets; only sizes, positions, JSON paths and versions.

pub mod butane;
pub mod dataurl;
pub mod error;
pub mod facts;
pub mod inject;
pub mod keyfile;
pub mod validate;

pub use error::{Error, Reason};
pub use facts::{CheckedFacts, MachineFacts, NetworkFacts};
pub use inject::{HOSTNAME_PATH, PROVIDER_ID_DROPIN_PATH, Rendered, render};
pub use validate::{MAX_CONFIG_BYTES, SUPPORTED_VERSIONS, Validated, validate};
