//! The keeper's reports to leaderd, one line each: `pid <pid>` and `exit <code> <cause>`.

/// Why the child ended, as the keeper reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
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
    pub fn as_str(self) -> &'static str {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The child runs; its pid is also its process group.
    Started(i32),
    /// The child has been reaped: its exit code (128 + signal for a signal) and why.
    Ended(i32, Cause),
}

impl Report {
    /// Parses one line; `None` for anything else.
    pub fn parse(line: &str) -> Option<Report> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
