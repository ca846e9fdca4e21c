//! SIGHUP (a terminal that closes) and SIGQUIT (`kill -QUIT`, Ctrl-\) end leaderd as SIGTERM
//! does: stepped_down, release, a follower takes over at once, `state: stopped`, exit 0; a
//! burst of them during the shutdown changes nothing. Real processes, real signals, a real
//! redis-server.

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use support::replicas::*;
use support::safety::{event_name, field};
use support::{now_ms, POLL, SLOW};

/// SIGTERM's bound: `grace_period` (3 s by default) + 1 s.
const EXIT_WAIT: Duration = Duration::from_secs(4);

/// The leader of a fresh 2-replica cluster gets `sig` 200 times in a row.
fn leader_gets_a_burst_of(sig: Signal) {
    let name = format!("burst-{}", sig.as_str().to_lowercase());
    let mut c = Replicas::start(&name, 2, false, "");
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

/// A terminal that closes: leaderd runs in a pseudo-terminal (`script`, leaderd the session
/// leader, as a login shell's `exec leaderd run` makes it), and the terminal goes away (its
/// master side closed by a SIGKILL of `script`): the kernel hangs the terminal up and sends
/// SIGHUP. The leader releases, a follower takes over in milliseconds, the file ends `stopped`.
#[test]
fn a_closing_terminal_is_a_clean_shutdown() {
    use std::process::{Command, Stdio};
    use support::daemon::{parse_json_lines, render_config};
    use support::{free_port, leaderd_bin, wait_until, Daemon, DaemonOpts, RedisServer};

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (config, leader_file, log) = (
        dir.path().join("config.yaml"),
        dir.path().join("leader.json"),
        dir.path().join("log"),
    );
    let opts = DaemonOpts::new("terminal", "tty-a", &redis.url());
    std::fs::write(&config, render_config(&opts, free_port(), &leader_file)).unwrap();
    let inner = format!(
        "exec {} run --config {} 2>{}",
        leaderd_bin().display(),
        config.display(),
        log.display()
    );
    let mut terminal = Command::new("script")
        .args(["-qfc", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1)");
    let file = || -> Option<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(&leader_file).ok()?).ok()
    };
    wait_until(SLOW, POLL, || (file()?["is_leader"] == true).then_some(()))
        .expect("leaderd leads in its terminal");
    let children = format!("/proc/{0}/task/{0}/children", terminal.id());
    let pid: i32 = std::fs::read_to_string(children)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let follower = Daemon::spawn(&DaemonOpts::new("terminal", "tty-b", &redis.url()));
    wait_until(SLOW, POLL, || {
        (follower.status_doc()?["leader"] == "tty-a").then_some(())
    })
    .expect("the follower sees the leader");

    let closed = now_ms();
    terminal.kill().unwrap(); // the terminal goes away
    let _ = terminal.wait();
    let gone = wait_until(EXIT_WAIT, POLL, || {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    if gone.is_none() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(gone.is_some(), "leaderd outlived its terminal: {text}");
    let doc = file().expect("leader file");
    assert_eq!(doc["state"], "stopped", "{doc}");
    let events = parse_json_lines(&text);
    let position = |name: &str| {
        events
            .iter()
            .position(|e| event_name(e) == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let down = position("stepped_down");
    assert_eq!(
        field(&events[down], "reason").unwrap(),
        "shutdown",
        "{text}"
    );
    assert!(down < position("released") && position("released") < position("exited"));
    let exited = &events[position("exited")];
    assert_eq!(field(exited, "code").unwrap(), 0, "{text}");

    let doc = wait_until(SLOW, POLL, || {
        follower.status_doc().filter(|d| d["is_leader"] == true)
    })
    .expect("the follower takes over");
    let handover = doc["acquired_at_ms"]
        .as_u64()
        .unwrap()
        .saturating_sub(closed);
    println!("terminal closed -> new leader's acquired_at: {handover}ms");
    assert!(handover < 1000, "the takeover took {handover}ms");
}

/// A stop signal that arrives while `run` is still reading its configuration (here a FIFO
/// that nobody has written yet) is kept, not left to the signal's default action: once
/// started, leaderd shuts down cleanly (exit 0, `state: stopped`) and never leads.
#[test]
fn a_signal_while_starting_is_a_clean_shutdown() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::process::{Command, Stdio};
    use support::daemon::render_config;
    use support::{free_port, leaderd_bin, wait_until, DaemonOpts, RedisServer};

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (config, leader_file) = (
        dir.path().join("config.yaml"),
        dir.path().join("leader.json"),
    );
    nix::unistd::mkfifo(&config, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let mut leaderd = Command::new(leaderd_bin())
        .args(["run", "--config", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("leaderd");
    // Blocked on the FIFO with its SIGTERM handler in place (SigCgt bit 15), or, without
    // one, given the same time to get there.
    let status = format!("/proc/{}/status", leaderd.id());
    let catches_term = || {
        let text = std::fs::read_to_string(&status).ok()?;
        let mask = text.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
        let mask = u64::from_str_radix(mask.trim(), 16).ok()?;
        (mask & (1 << (15 - 1)) != 0).then_some(())
    };
    let _ = wait_until(Duration::from_secs(2), POLL, catches_term);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(leaderd.id() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let opts = DaemonOpts::new("starting", "start-a", &redis.url());
    let yaml = render_config(&opts, free_port(), &leader_file);
    // Non-blocking: with no reader left (leaderd died of the signal) the open fails.
    if let Ok(mut fifo) = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&config)
    {
        let _ = fifo.write_all(yaml.as_bytes());
    }
    let exited = wait_until(EXIT_WAIT, POLL, || leaderd.try_wait().ok().flatten());
    if exited.is_none() {
        let _ = leaderd.kill();
    }
    let output = leaderd.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{:?}: {log}", output.status);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&leader_file).unwrap_or_default())
            .unwrap_or_else(|e| panic!("no leader file ({e}): {log}"));
    assert_eq!(doc["state"], "stopped", "{doc}");
    assert!(
        !log.contains("\"acquired\""),
        "a replica told to stop never leads: {log}"
    );
}
