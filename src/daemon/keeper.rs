//! The keeper: `leaderd __keeper`, leaderd re-executed to start and watch the exec-mode child
//! of one term, so that the child never outlives the term even while leaderd is paused,
//! starved, hung or dead; hooks and health checks run under one too, with their timeout as
//! the validity and SIGKILL as the stop signal (`crate::daemon::exec::run_once`), so that their
//! whole group dies with leaderd.
//!
//! The keeper talks to leaderd over its stdin, a Unix socket (see [`crate::daemon::exec`]):
//!
//! - leaderd sends `extend <ns>` (a new validity) and `stop`;
//! - the keeper sends `pid <pid>` once the child runs and `exit <code> <cause>` once it has
//!   been reaped (after `not_started <error>` when it could not start); then it exits.
//!
//! Validities are absolute `CLOCK_MONOTONIC` nanoseconds ([`monotonic_ns`]): leaderd and its
//! keeper share that clock, and an absolute deadline cannot be stretched by the time a
//! message waits in the socket. The keeper's own deadline is the validity minus the margin it
//! was given: when it passes without an extension, the child's process group gets SIGKILL.
//! `stop` sends the stop signal to the group and SIGKILL at `min(now + grace, deadline)`. End
//! of file on the socket (leaderd went away, even by SIGKILL) means SIGKILL at once. The
//! keeper has a process group of its own (a signal to leaderd's group does not reach it),
//! and the child dies with the keeper (`PR_SET_PDEATHSIG`).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;

mod wire;
pub(crate) use wire::{Cause, Report, Request};

/// Arguments of the hidden `leaderd __keeper` command; only exec mode starts it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct KeeperArgs {
    /// Sent to the child's process group on `stop`.
    #[arg(long, value_name = "SIGNAL")]
    pub stop_signal: String,
    /// Milliseconds between the stop signal and SIGKILL.
    #[arg(long, value_name = "MS")]
    pub grace_ms: u64,
    /// The group is SIGKILLed this many milliseconds before the validity.
    #[arg(long, value_name = "MS")]
    pub margin_ms: u64,
    /// The term's first validity, in `CLOCK_MONOTONIC` nanoseconds.
    #[arg(long, value_name = "NS")]
    pub valid_until_ns: u64,
    /// The child's program and arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds (the clock of `std::time::Instant` on Linux).
pub(crate) fn monotonic_ns() -> u64 {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64
}

/// The exit code of a status: its code, or 128 + the signal that ended it.
pub(crate) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// The exit code of a command that could not be started, as a shell gives it: 127 when the
/// program (or its interpreter) is not found, 126 when it cannot be executed, else 1.
pub(crate) fn start_failure_code(err: &std::io::Error) -> i32 {
    match err.kind() {
        std::io::ErrorKind::NotFound => 127,
        std::io::ErrorKind::PermissionDenied => 126,
        _ => 1,
    }
}

enum Event {
    Extend(u64),
    Stop,
    Gone,
    /// The child has exited; it is not reaped yet, so its group id is still its own.
    Exited,
}

/// Runs the keeper; returns its own exit code (0 once the child is reaped and reported).
pub(crate) fn main(args: KeeperArgs) -> i32 {
    // leaderd decides when the child stops: a service manager's signal to every process of
    // the service must not end the keeper first. Handlers (unlike an ignored disposition)
    // are reset for the child by exec.
    let ignored = Arc::new(AtomicBool::new(false));
    for sig in crate::daemon::shutdown::SHUTDOWN {
        let _ = signal_hook::flag::register(sig, ignored.clone());
    }
    let Some(stop_signal) = Signal::from_str(&args.stop_signal).ok() else {
        eprintln!("leaderd keeper: bad --stop-signal {}", args.stop_signal);
        return 2;
    };
    let link = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixStream::from(fd),
        Err(err) => {
            eprintln!("leaderd keeper: no link to leaderd on stdin: {err}");
            return 2;
        }
    };
    let mut out = match link.try_clone() {
        Ok(out) => out,
        Err(err) => {
            eprintln!("leaderd keeper: {err}");
            return 2;
        }
    };
    let margin = Duration::from_millis(args.margin_ms);
    let deadline = instant_of(args.valid_until_ns, margin);
    if Instant::now() >= deadline {
        send(&mut out, &Report::Ended(137, Cause::Expired));
        return 0;
    }
    let (tx, events) = mpsc::channel();
    let reader = tx.clone();
    std::thread::spawn(move || read_requests(link, reader));
    let keeper = nix::unistd::getpid();
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .stdin(Stdio::null())
        .process_group(0);
    // SAFETY: the hook makes only async-signal-safe system calls and allocates nothing.
    unsafe { command.pre_exec(move || die_with_parent(keeper)) };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            send(&mut out, &Report::NotStarted(err.to_string()));
            let code = start_failure_code(&err);
            send(&mut out, &Report::Ended(code, Cause::SpawnFailed));
            return 0;
        }
    };
    let group = Pid::from_raw(child.id() as i32);
    send(&mut out, &Report::Started(group.as_raw()));
    std::thread::spawn(move || {
        wait_exited(group);
        let _ = tx.send(Event::Exited);
    });
    // The watch's SIGKILL is what keeps the child inside the term when leaderd cannot.
    crate::daemon::priority::raise_this_thread();
    let watch = Watch {
        group,
        stop_signal,
        grace: Duration::from_millis(args.grace_ms),
        margin,
        deadline,
    };
    let cause = watch.run(&events);
    // The group was signalled while the child was unreaped; now reap it.
    let status = child
        .wait()
        .unwrap_or_else(|_| ExitStatus::from_raw(Signal::SIGKILL as i32));
    send(&mut out, &Report::Ended(exit_code(status), cause));
    0
}

/// In a child before exec: SIGKILL when its parent (the keeper) dies, however it dies, so
/// that the child never runs without it; an error if the parent is already gone. Linux
/// sends it when the parent's *thread* that spawned the child ends: the keeper spawns from
/// its main thread, which lives as long as it does.
pub(crate) fn die_with_parent(parent: Pid) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    if nix::unistd::getppid() != parent {
        return Err(nix::errno::Errno::ESRCH.into());
    }
    Ok(())
}

/// Blocks until `pid` has exited, leaving it unreaped (`waitid` with `WNOWAIT`).
fn wait_exited(pid: Pid) {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return,
        }
    }
}

/// The child's group and when it must be dead.
struct Watch {
    group: Pid,
    stop_signal: Signal,
    grace: Duration,
    margin: Duration,
    /// The validity minus the margin.
    deadline: Instant,
}

impl Watch {
    /// Follows leaderd's requests until the child has exited (not yet reaped).
    fn run(mut self, events: &mpsc::Receiver<Event>) -> Cause {
        let mut stop_at: Option<Instant> = None;
        let mut cause = Cause::Exited;
        let mut killed = false;
        loop {
            let due = stop_at.map_or(self.deadline, |at| at.min(self.deadline));
            let now = Instant::now();
            if !killed && now >= due {
                self.kill(Signal::SIGKILL);
                killed = true;
                if stop_at.is_none() {
                    cause = Cause::Expired;
                }
            }
            let event = if killed {
                events
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
            } else {
                events.recv_timeout(due - now)
            };
            match event {
                Ok(Event::Extend(ns)) if stop_at.is_none() && !killed => {
                    self.deadline = instant_of(ns, self.margin);
                }
                Ok(Event::Stop) if stop_at.is_none() && !killed => {
                    self.kill(self.stop_signal);
                    stop_at = Some(Instant::now() + self.grace);
                    cause = Cause::Stopped;
                }
                Ok(Event::Gone) if !killed => {
                    self.kill(Signal::SIGKILL);
                    killed = true;
                    cause = Cause::Orphaned;
                }
                Ok(Event::Exited) => {
                    // Whatever it left behind in its group goes with it.
                    self.kill(Signal::SIGKILL);
                    return cause;
                }
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.kill(Signal::SIGKILL);
                    return cause;
                }
            }
        }
    }

    fn kill(&self, signal: Signal) {
        let _ = killpg(self.group, signal);
    }
}

/// The instant `margin` before the monotonic `ns`; now if that has passed. The `Instant` is
/// read before the clock: a pause between the two reads makes the deadline earlier, never later.
fn instant_of(ns: u64, margin: Duration) -> Instant {
    let base = Instant::now();
    let left = Duration::from_nanos(ns.saturating_sub(monotonic_ns()));
    base + left.saturating_sub(margin)
}

fn read_requests(link: UnixStream, events: mpsc::Sender<Event>) {
    for line in BufReader::new(link).lines() {
        let Ok(line) = line else { break };
        let event = match Request::parse(&line) {
            Some(Request::Extend(ns)) => Some(Event::Extend(ns)),
            Some(Request::Stop) => Some(Event::Stop),
            None => None,
        };
        if let Some(event) = event {
            if events.send(event).is_err() {
                return;
            }
        }
    }
    let _ = events.send(Event::Gone);
}

fn send(out: &mut UnixStream, report: &Report) {
    let _ = out.write_all(format!("{report}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_subtract_the_margin() {
        let at = instant_of(monotonic_ns() + 1_000_000_000, Duration::from_millis(300));
        let left = at.saturating_duration_since(Instant::now());
        assert!(left <= Duration::from_millis(700), "{left:?}");
        assert!(left >= Duration::from_millis(600), "{left:?}");
        let past = instant_of(monotonic_ns(), Duration::from_millis(300));
        assert!(past <= Instant::now());
    }
}
