//! `leaderd status --watch`: the output of `status` kept on screen and drawn again at every
//! change (an announcement, a candidate joining, leaving or changing) until SIGINT/SIGTERM;
//! with `--json`, one document per change, one a line.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::Value;

use crate::daemon::candidacy::Listed;
use crate::daemon::cli::{one_shot_budget, runtime, EXIT_FAILURE};
use crate::daemon::config::Config;
use crate::lease::{Lease, LeaseError, Observed};

/// Home the cursor and clear the screen (a terminal only).
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Watches until a signal; 0 after SIGINT/SIGTERM, 1 when the output cannot be written.
pub(super) fn run<L: Lease>(config: &Config, lease: L, json: bool) -> i32 {
    let out = Output {
        json,
        tty: std::io::stdout().is_terminal(),
        drawn: 0,
    };
    let every = config.election.retry_period;
    let budget = one_shot_budget(&lease, config);
    runtime().block_on(watch(&config.name, lease, (every, budget), out))
}

async fn watch<L: Lease>(
    name: &str,
    lease: L,
    (every, budget): (Duration, Duration),
    mut out: Output,
) -> i32 {
    let stop = match crate::daemon::shutdown::install() {
        Ok(signals) => signals.shutdown,
        Err(err) => {
            eprintln!("leaderd: cannot install signal handlers: {err}");
            return EXIT_FAILURE;
        }
    };
    let mut releases = lease.watch_releases();
    let mut shown: Option<Key> = None;
    loop {
        let frame = tokio::select! {
            _ = stop.cancelled() => return 0,
            read = super::read_status(&lease, budget) => Frame::of(name, read),
        };
        if shown.as_ref() != Some(&frame.key) {
            if let Err(err) = out.draw(&frame) {
                eprintln!("leaderd: status --watch: cannot write the output: {err}");
                return EXIT_FAILURE;
            }
            shown = Some(frame.key);
        }
        tokio::select! {
            _ = stop.cancelled() => return 0,
            _ = releases.changed() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// What a change is judged on: the document without the counters that move on their own
/// (`remaining_ms`, each `seen_ms_ago`), or the kind of error.
#[derive(Debug, PartialEq)]
enum Key {
    Shown(Value),
    Failed(String),
}

/// One read, ready to print.
struct Frame {
    text: String,
    json: String,
    error: Option<String>,
    key: Key,
}

impl Frame {
    fn of(name: &str, read: Result<(Observed, Vec<Listed>), LeaseError>) -> Frame {
        match read {
            Ok((seen, candidates)) => {
                let json = super::status_json(name, &seen, &candidates);
                Frame {
                    text: super::status_text(name, &seen, &candidates),
                    key: Key::Shown(steady(&json)),
                    json,
                    error: None,
                }
            }
            Err(err) => {
                let line = super::status_error_line(name, &err);
                Frame {
                    text: format!("{line}\n"),
                    json: super::status_error_json(name, &err),
                    error: Some(line),
                    key: Key::Failed(error_kind(&err)),
                }
            }
        }
    }
}

/// The document without `remaining_ms` and the candidates' `seen_ms_ago`.
fn steady(json: &str) -> Value {
    let mut doc: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    if let Some(obj) = doc.as_object_mut() {
        obj.remove("remaining_ms");
    }
    if let Some(list) = doc.get_mut("candidates").and_then(Value::as_array_mut) {
        for c in list.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("seen_ms_ago");
        }
    }
    doc
}

/// An error as a change sees it: Redis unreachable stays one state whatever the cause says.
fn error_kind(err: &LeaseError) -> String {
    match err {
        LeaseError::Unavailable(failure) => format!("unavailable: {:?}", failure.kind),
        other => other.to_string(),
    }
}

/// Where frames go: JSON lines, a terminal redrawn in place, or blocks after blank lines.
struct Output {
    json: bool,
    tty: bool,
    drawn: usize,
}

impl Output {
    fn draw(&mut self, frame: &Frame) -> std::io::Result<()> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        if self.json {
            writeln!(out, "{}", frame.json)?;
            if let Some(line) = &frame.error {
                eprintln!("{line}");
            }
        } else if self.tty {
            write!(out, "{CLEAR}{}", frame.text)?;
        } else {
            if self.drawn > 0 {
                writeln!(out)?;
            }
            write!(out, "{}", frame.text)?;
        }
        self.drawn += 1;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clocks_alone_are_no_change() {
        let a = r#"{"name":"n","state":"held","holder":"a","fence":1,"remaining_ms":900,"candidates":[{"identity":"a","seen_ms_ago":3}]}"#;
        let b = r#"{"name":"n","state":"held","holder":"a","fence":1,"remaining_ms":400,"candidates":[{"identity":"a","seen_ms_ago":800}]}"#;
        assert_eq!(steady(a), steady(b));
        let c = b.replace("\"fence\":1", "\"fence\":2");
        assert_ne!(steady(a), steady(&c));
        let d = b.replace("\"identity\":\"a\"", "\"identity\":\"b\"");
        assert_ne!(steady(a), steady(&d));
    }
}
