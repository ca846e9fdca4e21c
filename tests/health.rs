//! Health-gated leadership with real processes: an unhealthy replica never leads, a leader
//! that turns unhealthy hands over to a healthy one, and a check that hangs fails after its
//! timeout, for both kinds of check (command and http_get).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use support::election::all;
use support::safety::field;
use support::{
    check_logs, is_leader, keys, wait_leader, wait_until, Daemon, DaemonOpts, RedisServer, POLL,
    SLOW,
};

/// `election.health_check` with a 300ms period, a 200ms timeout and 2 failures.
fn check_yaml(kind: &str) -> String {
    format!(
        "election:\n  health_check:\n    {kind}\n    period: 300ms\n    timeout: 200ms\n    failures: 2\n"
    )
}

fn command_check(argv: &[&str]) -> String {
    check_yaml(&format!(
        "command: {}",
        serde_json::to_string(argv).unwrap()
    ))
}

fn daemon(name: &str, identity: &str, redis: &RedisServer, yaml: &str) -> Daemon {
    let mut o = DaemonOpts::new(name, identity, &redis.url());
    o.extra_yaml = yaml.to_string();
    Daemon::spawn(&o)
}

fn healthy(d: &Daemon) -> Option<bool> {
    d.status_doc().and_then(|doc| doc["healthy"].as_bool())
}

fn healthy_metric(d: &Daemon) -> Option<f64> {
    let (_, text) = d.get("/metrics");
    text.lines()
        .find(|l| l.starts_with("leaderd_healthy{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn reasons(d: &Daemon) -> Vec<String> {
    d.events_named("stepped_down")
        .iter()
        .filter_map(|e| field(e, "reason").and_then(Value::as_str).map(String::from))
        .collect()
}

/// Watches for `total`, failing if any of `ds` claims leadership meanwhile.
fn never_leads(ds: &[&Daemon], total: Duration) {
    let checks = total.as_millis() / 100;
    for _ in 0..checks {
        for d in ds {
            assert!(!is_leader(d), "{} leads while unhealthy", d.identity());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_unhealthy_replica_never_leads() {
    let redis = RedisServer::start();
    let failing = daemon("sick", "failing", &redis, &command_check(&["false"]));
    let hanging = daemon(
        "sick",
        "hanging",
        &redis,
        &command_check(&["sleep", "1000"]),
    );
    // Past the first start's quarantine: nobody leads, though nobody else contends.
    never_leads(&[&failing, &hanging], Duration::from_secs(3));
    for d in [&failing, &hanging] {
        assert_eq!(healthy(d), Some(false), "{}", d.identity());
        assert_eq!(healthy_metric(d), Some(0.0), "{}", d.identity());
        assert!(d.events_named("acquired").is_empty());
    }
    // Hung checks are killed at their timeout: no pile of `sleep 1000`.
    let sleeps = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1));
            stat.contains("(sleep)") && ppid == Some(hanging.pid().to_string().as_str())
        })
        .count();
    assert!(sleeps <= 1, "{sleeps} hung checks still running");

    let mut well = daemon("sick", "well", &redis, &command_check(&["true"]));
    wait_until(SLOW, POLL, || is_leader(&well).then_some(())).expect("the healthy one leads");
    assert_eq!(healthy(&well), Some(true));
    assert_eq!(healthy_metric(&well), Some(1.0));
    well.kill();
    // Its lease expires; the unhealthy ones still do not take it.
    never_leads(&[&failing, &hanging], Duration::from_secs(3));
    assert_eq!(redis.cmd(&["EXISTS", &keys("sick").lock]), "0");
}

#[test]
fn a_leader_turning_unhealthy_hands_over_to_a_healthy_one() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let flag = |id: &str| dir.path().join(format!("healthy-{id}"));
    let ds: Vec<Daemon> = ["a", "b"]
        .iter()
        .map(|id| {
            std::fs::write(flag(id), "").unwrap();
            let path = flag(id).display().to_string();
            daemon(
                "handover",
                id,
                &redis,
                &command_check(&["test", "-e", &path]),
            )
        })
        .collect();
    let l = wait_leader(&ds, &all(&ds), SLOW);
    let other = 1 - l;
    std::fs::remove_file(flag(ds[l].identity())).unwrap();
    wait_until(SLOW, POLL, || is_leader(&ds[other]).then_some(()))
        .expect("the healthy replica did not take over");
    assert_eq!(reasons(&ds[l]), ["yield"]);
    assert_eq!(healthy(&ds[l]), Some(false));
    never_leads(&[&ds[l]], Duration::from_secs(3));
    assert!(is_leader(&ds[other]));
    check_logs(&[ds[0].safety_log(), ds[1].safety_log()]).unwrap();

    // Healthy again after one passing check: it contends again (and leads once the other
    // one yields in turn).
    std::fs::write(flag(ds[l].identity()), "").unwrap();
    wait_until(SLOW, POLL, || (healthy(&ds[l]) == Some(true)).then_some(())).unwrap();
    std::fs::remove_file(flag(ds[other].identity())).unwrap();
    wait_until(SLOW, POLL, || is_leader(&ds[l]).then_some(())).expect("no hand-back");
    check_logs(&[ds[0].safety_log(), ds[1].safety_log()]).unwrap();
}

/// A tiny HTTP server answering by mode: 0 = 200, 1 = 503, 2 = never (hangs).
struct Probe {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
}

impl Probe {
    fn start(mode: u8) -> Probe {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let probe = Probe {
            addr: listener.local_addr().unwrap(),
            mode: Arc::new(AtomicU8::new(mode)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (mode, stop) = (probe.mode.clone(), probe.stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (mode, stop) = (mode.clone(), stop.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_nonblocking(false);
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
                    let mut buf = [0u8; 1024];
                    let _ = conn.read(&mut buf);
                    let answer = match mode.load(Ordering::SeqCst) {
                        0 => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        1 => "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
                        _ => {
                            for _ in 0..100 {
                                if stop.load(Ordering::SeqCst) {
                                    break;
                                }
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            return;
                        }
                    };
                    let _ = conn.write_all(answer.as_bytes());
                });
            }
        });
        probe
    }

    fn url(&self) -> String {
        format!("http://{}/health", self.addr)
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn http_check(probe: &Probe) -> String {
    check_yaml(&format!(
        "http_get: {}",
        serde_json::to_string(&probe.url()).unwrap()
    ))
}

#[test]
fn an_http_check_that_hangs_fails_after_its_timeout_and_the_leader_yields() {
    let redis = RedisServer::start();
    let (pa, pb) = (Probe::start(0), Probe::start(1));
    let a = daemon("hang", "a", &redis, &http_check(&pa));
    let b = daemon("hang", "b", &redis, &http_check(&pb));
    // b answers 503: only a may lead.
    wait_until(SLOW, POLL, || is_leader(&a).then_some(())).expect("a leads");
    assert_eq!(healthy(&b), Some(false));
    assert!(b.events_named("acquired").is_empty());
    pb.set(0);
    wait_until(SLOW, POLL, || (healthy(&b) == Some(true)).then_some(())).unwrap();
    assert!(is_leader(&a));

    // a's service hangs: after 2 timed-out checks a yields and b takes over.
    pa.set(2);
    wait_until(SLOW, POLL, || is_leader(&b).then_some(())).expect("b takes over");
    assert_eq!(reasons(&a), ["yield"]);
    assert_eq!(healthy(&a), Some(false));
    assert_eq!(healthy_metric(&a), Some(0.0));
    check_logs(&[a.safety_log(), b.safety_log()]).unwrap();
    let changed = a.events_named("health_changed");
    let last = changed.last().expect("a logged no health change");
    let error = field(last, "error").and_then(Value::as_str).unwrap_or("");
    assert!(error.contains("no answer within"), "{last}");
}
