//! Structured logging through `tracing`.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::{LogArgs, LogFormat};

/// Install the global subscriber. Fails only if the filter does not parse.
///
/// # Errors
/// When `--log-filter` is not valid env-filter syntax.
pub fn init(args: &LogArgs) -> Result<(), tracing_subscriber::filter::ParseError> {
    let filter = EnvFilter::try_new(&args.log_filter)?;
    let registry = tracing_subscriber::registry().with(filter);
    // A second init (e.g. in tests) keeps the first subscriber; that is fine.
    let _ = match args.log_format {
        LogFormat::Json => registry
            .with(fmt::layer().json().with_current_span(true).with_span_list(false))
            .try_init(),
        LogFormat::Text => registry.with(fmt::layer().with_target(false)).try_init(),
    };
    Ok(())
}
