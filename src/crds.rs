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
