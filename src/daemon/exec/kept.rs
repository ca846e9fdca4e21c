//! leaderd's side of a keeper process ([`crate::daemon::keeper`]): starting one ([`spawn_keeper`]),
//! and running a hook or a health check under one to its end ([`run_once`]), so that the
//! command's whole process group, grandchildren included, dies when the command exits, at
//! its deadline, when leaderd asks, and when leaderd goes away (even by SIGKILL).

use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::daemon::keeper::{start_failure_code, Cause, Report, Request};

/// What a keeper is started with.
pub(crate) struct KeeperSpec<'a> {
    /// The command (program and arguments).
    pub command: &'a [String],
    /// Added to the environment (leaderd's, without its secrets).
    pub env: &'a [(&'static str, String)],
    /// Sent to the command's group on `stop`.
    pub stop_signal: Signal,
    /// Between the stop signal and SIGKILL.
    pub grace: Duration,
    /// The group is SIGKILLed this long before `valid_until`.
    pub margin: Duration,
    /// The first validity (for a hook or a health check: its timeout).
    pub valid_until: Instant,
    /// The keeper's, and so the command's, standard output.
    pub stdout: Stdio,
}

/// A started keeper: the process, the write side of its socket, and what it reports.
pub(crate) struct KeeperLink {
    pub process: tokio::process::Child,
    /// Dropping it closes the socket for writing: the keeper then SIGKILLs the group.
    pub link: OwnedWriteHalf,
    pub reports: mpsc::UnboundedReceiver<Report>,
}

/// Starts `leaderd __keeper` for `spec`, with one end of a Unix socket pair as its stdin,
/// leaderd's stderr, and a process group of its own: a signal to leaderd's group (`kill -9
/// -PGID`, Ctrl-\, a closing terminal) must leave the keeper alive to kill the command's
/// group in order.
pub(crate) fn spawn_keeper(spec: KeeperSpec<'_>) -> std::io::Result<KeeperLink> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let mut cmd = tokio::process::Command::new(super::own_binary());
    cmd.process_group(0)
        .arg0("leaderd-keeper")
        .arg("__keeper")
        .arg("--stop-signal")
        .arg(spec.stop_signal.as_str())
        .arg("--grace-ms")
        .arg(spec.grace.as_millis().to_string())
        .arg("--margin-ms")
        .arg(spec.margin.as_millis().to_string())
        .arg("--valid-until-ns")
        .arg(super::monotonic_deadline(spec.valid_until).to_string())
        .arg("--")
        .args(spec.command)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(spec.stdout)
        .stderr(Stdio::inherit());
    super::without_secrets(cmd.as_std_mut());
    let process = cmd.spawn()?;
    drop(cmd); // our copy of the keeper's end: its closing must reach us as end of file
    ours.set_nonblocking(true)?;
    let (read, link) = tokio::net::UnixStream::from_std(ours)?.into_split();
    let (tx, reports) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(report) = Report::parse(&line) {
                if tx.send(report).is_err() {
                    return;
                }
            }
        }
    });
    Ok(KeeperLink {
        process,
        link,
        reports,
    })
}

/// How a command run by [`run_once`] ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// It exited by itself with this code (128 + the signal for a signal that was not ours).
    Exited(i32),
    /// Still running at its deadline, or when `kill` resolved: SIGKILLed with its group.
    Killed,
    /// It could not be started: why, and 127 (not found), 126 (not executable) or 1.
    NotStarted(String, i32),
}

/// Runs `command` once under a keeper: SIGKILLed with its whole group at `deadline` (by the
/// keeper, even if leaderd is paused), when `kill` resolves, or at once if leaderd dies;
/// what it leaves in its group when it exits is SIGKILLed too. Dropping the future also
/// kills the group (the keeper sees its socket close).
pub(crate) async fn run_once(
    command: &[String],
    env: &[(&'static str, String)],
    stdout: Stdio,
    deadline: Instant,
    kill: impl std::future::Future<Output = ()>,
) -> Ended {
    let spec = KeeperSpec {
        command,
        env,
        stop_signal: Signal::SIGKILL,
        grace: Duration::ZERO,
        margin: Duration::ZERO,
        valid_until: deadline,
        stdout,
    };
    let mut keeper = match spawn_keeper(spec) {
        Ok(keeper) => keeper,
        Err(err) => {
            let why = format!("cannot start the keeper process: {err}");
            return Ended::NotStarted(why, start_failure_code(&err));
        }
    };
    tokio::pin!(kill);
    let (mut group, mut error, mut stopped) = (None, None, false);
    let ended = loop {
        tokio::select! {
            report = keeper.reports.recv() => match report {
                Some(Report::Started(pid)) => group = Some(Pid::from_raw(pid)),
                Some(Report::NotStarted(why)) => error = Some(why),
                Some(Report::Ended(code, Cause::SpawnFailed)) => {
                    break Ended::NotStarted(error.take().unwrap_or_default(), code);
                }
                Some(Report::Ended(_, Cause::Expired | Cause::Stopped)) => break Ended::Killed,
                Some(Report::Ended(code, _)) => break Ended::Exited(code),
                None => {
                    // The keeper vanished without a report: its command died with it (its
                    // parent-death signal); the rest of the group goes now.
                    if let Some(group) = group {
                        let _ = killpg(group, Signal::SIGKILL);
                    }
                    break Ended::Killed;
                }
            },
            _ = &mut kill, if !stopped => {
                stopped = true;
                let stop = format!("{}\n", Request::Stop);
                let _ = keeper.link.write_all(stop.as_bytes()).await;
            }
        }
    };
    // The keeper exits once it has reported the end; reap it.
    if tokio::time::timeout(Duration::from_secs(1), keeper.process.wait())
        .await
        .is_err()
    {
        let _ = keeper.process.start_kill();
    }
    ended
}
