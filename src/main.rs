//! `caplv-manager`: parse the command line, set up logging, hand over to the library.

use std::process::ExitCode;

use caplv::{
    app,
    cli::{Cli, Command, RunArgs},
    crds,
};
use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(err) = caplv::telemetry::init(&cli.log) {
        eprintln!("error: invalid --log-filter: {err}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Some(Command::Crds(args)) => crds::run(&args),
        Some(Command::Run(args)) => run(args).await,
        Some(Command::Sandbox(args)) => caplv::sandbox::run(args).await,
        None => run(cli.run).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = app::connect(std::time::Duration::from_secs(args.api_timeout_seconds)).await?;
    let config = app::ManagerConfig::from_args(&args, client.default_namespace());
    app::run(client, config, app::Shared::new()?, app::shutdown_on_signals()).await
}
