//! Differential fidelity suite: the same request sequences sent to memkube and to the genuine
//! kube-apiserver (`scripts/control-plane.sh`), answers normalised where servers legitimately
//! differ (uids, timestamps, concrete resourceVersions, generated suffixes) and compared field
//! by field. Every remaining difference is either fixed in memkube or listed in its crate docs
//! as a simplification and asserted here as [`transcript::Known`], so the test fails when
//! either side changes.
//!
//! Run with `scripts/genuine-test.sh` (brings a control plane up and down), or against a
//! running one: `source DIR/env; cargo test -p memkube --test differential -- --ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod crd;
mod side;
mod transcript;

mod apply;
mod csr;
mod deletion;
mod errors;
mod list;
mod validation;
mod versions;
mod watch;
