//! One hook run: the command started directly in its own process group, stdin `/dev/null`,
//! output shared, the environment of exec mode (without leaderd's secrets), SIGKILLed with
//! its group at its deadline.

use std::process::Stdio;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// How a run ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it (not ours).
    Signalled(i32),
    /// Still running at the deadline: killed with its group.
    TimedOut,
    /// It could not be started.
    NotStarted(std::io::Error),
}

impl Outcome {
    /// The `code` logged: the exit code, 128 + the signal's number for a signal (137 for the
    /// SIGKILL at the deadline), 127 or 126 for a failure to start (as a shell gives them).
    pub(super) fn code(&self) -> i32 {
        match self {
            Outcome::Exited(code) => *code,
            Outcome::Signalled(signal) => 128 + signal,
            Outcome::TimedOut => 128 + Signal::SIGKILL as i32,
            Outcome::NotStarted(err) => crate::keeper::start_failure_code(err),
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

/// Runs `cmd` (program and arguments) with `env` added, until it ends or `kill` resolves.
pub(super) async fn run(
    cmd: &[String],
    env: &[(&'static str, String)],
    kill: impl std::future::Future<Output = ()>,
) -> Outcome {
    let Some((program, args)) = cmd.split_first() else {
        return Outcome::Exited(0);
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    crate::exec::without_secrets(command.as_std_mut());
    crate::keeper::dies_with_us(command.as_std_mut());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return Outcome::NotStarted(err),
    };
    let group = child.id().map(|id| Pid::from_raw(id as i32));
    tokio::select! {
        status = child.wait() => match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                match (status.code(), status.signal()) {
                    (Some(code), _) => Outcome::Exited(code),
                    (None, Some(sig)) => Outcome::Signalled(sig),
                    (None, None) => Outcome::Exited(-1),
                }
            }
            Err(err) => Outcome::NotStarted(err),
        },
        _ = kill => {
            if let Some(group) = group {
                let _ = killpg(group, Signal::SIGKILL);
            }
            let _ = child.wait().await;
            Outcome::TimedOut
        }
    }
}
