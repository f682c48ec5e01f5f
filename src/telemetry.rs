//! Structured logging through `tracing`.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::{LogArgs, LogFormat};

/// Install the global subscriber. Fails only if the filter does not parse.
///
/// # Errors
/// When `--log-filter` is not valid env-filter syntax.
pub fn init(args: &LogArgs) -> Result<(), tracing_subscriber::filter::ParseError> {
    let filter = EnvFilter::try_new(&args.log_filter)?;
    let registry = tracing_subscriber::registry().with(filter);
    // Logs go to stderr so that stdout stays for what a command prints (CRDs, JSON answers).
    let layer = fmt::layer().with_writer(std::io::stderr);
    // A second init (e.g. in tests) keeps the first subscriber; that is fine.
    let _ = match args.log_format {
        LogFormat::Json => registry
            .with(layer.json().with_current_span(true).with_span_list(false))
            .try_init(),
        LogFormat::Text => registry
            .with(layer.with_target(false).with_ansi(std::io::stderr().is_terminal()))
            .try_init(),
    };
    Ok(())
}
