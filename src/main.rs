//! `caplv-manager`: parse the command line, set up logging, hand over to the library.

use std::process::ExitCode;

use caplv::{
    app,
    cli::{Cli, Command, IgnitionCommand, RunArgs, ScheduleArgs},
    cmd::crds,
};
use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    #[cfg_attr(
        not(feature = "sandbox"),
        allow(unused_mut, reason = "only the sandbox adjusts logging")
    )]
    let mut cli = Cli::parse();
    #[cfg(feature = "sandbox")]
    caplv::cmd::sandbox::adjust_logging(cli.command.as_ref(), &mut cli.log);
    if let Err(err) = caplv::telemetry::init(&cli.log) {
        eprintln!("error: invalid --log-filter: {err}");
        return ExitCode::from(2);
    }
    match cli.command {
        Some(Command::Crds(args)) => report(crds::run(&args)),
        Some(Command::Rbac(args)) => report(caplv::cmd::rbac::run(args.out_dir.as_deref())),
        Some(Command::Schedule(args)) => schedule(&args),
        Some(Command::Ignition(IgnitionCommand::Render(args))) => report(caplv::cmd::ignition_render::run(&args)),
        #[cfg(feature = "sandbox")]
        Some(Command::Sandbox(args)) => log_outcome(caplv::cmd::sandbox::run(args).await),
        Some(Command::Run(args)) => log_outcome(run(args).await),
        None => log_outcome(run(cli.run).await),
    }
}

/// A one-shot command's failure: one plain line on stderr.
fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// A long-running command's failure: logged in the chosen log format (stderr too).
fn log_outcome(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}

/// `schedule`: one JSON line (or the calendar) on stdout, or the error on stderr with exit
/// code 2.
fn schedule(args: &ScheduleArgs) -> ExitCode {
    let at = args.at.map_or_else(chrono::Utc::now, |t| t.with_timezone(&chrono::Utc));
    match caplv::cmd::schedule_query::answer(args, at) {
        Ok(out) => {
            println!("{}", out.trim_end());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let app::Connection { client, api_server_ca } =
        app::connect(std::time::Duration::from_secs(args.api_timeout_seconds)).await?;
    let mut config = app::ManagerConfig::from_args(&args, client.default_namespace());
    config.settings.api_server_ca = api_server_ca;
    app::run(client, config, app::Shared::new()?, app::shutdown_on_signals()).await
}
