//! The keeper's wire protocol, one line per message, each a type with `Display` (what is
//! written, without the newline) and `parse`: leaderd's [`Request`]s (`extend <ns>`, `stop`)
//! and the keeper's [`Report`]s (`pid <pid>`, `not_started <error>`, `exit <code> <cause>`).

use std::fmt;

/// A line from leaderd to the keeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// A new validity, in absolute `CLOCK_MONOTONIC` nanoseconds.
    Extend(u64),
    /// Stop the child: the stop signal, then SIGKILL after the grace period.
    Stop,
}

impl Request {
    /// Parses one line; `None` for anything else.
    pub(crate) fn parse(line: &str) -> Option<Request> {
        let mut words = line.split_whitespace();
        match (words.next()?, words.next(), words.next()) {
            ("extend", Some(ns), None) => ns.parse().ok().map(Request::Extend),
            ("stop", None, None) => Some(Request::Stop),
            _ => None,
        }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::Extend(ns) => write!(f, "extend {ns}"),
            Request::Stop => f.write_str("stop"),
        }
    }
}

/// Why the child ended, as the keeper reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// It exited by itself while the term went on.
    Exited,
    /// leaderd asked to stop it.
    Stopped,
    /// The validity passed without an extension: the keeper killed it on its own.
    Expired,
    /// leaderd went away: the keeper killed it at once.
    Orphaned,
    /// It could not be started (code 127: not found, 126: not executable, else 1).
    SpawnFailed,
}

impl Cause {
    /// The word used on the wire and in logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cause::Exited => "exited",
            Cause::Stopped => "stopped",
            Cause::Expired => "expired",
            Cause::Orphaned => "orphaned",
            Cause::SpawnFailed => "spawn_failed",
        }
    }

    fn parse(word: &str) -> Option<Cause> {
        [
            Cause::Exited,
            Cause::Stopped,
            Cause::Expired,
            Cause::Orphaned,
            Cause::SpawnFailed,
        ]
        .into_iter()
        .find(|c| c.as_str() == word)
    }
}

/// A line from the keeper to leaderd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// The child runs; its pid is also its process group.
    Started(i32),
    /// The child could not be started, for this reason (an `Ended` with
    /// [`Cause::SpawnFailed`] follows).
    NotStarted(String),
    /// The child has been reaped: its exit code (128 + signal for a signal) and why.
    Ended(i32, Cause),
}

impl Report {
    /// Parses one line; `None` for anything else.
    pub(crate) fn parse(line: &str) -> Option<Report> {
        if let Some(error) = line.strip_prefix("not_started ") {
            return Some(Report::NotStarted(error.to_string()));
        }
        let mut words = line.split_whitespace();
        match (words.next()?, words.next()?, words.next()) {
            ("pid", pid, None) => pid.parse().ok().map(Report::Started),
            ("exit", code, Some(cause)) => {
                Some(Report::Ended(code.parse().ok()?, Cause::parse(cause)?))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Started(pid) => write!(f, "pid {pid}"),
            Report::NotStarted(error) => write!(f, "not_started {}", error.replace('\n', " ")),
            Report::Ended(code, cause) => write!(f, "exit {code} {}", cause.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_parses_back_from_its_display() {
        for request in [Request::Extend(42), Request::Stop] {
            assert_eq!(Request::parse(&request.to_string()), Some(request));
        }
        for report in [
            Report::Started(7),
            Report::NotStarted("No such file or directory (os error 2)".into()),
            Report::Ended(137, Cause::SpawnFailed),
        ] {
            assert_eq!(Report::parse(&report.to_string()), Some(report));
        }
        let two_lines = Report::NotStarted("a\nb".into()).to_string();
        assert_eq!(two_lines, "not_started a b");
        assert_eq!(Request::parse("stop now"), None);
        assert_eq!(Request::parse("extend x"), None);
    }

    #[test]
    fn reports_round_trip() {
        assert_eq!(Report::parse("pid 42"), Some(Report::Started(42)));
        assert_eq!(
            Report::parse("exit 137 expired"),
            Some(Report::Ended(137, Cause::Expired))
        );
        assert_eq!(
            Report::parse("exit 3 exited"),
            Some(Report::Ended(3, Cause::Exited))
        );
        assert_eq!(Report::parse("exit x exited"), None);
        assert_eq!(Report::parse("exit 1 bogus"), None);
        assert_eq!(Report::parse("hello"), None);
    }
}
