//! One hook run: the command started under a keeper ([`crate::daemon::exec::run_once`]), in its own
//! process group, stdin `/dev/null`, output shared, the environment of exec mode (without
//! leaderd's secrets); SIGKILLed with its group at its deadline, and what it leaves in its
//! group goes when it exits or when leaderd dies.

use std::process::Stdio;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::daemon::exec::Ended;

/// How a run ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// It exited with this code (128 + the signal's number for a signal that was not ours).
    Exited(i32),
    /// Still running at the deadline: killed with its group.
    TimedOut,
    /// It could not be started: why, and the code a shell gives (127, 126 or 1).
    NotStarted(String, i32),
}

impl Outcome {
    /// The `code` logged: the exit code, 128 + the signal's number for a signal (137 for the
    /// SIGKILL at the deadline), 127 or 126 for a failure to start (as a shell gives them).
    pub(super) fn code(&self) -> i32 {
        match self {
            Outcome::Exited(code) | Outcome::NotStarted(_, code) => *code,
            Outcome::TimedOut => 128 + Signal::SIGKILL as i32,
        }
    }

    /// The `result` label.
    pub(super) fn result(&self) -> &'static str {
        match self {
            Outcome::Exited(0) => "ok",
            Outcome::TimedOut => "timeout",
            _ => "failed",
        }
    }
}

/// Runs `cmd` (program and arguments) with `env` added, until it ends, `timeout_at` passes
/// or `kill` resolves.
pub(super) async fn run(
    cmd: &[String],
    env: &[(&'static str, String)],
    timeout_at: Instant,
    kill: impl std::future::Future<Output = ()>,
) -> Outcome {
    if cmd.is_empty() {
        return Outcome::Exited(0);
    }
    match crate::daemon::exec::run_once(cmd, env, Stdio::inherit(), timeout_at, kill).await {
        Ended::Exited(code) => Outcome::Exited(code),
        Ended::Killed => Outcome::TimedOut,
        Ended::NotStarted(why, code) => Outcome::NotStarted(why, code),
    }
}
