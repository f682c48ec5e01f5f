//! The `crds` subcommand: the CRDs as YAML, printed or written one file per CRD.

use std::{fs, io::Write, path::Path};

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::{api, cli::CrdsArgs};

/// Every CRD as one multi-document YAML string, in a stable order.
///
/// # Errors
/// Only if a CRD cannot be serialised, which tests rule out.
pub fn render_all() -> Result<String, serde_yaml::Error> {
    api::crds()
        .iter()
        .map(render_one)
        .collect::<Result<Vec<_>, _>>()
        .map(|docs| docs.concat())
}

/// One CRD as a YAML document starting with `---`.
///
/// # Errors
/// Only if the CRD cannot be serialised.
pub fn render_one(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    Ok(format!("---\n{}", serde_yaml::to_string(crd)?))
}

/// The file name `crds --out-dir` writes a CRD to.
#[must_use]
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// Run the subcommand.
///
/// # Errors
/// When a file cannot be written.
pub fn run(args: &CrdsArgs) -> anyhow::Result<()> {
    match &args.out_dir {
        None => std::io::stdout()
            .write_all(render_all()?.as_bytes())
            .context("cannot write to stdout"),
        Some(dir) => write_dir(dir),
    }
}

fn write_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for crd in api::crds() {
        let path = dir.join(file_name(&crd));
        fs::write(&path, render_one(&crd)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod descriptions;

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Where generated CRDs are committed: the plain manifests and the Helm chart's copy.
    const COMMITTED: [&str; 2] = ["manifests/crds", "helm/caplv/crds"];

    #[test]
    fn committed_crds_match_the_code() {
        for place in COMMITTED {
            check_committed(place);
        }
    }

    fn check_committed(place: &str) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(place);
        let mut expected: Vec<String> = api::crds().iter().map(file_name).collect();
        expected.sort();
        let mut present: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        present.sort();
        assert_eq!(
            present, expected,
            "{place} has stale or missing files; run `cargo run -- crds --out-dir {place}`"
        );
        for crd in api::crds() {
            let path = dir.join(file_name(&crd));
            let committed = fs::read_to_string(&path).unwrap();
            assert!(
                committed == render_one(&crd).unwrap(),
                "{} drifted from the code; run `cargo run -- crds --out-dir {place}`",
                path.display()
            );
        }
    }

    #[test]
    fn capi_facing_crds_carry_both_contract_labels() {
        for crd in api::crds() {
            let name = crd.metadata.name.clone().unwrap();
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            let capi_facing = !name.starts_with("libvirthosts.") && !name.ends_with(".5spot.finos.org");
            for contract in ["cluster.x-k8s.io/v1beta1", "cluster.x-k8s.io/v1beta2"] {
                assert_eq!(labels.contains_key(contract), capi_facing, "{name}: label {contract}");
            }
        }
    }

    #[test]
    fn every_crd_but_the_plain_templates_has_a_status_subresource() {
        for crd in api::crds() {
            let name = crd.metadata.name.clone().unwrap();
            let version = &crd.spec.versions[0];
            let has_status = version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some();
            // A machine template has one too: its clones' capacity, for scale-from-zero.
            let expected = !name.contains("templates.") || name.starts_with("libvirtmachinetemplates.");
            assert_eq!(has_status, expected, "{name}");
        }
    }

    #[test]
    fn seed_kinds_have_short_names_and_printer_columns() {
        let crds = api::crds();
        let by_name = |n: &str| crds.iter().find(|c| c.metadata.name.as_deref() == Some(n)).unwrap();
        let columns = |n: &str| -> Vec<String> {
            by_name(n).spec.versions[0]
                .additional_printer_columns
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.name)
                .collect()
        };
        assert_eq!(
            columns("scheduledmachines.5spot.finos.org"),
            ["Phase", "InSchedule", "Next", "Lag", "Lead", "Machine", "Age"]
        );
        assert_eq!(
            columns("scheduledcapacities.5spot.finos.org"),
            ["Target", "Replicas", "InSchedule", "Next", "Age"]
        );
        assert_eq!(
            columns("libvirthosts.infrastructure.cluster.x-k8s.io"),
            [
                "URI",
                "Ready",
                "FreeVCPUs",
                "FreeMemoryMB",
                "Pressure",
                "Reclaiming",
                "Maintenance",
                "Age"
            ]
        );
        assert_eq!(
            columns("libvirtmachines.infrastructure.cluster.x-k8s.io"),
            ["Host", "Ready", "State", "ProviderID", "Age"]
        );
        assert_eq!(
            by_name("scheduledmachines.5spot.finos.org")
                .spec
                .names
                .short_names
                .as_deref(),
            Some(&["sm".to_owned()][..])
        );
    }
}
