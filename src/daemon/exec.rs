//! Exec mode on leaderd's side: the [`LeaderWork`] that runs the configured command only while
//! this replica leads, through one keeper process per term (see [`crate::daemon::keeper`]).
//!
//! leaderd starts `leaderd __keeper` with one end of a Unix socket pair as its stdin and its
//! own stdout and stderr, so the child's output passes through. Every new validity is sent
//! to the keeper as an absolute `CLOCK_MONOTONIC` instant; the keeper kills the child's group
//! on its own [`keeper_margin`] before the last validity it was told, and at once when the
//! socket closes because leaderd went away; it runs in a process group of its own, so that
//! no signal to leaderd's group takes it along. Should the keeper itself vanish, its child
//! dies with it and leaderd kills the rest of the child's group.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::time::Instant;

mod kept;
mod secrets;
mod shards;
pub(crate) use kept::{run_once, Ended};
use kept::{spawn_keeper, KeeperLink, KeeperSpec};
pub(crate) use secrets::{remember_secret_vars, without_secrets};
pub(crate) use shards::{ChildExits, ShardWork};

use crate::daemon::config::Config;
use crate::daemon::keeper::{monotonic_ns, Cause, Report, Request};
use crate::daemon::state::TermView;
use crate::election::LeaderWork;

/// How long before a term's validity the keeper kills a child whose validity was not
/// extended: `lease_duration / 20`, at least 100ms and at most 1s.
///
/// It covers the keeper's own latency between its deadline and the SIGKILL (waking up under
/// load); a SIGKILLed process runs no further user code, so the child is dead before the
/// validity. The same bound caps a graceful stop: SIGKILL comes at the earlier of
/// `grace_period` after the stop signal and this margin before the validity.
pub(crate) fn keeper_margin(lease_duration: Duration) -> Duration {
    (lease_duration / 20).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// Why the keeper could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecError {
    /// The socket pair or the keeper process could not be created.
    #[error("cannot start the keeper process: {0}")]
    Spawn(#[from] std::io::Error),
}

/// The exec-mode work: one keeper, and through it one child, per term.
pub(crate) struct ExecWork {
    command: Vec<String>,
    stop_signal: Signal,
    grace: Duration,
    margin: Duration,
    env: Vec<(&'static str, String)>,
    keeper: Option<Keeper>,
    /// A keeper that could not be started: reported once by `exited` as code 127.
    failed: bool,
}

impl ExecWork {
    /// The work of `config.exec` (whose command must not be empty).
    pub(crate) fn new(config: &Config) -> Self {
        let leader_file = config.publish.leader_file.as_deref().map(Path::display);
        ExecWork {
            command: config.exec.command.clone(),
            stop_signal: config.exec.stop_signal,
            grace: config.exec.grace_period,
            margin: keeper_margin(config.election.lease_duration),
            env: vec![
                ("LEADERD_NAME", config.name.clone()),
                ("LEADERD_IDENTITY", config.identity.clone()),
                (
                    "LEADERD_LEADER_FILE",
                    leader_file.map(|p| p.to_string()).unwrap_or_default(),
                ),
            ],
            keeper: None,
            failed: false,
        }
    }

    /// The work of one shard of a sharded election: its child also gets `LEADERD_SHARD`.
    pub(crate) fn for_shard(config: &Config, shard: u32) -> Self {
        let mut work = ExecWork::new(config);
        work.env.push(("LEADERD_SHARD", shard.to_string()));
        work
    }

    fn spawn(&self, term: &TermView) -> Result<Keeper, ExecError> {
        let mut env = self.env.clone();
        env.push(("LEADERD_FENCE", term.fence.to_string()));
        let KeeperLink {
            process,
            link,
            reports,
        } = spawn_keeper(KeeperSpec {
            command: &self.command,
            env: &env,
            stop_signal: self.stop_signal,
            grace: self.grace,
            margin: self.margin,
            valid_until: term.valid_until,
            stdout: Stdio::inherit(),
        })?;
        Ok(Keeper {
            process,
            link,
            reports,
            group: None,
            ended: None,
            fence: term.fence,
            command: format!("{:?}", self.command),
            start_error: None,
        })
    }
}

impl LeaderWork for ExecWork {
    async fn start(&mut self, term: &TermView) {
        if self.keeper.is_some() {
            self.stop().await;
        }
        match self.spawn(term) {
            Ok(keeper) => self.keeper = Some(keeper),
            Err(err) => {
                tracing::error!(event = "child_failed", fence = term.fence, error = %err, "{err}");
                self.failed = true;
            }
        }
    }

    async fn extend(&mut self, term: &TermView) {
        if let Some(keeper) = &mut self.keeper {
            let extend = Request::Extend(monotonic_deadline(term.valid_until));
            let _ = keeper
                .link
                .write_all(format!("{extend}\n").as_bytes())
                .await;
        }
    }

    async fn stop(&mut self) {
        self.failed = false;
        let Some(mut keeper) = self.keeper.take() else {
            return;
        };
        if keeper.ended.is_none() {
            let stop = format!("{}\n", Request::Stop);
            let _ = keeper.link.write_all(stop.as_bytes()).await;
            // The keeper SIGKILLs the group within the grace period at the latest.
            let limit = self.grace + Duration::from_secs(1);
            let _ = tokio::time::timeout(limit, async {
                while keeper.ended.is_none() && keeper.next().await.is_some() {}
            })
            .await;
        }
        if keeper.ended.is_none() {
            keeper.kill_group("the keeper did not report the child's end");
            let _ = keeper.process.start_kill();
        }
        if tokio::time::timeout(Duration::from_secs(1), keeper.process.wait())
            .await
            .is_err()
        {
            let _ = keeper.process.start_kill();
        }
    }

    async fn exited(&mut self) -> i32 {
        if std::mem::take(&mut self.failed) {
            return 127;
        }
        let Some(keeper) = &mut self.keeper else {
            return std::future::pending().await;
        };
        loop {
            if let Some((code, _)) = keeper.ended {
                return code;
            }
            if keeper.next().await.is_none() {
                keeper.kill_group("the keeper went away");
                keeper.ended = Some((128 + Signal::SIGKILL as i32, Cause::Orphaned));
            }
        }
    }
}

/// One term's keeper process and what it has reported.
struct Keeper {
    process: tokio::process::Child,
    link: OwnedWriteHalf,
    reports: mpsc::UnboundedReceiver<Report>,
    /// The child's process group, once the keeper has started it.
    group: Option<Pid>,
    /// The child's exit code and cause, once reaped.
    ended: Option<(i32, Cause)>,
    fence: u64,
    /// The command, for the logs.
    command: String,
    /// Why the child could not be started, as the keeper reported it.
    start_error: Option<String>,
}

impl Keeper {
    /// The next report, applied to what is known; `None` once the keeper's socket closed.
    async fn next(&mut self) -> Option<Report> {
        let report = self.reports.recv().await?;
        match &report {
            Report::Started(pid) => {
                let pid = *pid;
                self.group = Some(Pid::from_raw(pid));
                tracing::info!(
                    event = "child_started",
                    fence = self.fence,
                    pid,
                    "child started (pid {pid})"
                );
            }
            Report::NotStarted(error) => self.start_error = Some(error.clone()),
            Report::Ended(code, cause) => {
                self.ended = Some((*code, *cause));
                self.log_ended(*code, *cause);
            }
        }
        Some(report)
    }

    fn log_ended(&self, code: i32, cause: Cause) {
        let (fence, reason) = (self.fence, cause.as_str());
        match cause {
            Cause::Expired => tracing::warn!(
                event = "child_ended",
                fence,
                code,
                cause = reason,
                "the keeper killed the child: the term's validity passed without an extension"
            ),
            Cause::SpawnFailed => {
                let (command, error) = (&self.command, self.start_error.as_deref().unwrap_or(""));
                tracing::warn!(
                    event = "child_ended",
                    fence,
                    code,
                    cause = reason,
                    command,
                    error,
                    "cannot start the child {command}: {error}"
                );
            }
            _ => tracing::info!(
                event = "child_ended",
                fence,
                code,
                cause = reason,
                "child ended with code {code} ({reason})"
            ),
        }
    }

    fn kill_group(&mut self, why: &str) {
        if let Some(group) = self.group.filter(|_| self.ended.is_none()) {
            tracing::warn!(
                event = "child_killed",
                fence = self.fence,
                "{why}: killing the child's group"
            );
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// `valid_until` as an absolute `CLOCK_MONOTONIC` instant in nanoseconds. The clock is read
/// before the `Instant`: a pause between the two reads makes the deadline earlier, never later.
fn monotonic_deadline(valid_until: Instant) -> u64 {
    let base = monotonic_ns();
    let left = valid_until.saturating_duration_since(Instant::now());
    base.saturating_add(left.as_nanos() as u64)
}

/// This very binary, even if its file has been replaced since it started.
fn own_binary() -> PathBuf {
    let proc_self = PathBuf::from("/proc/self/exe");
    if proc_self.exists() {
        return proc_self;
    }
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("leaderd"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margins_scale_with_the_lease_within_bounds() {
        assert_eq!(
            keeper_margin(Duration::from_secs(2)),
            Duration::from_millis(100)
        );
        assert_eq!(
            keeper_margin(Duration::from_secs(15)),
            Duration::from_millis(750)
        );
        assert_eq!(
            keeper_margin(Duration::from_millis(500)),
            Duration::from_millis(100)
        );
        assert_eq!(
            keeper_margin(Duration::from_secs(60)),
            Duration::from_secs(1)
        );
    }
}
