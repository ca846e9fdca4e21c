//! Log output: text or one JSON object per line (fields, `event` among them, at the top
//! level), on stderr, at the configured level. Logging never takes the election down: a
//! broken stderr (closed pipe, closed descriptor) loses the lines, nothing else.

use std::io::Write;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::daemon::config::LogFormat;

/// Installs the global subscriber. `level` is one of trace, debug, info, warn, error; the
/// filter applies to leaderd's own events, other crates log warnings only, and the redis
/// crate errors only (its warnings, dozens per failover, are what leaderd's own rate-limited
/// `redis_error` line already reports) unless leaderd logs at trace.
pub(crate) fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::new(filter_directives(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Stderr)
        .log_internal_errors(false)
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

fn filter_directives(level: &str) -> String {
    let redis = match level {
        "trace" => "warn",
        _ => "error",
    };
    format!("warn,redis={redis},leaderd={level}")
}

/// stderr, with every write error swallowed (a line that cannot be written is dropped) and
/// control characters inside a line escaped (a value from Redis cannot forge a line).
#[derive(Clone, Copy)]
struct Stderr;

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Lossy;

    fn make_writer(&'a self) -> Lossy {
        Lossy
    }
}

/// One write to stderr that reports success whatever happens.
struct Lossy;

impl Write for Lossy {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr()
            .lock()
            .write_all(&crate::daemon::escape::escape_controls(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redis_crate_logs_errors_only_unless_tracing() {
        assert_eq!(filter_directives("info"), "warn,redis=error,leaderd=info");
        assert_eq!(filter_directives("debug"), "warn,redis=error,leaderd=debug");
        assert_eq!(filter_directives("trace"), "warn,redis=warn,leaderd=trace");
    }
}
