//! The leader-aware proxy with the real daemon, real redis-server and a small TCP service per
//! replica that greets with its replica's name and echoes: every proxy reaches the leader
//! through a SIGTERM, a crash and a Redis restart; `on_change: close`; waiting while nobody
//! leads; half-closes; the connection limit; `on_change: keep`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::election::claiming;
use support::safety::{event_name, field, field_u64};
use support::{free_port, now_ms, wait_leader, wait_until, Daemon, DaemonOpts, RedisServer};

const STEP: Duration = Duration::from_millis(20);
/// How long a test waits for a leader.
const LEADER_WAIT: Duration = Duration::from_secs(15);

/// A service that writes `<name>\n`, echoes what it reads, and on end of input writes
/// `bye\n` and closes.
struct Service {
    port: u16,
    open: Arc<AtomicUsize>,
}

impl Service {
    fn start(name: &str) -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicUsize::new(0));
        let (name, count) = (name.to_string(), open.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let (name, count) = (name.clone(), count.clone());
                std::thread::spawn(move || {
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = conn.write_all(format!("{name}\n").as_bytes());
                    let mut buf = [0u8; 4096];
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) => {
                                let _ = conn.write_all(b"bye\n");
                                break;
                            }
                            Ok(n) => {
                                if conn.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                    let _ = conn.shutdown(Shutdown::Both);
                    count.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Service { port, open }
    }
}

struct Replica {
    daemon: Daemon,
    proxy_port: u16,
    service: Service,
}

fn replica(election: &str, id: &str, redis: &RedisServer, extra: &str) -> Replica {
    let service = Service::start(id);
    let proxy_port = free_port();
    let mut o = DaemonOpts::new(election, id, &redis.url());
    o.extra_yaml = format!(
        "publish:\n  advertise: \"127.0.0.1:{}\"\nproxy:\n  listen: \"127.0.0.1:{proxy_port}\"\n  upstream: \"127.0.0.1:{}\"\n{extra}",
        service.port, service.port
    );
    Replica {
        daemon: Daemon::spawn(&o),
        proxy_port,
        service,
    }
}

/// Connects to the proxy and reads the greeting: the name of the replica it reached; None
/// when the proxy closed the connection without one.
fn ask(port: u16) -> Option<String> {
    let conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line).ok()?;
    line.strip_suffix('\n').map(str::to_string)
}

/// The first replica among `among` that claims leadership.
fn leader_of(rs: &[Replica], among: &[usize]) -> Option<usize> {
    claiming(rs, among).first().copied()
}

impl std::borrow::Borrow<Daemon> for Replica {
    fn borrow(&self) -> &Daemon {
        &self.daemon
    }
}

/// Waits until every replica in `among` forwards new connections to `leader`.
fn all_reach(rs: &[Replica], among: &[usize], leader: &str) {
    for &i in among {
        let got = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
            (ask(rs[i].proxy_port).as_deref() == Some(leader)).then_some(())
        });
        assert!(
            got.is_some(),
            "{}'s proxy never reached {leader}",
            rs[i].daemon.identity()
        );
    }
}

/// The last `lease_valid_until_ms` `d` logged: when its claim ended at the latest.
fn last_validity(d: &Daemon) -> u64 {
    d.log_events()
        .iter()
        .filter(|e| matches!(event_name(e), Some("acquired" | "renewed")))
        .filter_map(|e| field_u64(e, "lease_valid_until_ms"))
        .max()
        .unwrap_or(0)
}

/// Asks every proxy in `among` until all answer `next`; every answer naming `old` must have
/// been asked for before `old`'s claim could have ended.
fn move_to(
    rs: &[Replica],
    among: &[usize],
    old: usize,
    next_of: impl Fn() -> Option<usize>,
) -> usize {
    let old_name = rs[old].daemon.identity().to_string();
    let mut old_answers = Vec::new();
    let next = wait_until(Duration::from_secs(20), Duration::from_millis(30), || {
        let next = next_of()?;
        let want = rs[next].daemon.identity().to_string();
        let mut all = true;
        for &i in among {
            let asked = now_ms();
            let got = ask(rs[i].proxy_port);
            if got.as_deref() == Some(old_name.as_str()) && next != old {
                old_answers.push(asked);
            }
            all &= got.as_deref() == Some(want.as_str());
        }
        all.then_some(next)
    })
    .expect("new connections reach the new leader");
    let claim_end = last_validity(&rs[old].daemon);
    for asked in old_answers {
        assert!(
            asked < claim_end,
            "forwarded to {old_name} at {asked}, its claim ended by {claim_end}"
        );
    }
    next
}

#[test]
fn every_proxy_reaches_the_leader_through_sigterm_crash_and_redis_restart() {
    let mut redis = RedisServer::start();
    let mut rs: Vec<Replica> = ["a", "b", "c"]
        .iter()
        .map(|id| replica("proxy-moves", id, &redis, ""))
        .collect();
    let all = [0, 1, 2];
    let l = wait_leader(&rs, &all, LEADER_WAIT);
    let name = rs[l].daemon.identity().to_string();
    all_reach(&rs, &all, &name);
    let advertise = format!("127.0.0.1:{}", rs[l].service.port);
    for r in &rs {
        let doc = r.daemon.status_doc().unwrap();
        assert_eq!(
            doc["leader_address"],
            Value::String(advertise.clone()),
            "{doc}"
        );
    }

    // SIGTERM of the leader.
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != l).collect();
    rs[l].daemon.signal(Signal::SIGTERM);
    assert_eq!(rs[l].daemon.wait_exit(Duration::from_secs(5)), Some(0));
    let l2 = move_to(&rs, &others, l, || leader_of(&rs, &others));
    rs[l].daemon.restart();

    // A crash of the leader (its service stays up).
    rs[l2].daemon.kill();
    let rest: Vec<usize> = all.iter().copied().filter(|&i| i != l2).collect();
    let l3 = move_to(&rs, &rest, l2, || leader_of(&rs, &rest));
    rs[l2].daemon.restart();

    // Redis restarts empty: a quarantine, then a new term.
    redis.restart_empty();
    let l4 = move_to(&rs, &all, l3, || leader_of(&rs, &all));
    let _ = l4;
}

#[test]
fn with_on_change_close_connections_to_a_deposed_leader_close_before_its_release() {
    let redis = RedisServer::start();
    let rs: Vec<Replica> = ["a", "b"]
        .iter()
        .map(|id| replica("proxy-close", id, &redis, ""))
        .collect();
    let l = wait_leader(&rs, &[0, 1], LEADER_WAIT);
    let f = 1 - l;
    let name = rs[l].daemon.identity().to_string();
    all_reach(&rs, &[0, 1], &name);
    let open = |port: u16| {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut greeting = [0u8; 2];
        c.read_exact(&mut greeting).unwrap();
        c
    };
    let mut local = open(rs[l].proxy_port);
    let mut remote = open(rs[f].proxy_port);
    rs[l].daemon.signal(Signal::SIGUSR1);
    for (what, conn) in [("local", &mut local), ("remote", &mut remote)] {
        let started = Instant::now();
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{what} connection stayed open: {}",
            rs[l].daemon.log()
        );
        assert!(rest.is_empty() || rest == b"bye\n", "{what}: {rest:?}");
    }
    // On the old leader the local connection closed before the release was sent (its line
    // follows once the release is announced: a few ms).
    let events = wait_until(Duration::from_secs(5), STEP, || {
        let events = rs[l].daemon.log_events();
        events
            .iter()
            .any(|e| event_name(e) == Some("released"))
            .then_some(events)
    })
    .expect("the old leader logs its release");
    // Every local connection closed before the release (the local one we held among them;
    // its close may be logged before `yield_requested`: a signal acts first, logs after).
    let names: Vec<_> = events.iter().filter_map(|e| event_name(e)).collect();
    let released = events
        .iter()
        .position(|e| event_name(e) == Some("released"))
        .unwrap();
    let local_close = |e: &Value| {
        event_name(e) == Some("proxy_connection_closed")
            && field(e, "target").and_then(Value::as_str) == Some("local")
    };
    let closes: Vec<usize> = (0..events.len())
        .filter(|&i| local_close(&events[i]))
        .collect();
    assert!(!closes.is_empty(), "no local close: {names:?}");
    assert!(
        closes.iter().all(|&i| i < released),
        "a local connection closed after the release: {names:?}"
    );
    wait_until(Duration::from_secs(5), STEP, || {
        (rs[l].service.open.load(Ordering::SeqCst) == 0).then_some(())
    })
    .expect("the old leader's service saw its connections close");
}

#[test]
fn with_on_change_keep_connections_to_a_deposed_leader_stay_open() {
    let redis = RedisServer::start();
    let rs: Vec<Replica> = ["a", "b"]
        .iter()
        .map(|id| replica("proxy-keep", id, &redis, "  on_change: keep\n"))
        .collect();
    let l = wait_leader(&rs, &[0, 1], LEADER_WAIT);
    let f = 1 - l;
    let (old, new) = (
        rs[l].daemon.identity().to_string(),
        rs[f].daemon.identity().to_string(),
    );
    all_reach(&rs, &[0, 1], &old);
    let open = |port: u16| {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut greeting = [0u8; 2];
        c.read_exact(&mut greeting).unwrap();
        assert_eq!(greeting, format!("{old}\n").as_bytes());
        c
    };
    let mut local = open(rs[l].proxy_port);
    let mut remote = open(rs[f].proxy_port);
    rs[l].daemon.signal(Signal::SIGUSR1);
    wait_until(Duration::from_secs(10), STEP, || leader_of(&rs, &[f]))
        .expect("the follower leads after the yield");
    all_reach(&rs, &[0, 1], &new);
    assert!(
        rs[l].daemon.events_named("released").len() == 1,
        "the old leader released"
    );
    // Both connections still talk to the deposed leader's service, both ways, half-close too.
    for (what, conn) in [("local", &mut local), ("remote", &mut remote)] {
        conn.write_all(b"ping\n")
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        conn.shutdown(Shutdown::Write).unwrap();
        let mut rest = String::new();
        conn.read_to_string(&mut rest)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(rest, "ping\nbye\n", "{what} connection was kept");
    }
}

#[test]
fn while_nobody_leads_connections_wait_up_to_connect_timeout() {
    let redis = RedisServer::start();
    // A fresh Redis: the lease is quarantined for one lease duration (2 s) first.
    let r = replica("proxy-wait", "a", &redis, "  connect_timeout: 500ms\n");
    wait_until(Duration::from_secs(5), STEP, || r.daemon.status_doc()).unwrap();
    let started = Instant::now();
    assert_eq!(ask(r.proxy_port), None);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    let doc = r.daemon.status_doc().unwrap();
    assert_eq!(doc["leader_address"], Value::Null);
    let refused = r.daemon.get("/metrics").1;
    assert!(!refused.contains("target=\"refused\"} 0"), "{refused}");

    // A connection that arrives shortly before a leader is forwarded once it leads.
    let redis2 = RedisServer::start();
    let r2 = replica("proxy-wait-2", "b", &redis2, "  connect_timeout: 5s\n");
    wait_until(Duration::from_secs(5), STEP, || r2.daemon.status_doc()).unwrap();
    assert_eq!(ask(r2.proxy_port).as_deref(), Some("b"));
    // The `acquired` line may be written just after the term is published (and forwarded to).
    let acquired = wait_until(Duration::from_secs(5), STEP, || {
        let seen = r2.daemon.events_named("acquired");
        (!seen.is_empty()).then_some(seen)
    })
    .expect("b logged its term");
    assert_eq!(acquired.len(), 1);
}

#[test]
fn half_closes_pass_through_and_the_connection_limit_refuses_and_counts() {
    let redis = RedisServer::start();
    let r = replica("proxy-half", "a", &redis, "  max_connections: 2\n");
    wait_until(Duration::from_secs(10), STEP, || {
        r.daemon
            .status_doc()
            .filter(|d| d["is_leader"] == Value::Bool(true))
    })
    .expect("leads");
    let mut c = TcpStream::connect(("127.0.0.1", r.proxy_port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"ping\n").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut all = String::new();
    c.read_to_string(&mut all).unwrap();
    assert_eq!(all, "a\nping\nbye\n");
    // The client reads the end before the proxy has let go of the connection's slot: wait
    // until it has (bounded), so that the two below are the only ones open.
    let active = "leaderd_proxy_active_connections{name=\"proxy-half\"} 0";
    wait_until(Duration::from_secs(5), STEP, || {
        r.daemon.get("/metrics").1.contains(active).then_some(())
    })
    .expect("the half-closed connection's slot is let go");

    let hold: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", r.proxy_port)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut g = [0u8; 2];
            c.read_exact(&mut g).unwrap();
            c
        })
        .collect();
    let started = Instant::now();
    assert_eq!(
        ask(r.proxy_port),
        None,
        "a third connection past max_connections: 2"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    let metrics = r.daemon.get("/metrics").1;
    assert!(
        metrics
            .contains("leaderd_proxy_connections_total{name=\"proxy-half\",target=\"refused\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("leaderd_proxy_connections_total{name=\"proxy-half\",target=\"local\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("leaderd_proxy_active_connections{name=\"proxy-half\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("leaderd_proxy_bytes_total{direction=\"in\",name=\"proxy-half\"} 5"),
        "{metrics}"
    );
    drop(hold);
}

/// 16 MiB each way through the proxy arrive unchanged and in order (the kernel moves them,
/// chunk by chunk), and the byte counters count every one.
#[test]
fn a_bulk_transfer_passes_unchanged_both_ways_and_is_counted() {
    const LEN: usize = 16 << 20;
    let redis = RedisServer::start();
    let r = replica("proxy-bulk", "a", &redis, "");
    wait_leader(std::slice::from_ref(&r), &[0], LEADER_WAIT);
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut c = TcpStream::connect(("127.0.0.1", r.proxy_port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut writer = c.try_clone().unwrap();
    let sent = data.clone();
    let send = std::thread::spawn(move || {
        writer.write_all(&sent).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut got = Vec::with_capacity(LEN + 8);
    c.read_to_end(&mut got).unwrap();
    send.join().unwrap();
    assert_eq!(got.len(), 2 + LEN + 4, "greeting, echo, bye");
    assert_eq!(&got[..2], b"a\n");
    assert!(
        got[2..2 + LEN] == data[..],
        "the echo differs from what was sent"
    );
    assert_eq!(&got[2 + LEN..], b"bye\n");
    let metrics = r.daemon.get("/metrics").1;
    for (direction, n) in [("in", LEN), ("out", 2 + LEN + 4)] {
        let line = format!(
            "leaderd_proxy_bytes_total{{direction=\"{direction}\",name=\"proxy-bulk\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}
