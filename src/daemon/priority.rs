//! CPU priority: the threads whose work can wait (what they publish must never hold up an
//! election running on the same host), and the one that cannot (the keeper's kill).

/// Moves the calling thread to Linux's `SCHED_IDLE` policy: it runs only on CPU time nothing
/// else wants. On a host with hundreds of replicas, their leader-file writes at a handover
/// then wait for Redis and the successor instead of the other way round. Best effort: where
/// it is refused, the thread keeps the process's policy.
pub(crate) fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        let param = nix::libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid, initialised `sched_param` that outlives the call, and
        // pid 0 names the calling thread; the call changes nothing else.
        #[allow(unsafe_code)]
        let _ = unsafe { nix::libc::sched_setscheduler(0, nix::libc::SCHED_IDLE, &param) };
    }
}

/// Moves the calling thread to Linux's `SCHED_FIFO` policy at the lowest real-time priority,
/// with `SCHED_RESET_ON_FORK` (a process it starts gets the normal policy back): it runs as
/// soon as it wakes, ahead of every ordinary thread. The keeper's watch runs so, so that a
/// host starved of CPU does not make its SIGKILL late. Best effort: without the privilege
/// (`CAP_SYS_NICE` or an `RLIMIT_RTPRIO`) the thread keeps its policy.
pub(crate) fn raise_this_thread() {
    #[cfg(target_os = "linux")]
    {
        let param = nix::libc::sched_param { sched_priority: 1 };
        let policy = nix::libc::SCHED_FIFO | nix::libc::SCHED_RESET_ON_FORK;
        // SAFETY: `param` is a valid, initialised `sched_param` that outlives the call, and
        // pid 0 names the calling thread; the call changes nothing else.
        #[allow(unsafe_code)]
        let _ = unsafe { nix::libc::sched_setscheduler(0, policy, &param) };
    }
}
