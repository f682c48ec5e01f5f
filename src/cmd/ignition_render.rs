//! `caplv-manager ignition render`: print the Ignition a VM would receive, for debugging, with
//! the node name and provider ID derived exactly as the LibvirtMachine controller derives them.

use std::io::Write;

use anyhow::Context as _;
use kube::ResourceExt;

use crate::{
    api::LibvirtMachine,
    cli::IgnitionRenderArgs,
    ignition::{self, MachineFacts},
    libvirt::identity,
};

/// What was rendered, for the summary line on stderr.
pub struct Outcome {
    /// The Ignition JSON.
    pub json: Vec<u8>,
    /// Lines to print on stderr (derivations, size).
    pub notes: Vec<String>,
}

/// Render from the two files.
///
/// # Errors
/// When a file cannot be read or parsed, or the Ignition or the machine facts are invalid.
pub fn render(args: &IgnitionRenderArgs) -> anyhow::Result<Outcome> {
    let bootstrap =
        std::fs::read(&args.bootstrap).with_context(|| format!("cannot read {}", args.bootstrap.display()))?;
    let machine_yaml =
        std::fs::read_to_string(&args.machine).with_context(|| format!("cannot read {}", args.machine.display()))?;
    let machine: LibvirtMachine = serde_yaml::from_str(&machine_yaml)
        .with_context(|| format!("{} is not a LibvirtMachine", args.machine.display()))?;
    let namespace = machine.namespace().unwrap_or_else(|| "default".to_owned());
    let name = machine.name_any();
    anyhow::ensure!(
        !name.is_empty(),
        "{}: metadata.name is required",
        args.machine.display()
    );

    let mut notes = Vec::new();
    let node = identity::node_name(&namespace, &name);
    let provider_id = match (&args.provider_id, &machine.spec.provider_id) {
        (Some(given), _) => given.clone(),
        (None, Some(set)) => set.clone(),
        (None, None) => match machine.uid().as_deref().and_then(identity::domain_uuid) {
            Some(uuid) => identity::provider_id(uuid),
            None => {
                let placeholder = identity::provider_id(identity::placeholder_uuid(&namespace, &name));
                notes.push(format!(
                    "note: {} has no metadata.uid; using the stand-in provider ID {placeholder} (the controller uses libvirt:///<uid>)",
                    args.machine.display()
                ));
                placeholder
            }
        },
    };
    let facts = MachineFacts::from_spec(node.clone(), provider_id.clone(), &machine.spec.interfaces());
    let rendered = ignition::render(&bootstrap, &facts).context("cannot render the Ignition")?;
    notes.push(format!(
        "rendered Ignition {} for node {node} ({provider_id}): {} bytes",
        rendered.version, rendered.size
    ));
    Ok(Outcome {
        json: rendered.json,
        notes,
    })
}

/// Run the subcommand: JSON on stdout, notes on stderr.
///
/// # Errors
/// As [`render`], or when stdout cannot be written.
pub fn run(args: &IgnitionRenderArgs) -> anyhow::Result<()> {
    let outcome = render(args)?;
    for note in &outcome.notes {
        eprintln!("{note}");
    }
    let mut stdout = std::io::stdout();
    stdout
        .write_all(&outcome.json)
        .and_then(|()| stdout.write_all(b"\n"))
        .context("cannot write to stdout")
}
