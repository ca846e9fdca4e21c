//! Log output: text or one JSON object per line (fields, `event` among them, at the top
//! level), on stderr, at the configured level.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. `level` is one of trace, debug, info, warn, error; the
/// filter applies to leaderd's own events, other crates log warnings only.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::new(format!("warn,leaderd={level}"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.with_ansi(false).try_init(),
    };
}
