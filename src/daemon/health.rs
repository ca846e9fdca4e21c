//! The health check of `election.health_check`: an HTTP GET or a command run every `period`,
//! each within `timeout`; the replica is healthy after one passing check and unhealthy after
//! `failures` failing ones in a row (and until its first check passes). The verdict goes to
//! the elector on a watch channel and into the status document.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::daemon::config::HealthCheckConfig;
use crate::daemon::exec::Ended;

/// Why one check failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    /// The URL is not `http://host[:port][/path]`.
    #[error("http_get {0}: not an http:// URL")]
    BadUrl(String),
    /// Connecting, sending or reading failed.
    #[error("http_get {url}: {cause}")]
    Http {
        /// The URL.
        url: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The answer was not 2xx (0: not an HTTP answer).
    #[error("http_get {url}: status {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The command could not be started.
    #[error("command {program:?}: cannot start: {cause}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        cause: String,
    },
    /// The command exited unsuccessfully.
    #[error("command {program:?}: exit code {code}")]
    Exit {
        /// The program.
        program: String,
        /// Its exit code (128 + the signal's number for a signal).
        code: i32,
    },
    /// The check did not finish within `timeout`.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

/// Consecutive-failure counting: healthy after one pass, unhealthy after `failures` failures
/// in a row; unhealthy at first.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    failures: u32,
    failed_in_a_row: u32,
    healthy: bool,
}

impl Tracker {
    /// Unhealthy until the first pass; `failures` is at least 1.
    pub(crate) fn new(failures: u32) -> Self {
        Tracker {
            failures: failures.max(1),
            failed_in_a_row: 0,
            healthy: false,
        }
    }

    /// Records one check; returns the new verdict when it changed.
    pub(crate) fn record(&mut self, passed: bool) -> Option<bool> {
        if passed {
            self.failed_in_a_row = 0;
        } else {
            self.failed_in_a_row = self.failed_in_a_row.saturating_add(1);
        }
        let healthy = passed || (self.healthy && self.failed_in_a_row < self.failures);
        let changed = healthy != self.healthy;
        self.healthy = healthy;
        changed.then_some(healthy)
    }

    /// The current verdict.
    #[cfg(test)]
    pub(crate) fn healthy(&self) -> bool {
        self.healthy
    }
}

/// Starts checking health when `config` is set, until `shutdown`; the receiver carries the
/// verdict (false until the first check passes; always true without a check).
pub(crate) fn watch_health(
    config: Option<HealthCheckConfig>,
    shutdown: CancellationToken,
) -> watch::Receiver<bool> {
    let Some(config) = config else {
        return watch::channel(true).1;
    };
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut tracker = Tracker::new(config.failures);
        let mut ticks = tokio::time::interval(config.period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            let outcome = tokio::select! {
                outcome = check(&config) => outcome,
                _ = shutdown.cancelled() => return,
            };
            if let Err(err) = &outcome {
                tracing::debug!(event = "health_check_failed", error = %err, "health check failed: {err}");
            }
            if let Some(healthy) = tracker.record(outcome.is_ok()) {
                match &outcome {
                    Ok(()) => tracing::info!(event = "health_changed", healthy, "healthy"),
                    Err(err) => tracing::warn!(event = "health_changed", healthy, error = %err,
                        "unhealthy after {} failed check(s): {err}", config.failures),
                }
                let _ = tx.send(healthy);
            }
        }
    });
    rx
}

/// Runs one check within the configured timeout.
///
/// # Errors
/// [`CheckError`] when the check fails or times out.
pub(crate) async fn check(config: &HealthCheckConfig) -> Result<(), CheckError> {
    if let Some(url) = &config.http_get {
        let get = http_get(url);
        return match tokio::time::timeout(config.timeout, get).await {
            Ok(result) => result,
            Err(_) => Err(CheckError::TimedOut(config.timeout)),
        };
    }
    run_command(&config.command, config.timeout).await
}

/// `GET url` over HTTP/1.1; passes on a 2xx status.
async fn http_get(url: &str) -> Result<(), CheckError> {
    let (authority, path) = split_url(url).ok_or_else(|| CheckError::BadUrl(url.to_owned()))?;
    let io = |cause| CheckError::Http {
        url: url.to_owned(),
        cause,
    };
    let target = if has_port(authority) {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let mut stream = TcpStream::connect(target).await.map_err(io)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: leaderd\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.map_err(io)?;
    let mut head = Vec::with_capacity(64);
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < 1024 {
        let n = stream.read(&mut buf).await.map_err(io)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let status = status_code(&head);
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(CheckError::Status {
            url: url.to_owned(),
            status,
        })
    }
}

/// `http://authority/path` into the authority and the request target (`/` when absent).
fn split_url(url: &str) -> Option<(&str, String)> {
    let rest = url.strip_prefix("http://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let tail = tail.split('#').next().unwrap_or("");
    let target = match tail.chars().next() {
        Some('/') => tail.to_owned(),
        _ => format!("/{tail}"),
    };
    (!authority.is_empty()).then_some((authority, target))
}

fn has_port(authority: &str) -> bool {
    match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    }
}

/// The status of an `HTTP/1.x NNN ...` status line; 0 when there is none.
fn status_code(head: &[u8]) -> u16 {
    let line = String::from_utf8_lossy(head);
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some(version), Some(code)) if version.starts_with("HTTP/") => code.parse().unwrap_or(0),
        _ => 0,
    }
}

/// Runs the command under a keeper ([`crate::daemon::exec::run_once`]), in its own process group;
/// passes when it exits 0 within `timeout`. Its whole group is SIGKILLed when it exits, at
/// the timeout, and when leaderd goes away.
async fn run_command(command: &[String], timeout: Duration) -> Result<(), CheckError> {
    let program = command.first().cloned().unwrap_or_default();
    let deadline = tokio::time::Instant::now() + timeout;
    let never = std::future::pending();
    match crate::daemon::exec::run_once(command, &[], Stdio::null(), deadline, never).await {
        Ended::Exited(0) => Ok(()),
        Ended::Exited(code) => Err(CheckError::Exit { program, code }),
        Ended::Killed => Err(CheckError::TimedOut(timeout)),
        Ended::NotStarted(cause, _) => Err(CheckError::Spawn { program, cause }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_makes_healthy_and_failures_in_a_row_unhealthy() {
        let mut t = Tracker::new(3);
        assert!(!t.healthy());
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(true), Some(true));
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(true), None);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), Some(false));
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(true), Some(true));
    }

    #[test]
    fn urls_split_into_authority_and_path() {
        let split = |u| split_url(u).map(|(a, p)| (a.to_owned(), p));
        assert_eq!(
            split("http://a:8080/h?x=1"),
            Some(("a:8080".into(), "/h?x=1".into()))
        );
        assert_eq!(split("http://a"), Some(("a".into(), "/".into())));
        assert_eq!(split("http://a?x"), Some(("a".into(), "/?x".into())));
        assert_eq!(
            split("http://[::1]:81/#f"),
            Some(("[::1]:81".into(), "/".into()))
        );
        assert_eq!(split_url("https://a/"), None);
        assert_eq!(split_url("http:///x"), None);
        assert!(has_port("a:1") && has_port("[::1]:2"));
        assert!(!has_port("a") && !has_port("[::1]"));
        assert_eq!(status_code(b"HTTP/1.1 204 No Content\r\n"), 204);
        assert_eq!(status_code(b"garbage"), 0);
    }
}
