//! CPU priority of the threads whose work can wait: what they publish must never hold up an
//! election running on the same host.

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
