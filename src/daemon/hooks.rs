//! Hooks: commands run when leadership changes, as notifications that never hold up the
//! election. Events are pushed without waiting onto a bounded queue ([`HookSink`]); one
//! runner task ([`run_hooks`]) runs them one at a time, in order, each in its own process
//! group, SIGKILLed with its group at `hooks.timeout`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::daemon::config::Config;
use crate::daemon::metrics::Metrics;

mod process;

/// At most this many events wait; pushing more drops the oldest waiting ones.
pub(crate) const QUEUE_BOUND: usize = 100;

/// Which hook an event runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hook {
    /// This replica began a term.
    Acquired,
    /// This replica's term ended; its claim is over.
    SteppedDown,
    /// This replica sees another leader, or none.
    LeaderChanged,
}

impl Hook {
    /// The config key and the `hook` label.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Hook::Acquired => "on_acquired",
            Hook::SteppedDown => "on_stepped_down",
            Hook::LeaderChanged => "on_leader_changed",
        }
    }

    /// `LEADERD_EVENT`.
    fn event(self) -> &'static str {
        match self {
            Hook::Acquired => "acquired",
            Hook::SteppedDown => "stepped_down",
            Hook::LeaderChanged => "leader_changed",
        }
    }
}

/// One event to run a hook for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HookEvent {
    /// Which hook.
    pub hook: Hook,
    /// `LEADERD_FENCE`: this term's, or the observed leader's; None: empty.
    pub fence: Option<u64>,
    /// `LEADERD_LEADER`: the leader's identity; None: empty.
    pub leader: Option<String>,
    /// `LEADERD_REASON` (stepped_down only).
    pub reason: Option<&'static str>,
    /// `LEADERD_LEASE_VALID_UNTIL_MS` (acquired only).
    pub valid_until_ms: Option<u64>,
    /// `LEADERD_SHARD`: the shard of a sharded election's event (README, "Shards").
    pub shard: Option<u32>,
}

impl HookEvent {
    /// This replica (`me`) began term `fence`, valid until `valid_until_ms`.
    pub(crate) fn acquired(me: &str, fence: u64, valid_until_ms: u64) -> Self {
        HookEvent {
            hook: Hook::Acquired,
            fence: Some(fence),
            leader: Some(me.to_string()),
            reason: None,
            valid_until_ms: Some(valid_until_ms),
            shard: None,
        }
    }

    /// This replica's term `fence` ended for `reason`.
    pub(crate) fn stepped_down(fence: u64, reason: &'static str) -> Self {
        HookEvent {
            hook: Hook::SteppedDown,
            fence: Some(fence),
            leader: None,
            reason: Some(reason),
            valid_until_ms: None,
            shard: None,
        }
    }

    /// This replica sees `leader` (None: nobody) with `fence`.
    pub(crate) fn leader_changed(leader: Option<String>, fence: Option<u64>) -> Self {
        HookEvent {
            hook: Hook::LeaderChanged,
            fence,
            leader,
            reason: None,
            valid_until_ms: None,
            shard: None,
        }
    }

    /// The same event, of shard `shard`.
    pub(crate) fn of_shard(mut self, shard: u32) -> Self {
        self.shard = Some(shard);
        self
    }

    /// The variables this event adds to the environment of exec mode.
    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("LEADERD_EVENT", self.hook.event().to_string()),
            (
                "LEADERD_FENCE",
                self.fence.map(|f| f.to_string()).unwrap_or_default(),
            ),
            ("LEADERD_LEADER", self.leader.clone().unwrap_or_default()),
        ];
        if let Some(reason) = self.reason {
            env.push(("LEADERD_REASON", reason.to_string()));
        }
        if let Some(ms) = self.valid_until_ms {
            env.push(("LEADERD_LEASE_VALID_UNTIL_MS", ms.to_string()));
        }
        if let Some(shard) = self.shard {
            env.push(("LEADERD_SHARD", shard.to_string()));
        }
        env
    }
}

/// The configured commands, by hook.
#[derive(Debug, Clone, Default)]
struct Commands {
    on_acquired: Vec<String>,
    on_stepped_down: Vec<String>,
    on_leader_changed: Vec<String>,
}

impl Commands {
    fn of(&self, hook: Hook) -> &[String] {
        match hook {
            Hook::Acquired => &self.on_acquired,
            Hook::SteppedDown => &self.on_stepped_down,
            Hook::LeaderChanged => &self.on_leader_changed,
        }
    }
}

struct Queue {
    waiting: VecDeque<HookEvent>,
    /// No more events will come (the daemon is finishing).
    closed: bool,
}

/// The push side of the hook queue: cheap to clone, never blocks.
#[derive(Clone)]
pub(crate) struct HookSink {
    queue: Arc<Mutex<Queue>>,
    wake: Arc<Notify>,
    commands: Arc<Commands>,
    metrics: Arc<Metrics>,
}

impl HookSink {
    /// Queues `event` if its hook is configured; when [`QUEUE_BOUND`] are waiting, the
    /// oldest waiting one is dropped and counted.
    pub(crate) fn push(&self, event: HookEvent) {
        if self.commands.of(event.hook).is_empty() {
            return;
        }
        let dropped = {
            let mut q = self.queue.lock().expect("hook queue lock");
            if q.closed {
                Some(event)
            } else {
                q.waiting.push_back(event);
                (q.waiting.len() > QUEUE_BOUND)
                    .then(|| q.waiting.pop_front())
                    .flatten()
            }
        };
        if let Some(old) = dropped {
            self.drop_event(&old, "the queue is full");
        }
        self.wake.notify_one();
    }

    fn drop_event(&self, event: &HookEvent, why: &str) {
        let hook = event.hook.key();
        self.metrics.outputs.hook_run(hook, "dropped");
        tracing::warn!(event = "hook_dropped", hook, "hook {hook} dropped: {why}");
    }

    fn next(&self) -> Option<HookEvent> {
        self.queue
            .lock()
            .expect("hook queue lock")
            .waiting
            .pop_front()
    }

    fn close(&self) {
        self.queue.lock().expect("hook queue lock").closed = true;
    }
}

/// The runner's side: what it needs to run a command.
pub(crate) struct HookRunner {
    sink: HookSink,
    timeout: Duration,
    grace: Duration,
    base_env: Vec<(&'static str, String)>,
}

/// The sink and runner of `config.hooks`.
pub(crate) fn hooks(config: &Config, metrics: Arc<Metrics>) -> (HookSink, HookRunner) {
    let h = &config.hooks;
    let sink = HookSink {
        queue: Arc::new(Mutex::new(Queue {
            waiting: VecDeque::new(),
            closed: false,
        })),
        wake: Arc::new(Notify::new()),
        commands: Arc::new(Commands {
            on_acquired: h.on_acquired.clone(),
            on_stepped_down: h.on_stepped_down.clone(),
            on_leader_changed: h.on_leader_changed.clone(),
        }),
        metrics,
    };
    let leader_file = config.publish.leader_file.as_deref();
    let runner = HookRunner {
        sink: sink.clone(),
        timeout: h.timeout,
        grace: config.exec.grace_period,
        base_env: vec![
            ("LEADERD_NAME", config.name.clone()),
            ("LEADERD_IDENTITY", config.identity.clone()),
            (
                "LEADERD_LEADER_FILE",
                leader_file
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
        ],
    };
    (sink, runner)
}

/// After a shutdown signal, hooks run at most this long past `exec.grace_period` from the
/// signal: leaderd exits within `grace_period + 1s` of it, its own last steps included.
const PAST_GRACE_AT_MOST: Duration = Duration::from_millis(800);

/// Runs queued hooks one at a time until `finish` is cancelled (the election has ended: no
/// more events come); what is queued (and running) then still runs within
/// `exec.grace_period`, and after a `shutdown` signal never later than
/// [`PAST_GRACE_AT_MOST`] past the grace period from the signal (the shutdown's own
/// `stepped_down` comes only after the child stopped, which may take the whole grace
/// period). Then the rest are killed or dropped and counted.
pub(crate) async fn run_hooks(
    runner: HookRunner,
    shutdown: CancellationToken,
    finish: CancellationToken,
) {
    let (deadline_tx, deadline) = watch::channel(None::<Instant>);
    let grace = runner.grace;
    let ending = async move {
        let cap = tokio::select! {
            biased;
            _ = shutdown.cancelled() => Some(Instant::now() + grace + PAST_GRACE_AT_MOST),
            _ = finish.cancelled() => None,
        };
        deadline_tx.send_replace(cap);
        finish.cancelled().await;
        let end = Instant::now() + grace;
        deadline_tx.send_replace(Some(cap.map_or(end, |cap| cap.min(end))));
        deadline_tx
    };
    tokio::pin!(ending);
    let mut finished = None;
    loop {
        if let Some(event) = runner.sink.next() {
            if deadline.borrow().is_some_and(|d| Instant::now() >= d) {
                runner
                    .sink
                    .drop_event(&event, "shutting down, grace period over");
                continue;
            }
            let run = runner.run_one(&event, deadline.clone());
            tokio::pin!(run);
            loop {
                tokio::select! {
                    _ = &mut run => break,
                    tx = &mut ending, if finished.is_none() => finished = Some(tx),
                }
            }
            continue;
        }
        if finished.is_some() {
            break;
        }
        tokio::select! {
            _ = runner.sink.wake.notified() => {}
            tx = &mut ending => finished = Some(tx),
        }
    }
    runner.sink.close();
    while let Some(event) = runner.sink.next() {
        runner.sink.drop_event(&event, "shutting down");
    }
}

impl HookRunner {
    async fn run_one(&self, event: &HookEvent, deadline: watch::Receiver<Option<Instant>>) {
        let hook = event.hook.key();
        let cmd = self.sink.commands.of(event.hook);
        let timeout_at = Instant::now() + self.timeout;
        let mut env = self.base_env.clone();
        env.extend(event.env());
        let started = Instant::now();
        let kill = kill_time(timeout_at, deadline);
        let outcome = process::run(cmd, &env, timeout_at, kill).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let result = outcome.result();
        self.sink.metrics.outputs.hook_run(hook, result);
        log_outcome(hook, &outcome, elapsed_ms);
    }
}

/// Resolves at `timeout_at`, or at the shutdown deadline when that comes first.
async fn kill_time(timeout_at: Instant, mut deadline: watch::Receiver<Option<Instant>>) {
    loop {
        let at = deadline
            .borrow_and_update()
            .map_or(timeout_at, |d| d.min(timeout_at));
        tokio::select! {
            _ = tokio::time::sleep_until(at) => return,
            changed = deadline.changed() => if changed.is_err() {
                tokio::time::sleep_until(at).await;
                return;
            },
        }
    }
}

/// One `hook_finished` for every run; and `hook_failed` at WARN unless it exited 0.
fn log_outcome(hook: &str, outcome: &process::Outcome, elapsed_ms: u64) {
    use process::Outcome;
    let code = outcome.code();
    tracing::info!(
        event = "hook_finished",
        hook,
        code,
        elapsed_ms,
        "hook {hook} finished with code {code}"
    );
    let (reason, why) = match outcome {
        Outcome::Exited(0) => return,
        // As a shell reads `$?`: past 128, the hook was ended by signal `code - 128`.
        Outcome::Exited(c) if *c > 128 => ("signal", format!("signal {}", c - 128)),
        Outcome::Exited(_) => ("exit", format!("exit code {code}")),
        Outcome::TimedOut => ("timeout", "still running at its timeout (or the shutdown's grace period), killed with its process group".to_string()),
        Outcome::NotStarted(err, _) => ("start", format!("cannot start: {err}")),
    };
    let signal = (reason == "signal").then_some(code - 128);
    let error = match outcome {
        Outcome::NotStarted(err, _) => Some(err.as_str()),
        _ => None,
    };
    tracing::warn!(
        event = "hook_failed",
        hook,
        code,
        elapsed_ms,
        reason,
        signal,
        error,
        "hook {hook} failed: {why}"
    );
}

#[cfg(test)]
mod tests;
