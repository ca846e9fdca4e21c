//! SIGHUP (a terminal that closes) and SIGQUIT (`kill -QUIT`, Ctrl-\) end leaderd as SIGTERM
//! does: stepped_down, release, a follower takes over at once, `state: stopped`, exit 0; a
//! burst of them during the shutdown changes nothing. Real processes, real signals, a real
//! redis-server.

mod daemon_common;
mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use daemon_common::*;
use support::safety::event_name;

/// SIGTERM's bound: `grace_period` (3 s by default) + 1 s.
const EXIT_WAIT: Duration = Duration::from_secs(4);

/// The leader of a fresh 2-replica cluster gets `sig` 200 times in a row.
fn leader_gets_a_burst_of(sig: Signal) {
    let name = format!("burst-{}", sig.as_str().to_lowercase());
    let mut c = Cluster::start(&name, 2, false, "");
    let l = c.wait_agreed_leader(&c.all(), SLOW);
    let fence1 = c.daemons[l].status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();

    let sent = now_ms();
    let signalled = Instant::now();
    for _ in 0..200 {
        c.daemons[l].signal(sig);
    }
    assert_eq!(c.daemons[l].wait_exit(EXIT_WAIT), Some(0), "{sig}: exit 0");
    assert!(signalled.elapsed() < EXIT_WAIT, "{:?}", signalled.elapsed());
    let file = c.daemons[l].file_doc().expect("leader file after shutdown");
    assert_eq!(file["state"], "stopped", "{sig}: {file}");
    assert_eq!(file["is_leader"], false, "{sig}: {file}");

    // Released: the follower takes over in milliseconds, not at the lease's expiry (2 s).
    let n = c.wait_agreed_leader(&c.others(l), SLOW);
    let doc = c.daemons[n].status_doc().unwrap();
    assert!(doc["fence"].as_u64().unwrap() > fence1);
    let handover = doc["acquired_at_ms"].as_u64().unwrap().saturating_sub(sent);
    println!("{sig} -> new leader's acquired_at: {handover}ms");
    assert!(handover < 1000, "{sig}: the takeover took {handover}ms");

    // One shutdown: stepped_down (reason shutdown), then released, then exited.
    let events = c.daemons[l].log_events();
    let log = c.daemons[l].log();
    let all = |name: &str| -> Vec<usize> {
        (0..events.len())
            .filter(|&i| event_name(&events[i]) == Some(name))
            .collect()
    };
    let (down, released, exited) = (all("stepped_down"), all("released"), all("exited"));
    assert_eq!(down.len(), 1, "{sig}: {log}");
    assert_eq!(released.len(), 1, "{sig}: {log}");
    assert_eq!(exited.len(), 1, "{sig}: {log}");
    assert_eq!(events[down[0]]["reason"], "shutdown", "{sig}: {log}");
    assert!(
        down[0] < released[0] && released[0] < exited[0],
        "{sig}: {log}"
    );
    assert_eq!(all("shutdown_requested").len(), 1, "{sig}: {log}");

    c.check_safety();
}

#[test]
fn a_burst_of_sighup_is_one_clean_shutdown() {
    leader_gets_a_burst_of(Signal::SIGHUP);
}

#[test]
fn a_burst_of_sigquit_is_one_clean_shutdown() {
    leader_gets_a_burst_of(Signal::SIGQUIT);
}
