//! `leaderd status --watch`: the output of `status` kept on screen and drawn again at every
//! change (an announcement, a candidate joining, leaving or changing; in a sharded election a
//! shard changing owner or term) until SIGINT/SIGTERM; with `--json`, one document per
//! change, one a line.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::Value;

use crate::backend::Backend;
use crate::daemon::candidacy::Listed;
use crate::daemon::cli::{one_shot_budget, runtime, EXIT_FAILURE};
use crate::daemon::config::Config;
use crate::daemon::shutdown::Early;
use crate::lease::{Lease, LeaseError, Observed};

/// Home the cursor and clear the screen (a terminal only).
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Watches until a signal; 0 after SIGINT/SIGTERM, 1 when the output cannot be written.
pub(super) fn run(config: &Config, lease: Backend, json: bool, early: Early) -> i32 {
    let out = Output {
        json,
        tty: std::io::stdout().is_terminal(),
        drawn: 0,
    };
    let every = config.election.retry_period;
    let budget = one_shot_budget(&lease, config);
    runtime().block_on(watch(config, lease, (every, budget), out, early))
}

async fn watch(
    config: &Config,
    lease: Backend,
    (every, budget): (Duration, Duration),
    mut out: Output,
    early: Early,
) -> i32 {
    let stop = match crate::daemon::shutdown::install(early) {
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
            frame = Frame::read(config, &lease, budget) => frame,
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
    /// What `status` would print now: of the lease, or in a sharded election of every shard.
    async fn read(config: &Config, lease: &Backend, budget: Duration) -> Frame {
        let name = &config.name;
        if config.election.shards == 0 {
            return Frame::of(name, super::read_status(lease, budget).await);
        }
        match super::sharded::read(lease, config, budget).await {
            Ok((rows, listed)) => Frame::shown(
                super::sharded::text(name, &rows, &listed),
                super::sharded::json_doc(name, &rows, &listed),
            ),
            Err(err) => Frame::failed(name, &err),
        }
    }

    fn of(name: &str, read: Result<(Observed, Vec<Listed>), LeaseError>) -> Frame {
        match read {
            Ok((seen, candidates)) => Frame::shown(
                super::status_text(name, &seen, &candidates),
                super::status_json(name, &seen, &candidates),
            ),
            Err(err) => Frame::failed(name, &err),
        }
    }

    fn shown(text: String, json: String) -> Frame {
        Frame {
            text,
            key: Key::Shown(steady(&json)),
            json,
            error: None,
        }
    }

    fn failed(name: &str, err: &LeaseError) -> Frame {
        let line = super::status_error_line(name, err);
        Frame {
            text: format!("{line}\n"),
            json: super::status_error_json(name, err),
            error: Some(line),
            key: Key::Failed(error_kind(err)),
        }
    }
}

/// The document without `remaining_ms` (its own, and each shard's) and the candidates'
/// `seen_ms_ago`.
fn steady(json: &str) -> Value {
    let mut doc: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    if let Some(obj) = doc.as_object_mut() {
        obj.remove("remaining_ms");
    }
    let without = |doc: &mut Value, list: &str, key: &str| {
        if let Some(items) = doc.get_mut(list).and_then(Value::as_array_mut) {
            for item in items.iter_mut().filter_map(Value::as_object_mut) {
                item.remove(key);
            }
        }
    };
    without(&mut doc, "candidates", "seen_ms_ago");
    without(&mut doc, "shards", "remaining_ms");
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
