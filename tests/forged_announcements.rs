//! Announcements that lie (README, "Announcements"): a Redis user that may only PUBLISH on the
//! election's channels sends forged `acquired` messages, oversized ones and floods, against
//! real redis-server and leaderd processes. A message only wakes a replica: what it shows,
//! routes, runs and concludes is read from the lease.
//!
//! Timings are the defaults (15 s / 10 s / 2 s, heartbeat every lease / 3) scaled by 1/5.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::safety::field_u64;
use support::{free_port, keys, seed_fence, wait_until, Daemon, DaemonOpts, RedisServer};

const BOUND: Duration = Duration::from_secs(20);
const STEP: Duration = Duration::from_millis(20);
const PUB_PASSWORD: &str = "pub-pw";
const MAX_FENCE: u64 = u64::MAX;

/// A TCP service that greets with `name` and counts the connections it accepted.
struct Service {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Service {
    fn start(name: &str) -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (name, count) = (name.to_string(), accepted.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                count.fetch_add(1, Ordering::SeqCst);
                let _ = conn.write_all(format!("{name}\n").as_bytes());
            }
        });
        Service { port, accepted }
    }
}

struct Replica {
    daemon: Daemon,
    proxy_port: u16,
    _service: Service,
}

/// A connection of a publish-only user: it may PUBLISH on the election's channels and
/// nothing else.
struct Publisher {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Publisher {
    fn new(redis: &RedisServer) -> Publisher {
        let acl = [
            "ACL",
            "SETUSER",
            "pub",
            "on",
            &format!(">{PUB_PASSWORD}"),
            "resetkeys",
            "resetchannels",
            "&leaderd:*",
            "-@all",
            "+publish",
        ];
        assert_eq!(redis.cmd(&acl), "OK");
        let writer = TcpStream::connect(redis.addr()).unwrap();
        writer
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let reader = BufReader::new(writer.try_clone().unwrap());
        let mut p = Publisher { reader, writer };
        p.send(&resp(&["AUTH", "pub", PUB_PASSWORD]), 1);
        assert_eq!(p.line(), "+OK", "pub logs in");
        p.send(&resp(&["SET", &keys("x").lock, "evil"]), 1);
        let refused = p.line();
        assert!(refused.starts_with("-NOPERM"), "its SET: {refused}");
        p
    }

    fn send(&mut self, command: &[u8], times: usize) {
        let all = command.repeat(times);
        self.writer.write_all(&all).unwrap();
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    /// Publishes `message` `times` times on `channel` in one write (a pipeline), then reads
    /// the replies: the number of subscribers each reached.
    fn publish(&mut self, channel: &str, message: &str, times: usize) -> Vec<i64> {
        self.send(&resp(&["PUBLISH", channel, message]), times);
        (0..times)
            .map(|_| {
                let line = self.line();
                line.strip_prefix(':')
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("PUBLISH answered {line}"))
            })
            .collect()
    }
}

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn forged_acquired(holder: &str, fence: u64, address: &str) -> String {
    format!(r#"{{"event":"acquired","holder":"{holder}","fence":{fence},"address":"{address}"}}"#)
}

fn released_channel(name: &str) -> String {
    keys(name).released
}

/// A hook that appends `$LEADERD_EVENT $LEADERD_LEADER` to `out`.
fn hook(out: &Path) -> String {
    let script = format!(
        "echo \"$LEADERD_EVENT $LEADERD_LEADER\" >> {}",
        out.display()
    )
    .replace("${", "$${");
    serde_json::to_string(&["sh", "-c", &script]).unwrap()
}

fn replica(name: &str, id: &str, redis: &RedisServer, hooks_out: &Path) -> Replica {
    let service = Service::start(id);
    let proxy_port = free_port();
    let mut o = DaemonOpts::new(name, id, &redis.url());
    o.lease = "3s".into();
    o.renew_deadline = "2s".into();
    o.retry = "400ms".into();
    o.command_timeout = "200ms".into();
    o.extra_yaml = format!(
        "publish:\n  advertise: \"127.0.0.1:{port}\"\nproxy:\n  listen: \"127.0.0.1:{proxy_port}\"\n  upstream: \"127.0.0.1:{port}\"\nhooks:\n  on_leader_changed: {}\n",
        hook(&hooks_out.join(format!("{id}.hooks"))),
        port = service.port,
    );
    Replica {
        daemon: Daemon::spawn(&o),
        proxy_port,
        _service: service,
    }
}

/// Three replicas of `name` whose followers all name the same leader: they and its index.
fn three(redis: &RedisServer, name: &str, dir: &Path) -> (Vec<Replica>, usize) {
    seed_fence(redis, name);
    let rs: Vec<Replica> = ["a", "b", "c"]
        .iter()
        .map(|id| replica(name, id, redis, dir))
        .collect();
    let leader = wait_until(BOUND, STEP, || {
        let docs: Vec<Value> = rs
            .iter()
            .map(|r| r.daemon.status_doc())
            .collect::<Option<_>>()?;
        let l = docs.iter().position(|d| d["is_leader"] == true)?;
        let name = rs[l].daemon.identity();
        docs.iter()
            .all(|d| d["leader"] == name && d["leader_address"].is_string())
            .then_some(l)
    })
    .expect("one leader, named by all three");
    (rs, leader)
}

/// Connects through a proxy and reads the greeting: the name of the service reached.
fn ask(port: u16) -> Option<String> {
    let conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line).ok()?;
    line.strip_suffix('\n').map(str::to_string)
}

fn metric(d: &Daemon, series: &str) -> Option<u64> {
    let (status, body) = d.get("/metrics");
    if status != 200 {
        return None;
    }
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leaderd-forged-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Forged `acquired` messages (holder `evil`, the largest fence, an address the test owns)
/// published every 100 ms for 2 s: no follower names evil, shows its fence or address,
/// routes a connection to it, logs it or runs a hook for it.
#[test]
fn a_forged_acquired_names_routes_and_runs_nothing() {
    let redis = RedisServer::start();
    let name = "forged-acquired";
    let dir = temp_dir("acquired");
    let (rs, l) = three(&redis, name, &dir);
    let leader = rs[l].daemon.identity().to_string();
    let fence = rs[l].daemon.status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();
    let evil = Service::start("evil");
    let evil_address = format!("127.0.0.1:{}", evil.port);
    let mut pubc = Publisher::new(&redis);
    let forged = forged_acquired("evil", MAX_FENCE, &evil_address);
    let followers: Vec<&Replica> = rs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != l)
        .map(|(_, r)| r)
        .collect();
    let mut proxied = 0;
    for round in 0..20 {
        let reached = pubc.publish(&released_channel(name), &forged, 1);
        assert_eq!(reached, vec![3], "every replica is subscribed");
        std::thread::sleep(Duration::from_millis(50));
        for f in &followers {
            let doc = f.daemon.status_doc().expect("status");
            assert_eq!(doc["leader"], leader.as_str(), "round {round}: {doc}");
            assert_eq!(doc["fence"], fence, "round {round}: {doc}");
            assert_ne!(
                doc["leader_address"],
                evil_address.as_str(),
                "round {round}"
            );
            assert_eq!(
                ask(f.proxy_port).as_deref(),
                Some(leader.as_str()),
                "round {round}"
            );
            proxied += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(proxied, 40);
    assert_eq!(
        evil.accepted.load(Ordering::SeqCst),
        0,
        "a connection reached evil"
    );
    for r in &rs {
        let log = r.daemon.log();
        assert!(!log.contains("evil"), "{} logged evil", r.daemon.identity());
        assert!(
            !log.contains(&MAX_FENCE.to_string()),
            "{} logged the forged fence",
            r.daemon.identity()
        );
        let hooks = std::fs::read_to_string(dir.join(format!("{}.hooks", r.daemon.identity())))
            .unwrap_or_default();
        assert!(
            !hooks.contains("evil"),
            "{} ran a hook for evil: {hooks}",
            r.daemon.identity()
        );
        let dropped = format!("leaderd_messages_dropped_total{{name=\"{name}\"}}");
        assert_eq!(
            metric(&r.daemon, &dropped),
            Some(0),
            "well-formed: read, not dropped"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One forged `acquired` with the largest fence, then a graceful handover (SIGTERM of the
/// leader): the successor takes over in milliseconds, the release is not masked.
#[test]
fn a_forged_fence_masks_no_release() {
    let redis = RedisServer::start();
    let name = "forged-fence";
    let dir = temp_dir("fence");
    let (mut rs, l) = three(&redis, name, &dir);
    let mut pubc = Publisher::new(&redis);
    let forged = forged_acquired("evil", MAX_FENCE, "127.0.0.1:9");
    pubc.publish(&released_channel(name), &forged, 3);
    std::thread::sleep(Duration::from_millis(30));
    rs[l].daemon.signal(Signal::SIGTERM);
    assert_eq!(rs[l].daemon.wait_exit(BOUND), Some(0));
    let ended = rs[l]
        .daemon
        .events_named("stepped_down")
        .last()
        .and_then(|ev| field_u64(ev, "ended_at_ms"))
        .expect("stepped_down with ended_at_ms");
    let (who, acquired_at) = wait_until(BOUND, STEP, || {
        rs.iter()
            .enumerate()
            .filter(|(i, _)| *i != l)
            .find_map(|(_, r)| {
                let ev = r.daemon.events_named("acquired").into_iter().next_back()?;
                Some((
                    r.daemon.identity().to_string(),
                    field_u64(&ev, "acquired_at_ms")?,
                ))
            })
    })
    .expect("a successor takes over");
    let took = acquired_at.saturating_sub(ended);
    eprintln!("{who} took over {took} ms after the step-down");
    // A reserved release is taken in a few ms (BENCHMARKS.md); 100 ms leaves room for a
    // loaded 2-core machine. Masked by the forged fence it took 788 ms (up to a heartbeat).
    assert!(took < 100, "{who} took over {took} ms after the step-down");
    let _ = std::fs::remove_dir_all(&dir);
}

const BATCHES: u64 = 10;

/// Messages of 2 KiB, with a 300-byte holder or a fence that is not an integer, and of
/// 8 MiB are dropped unread and counted; the follower's memory levels off and no log line
/// grows with them.
#[test]
fn oversized_messages_are_dropped_and_counted() {
    let redis = RedisServer::start();
    let name = "forged-large";
    let dir = temp_dir("large");
    let (rs, l) = three(&redis, name, &dir);
    let f = &rs[(l + 1) % 3].daemon;
    let mut pubc = Publisher::new(&redis);
    let dropped = format!("leaderd_messages_dropped_total{{name=\"{name}\"}}");
    let channel = released_channel(name);
    // Small messages out of bounds: every replica counts each one.
    let small = [
        forged_acquired(&"e".repeat(2048), 7, "127.0.0.1:9"),
        forged_acquired(&"e".repeat(300), 7, "127.0.0.1:9"),
        forged_acquired("evil", 7, &"9".repeat(300)),
        r#"{"event":"acquired","holder":"evil","fence":1.5,"address":null}"#.to_string(),
        r#"{"event":"released","holder":"evil","fence":"7","reserved_for":null}"#.to_string(),
    ];
    for m in &small {
        assert_eq!(pubc.publish(&channel, m, 1), vec![3]);
    }
    let n = small.len() as u64;
    for r in &rs {
        let counted = wait_until(BOUND, STEP, || {
            metric(&r.daemon, &dropped).filter(|c| *c >= n)
        });
        assert_eq!(
            counted,
            Some(n),
            "{}: each dropped once",
            r.daemon.identity()
        );
    }
    // 8 MiB messages, one at a time.
    let rss_before = rss_kib(f.pid());
    let huge = forged_acquired(&"e".repeat(8 << 20), MAX_FENCE, "127.0.0.1:9");
    let mut peak = rss_before;
    for batch in 1..=BATCHES {
        pubc.publish(&channel, &huge, 1);
        let _ = wait_until(Duration::from_secs(3), STEP, || {
            metric(f, &dropped).filter(|c| *c >= n + batch)
        });
        peak = peak.max(rss_kib(f.pid()));
    }
    let rss_after = rss_kib(f.pid());
    eprintln!(
        "RSS {rss_before} KiB -> {rss_after} KiB after {BATCHES} 8 MiB messages (peak {peak} KiB)"
    );
    // Each replica counts the 8 MiB messages that reached it. One may miss some on a loaded
    // machine: a PING queued behind 8 MiB can go unanswered in time, and the subscription is
    // made again (what is published meanwhile is not heard).
    for r in &rs {
        let c = metric(&r.daemon, &dropped).unwrap_or(0);
        assert!(
            (n + 1..=n + BATCHES).contains(&c),
            "{}: {c} dropped",
            r.daemon.identity()
        );
    }
    // A message is held while it is read (a few may queue on a loaded machine, and the
    // client's buffers keep their size), never parsed or kept: before, five of them took a
    // follower from 8.6 to 91 MiB (peak 148).
    assert!(
        peak < rss_before + 96 * 1024,
        "RSS {rss_before} KiB -> peak {peak} KiB"
    );
    assert!(
        rss_after < rss_before + 48 * 1024,
        "RSS {rss_before} KiB -> {rss_after} KiB after {BATCHES} messages"
    );
    for r in &rs {
        let doc = r.daemon.status_doc().unwrap();
        assert_eq!(doc["leader"], rs[l].daemon.identity(), "{doc}");
        let log = r.daemon.log();
        let longest = log.lines().map(str::len).max().unwrap_or(0);
        assert!(
            longest < 4096,
            "{}: a log line of {longest} bytes",
            r.daemon.identity()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Calls of every command but PUBLISH, AUTH and INFO, from `INFO commandstats`.
fn calls_besides_publish(redis: &RedisServer) -> u64 {
    redis
        .cmd(&["INFO", "commandstats"])
        .lines()
        .filter(|l| !l.starts_with("cmdstat_publish:") && !l.starts_with("cmdstat_info:"))
        .filter(|l| !l.starts_with("cmdstat_auth:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// 1,000 forged messages at once cost each follower at most one read in flight: far fewer
/// reads than messages, and every follower still names the real leader.
#[test]
fn a_flood_costs_one_read_in_flight() {
    let redis = RedisServer::start();
    let name = "forged-flood";
    let dir = temp_dir("flood");
    let (rs, l) = three(&redis, name, &dir);
    let leader = rs[l].daemon.identity().to_string();
    let mut pubc = Publisher::new(&redis);
    let forged = forged_acquired("evil", MAX_FENCE, "127.0.0.1:9");
    // Quiet Redis traffic first: renews, heartbeats, over one second.
    let before = calls_besides_publish(&redis);
    std::thread::sleep(Duration::from_secs(1));
    let quiet = calls_besides_publish(&redis) - before;
    let before = calls_besides_publish(&redis);
    let reached = pubc.publish(&released_channel(name), &forged, 1000);
    assert!(reached.iter().all(|n| *n == 3));
    std::thread::sleep(Duration::from_secs(1));
    let flood = calls_besides_publish(&redis) - before;
    eprintln!("{flood} calls in the second of the flood, {quiet} in a quiet one");
    // 2,000 messages reached the two followers; the reads they caused are a few per
    // follower (one in flight, the rest coalesced), on top of the quiet traffic.
    assert!(
        flood <= quiet + 100,
        "{flood} calls in the second of the flood, {quiet} in a quiet one"
    );
    for r in &rs {
        assert_eq!(r.daemon.status_doc().unwrap()["leader"], leader.as_str());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `leaderd handover` while forged `acquired` messages arrive every few ms: it reports the
/// real old and new terms, read from the lease.
#[test]
fn handover_concludes_from_the_lease() {
    let redis = RedisServer::start();
    let name = "forged-handover";
    let dir = temp_dir("handover");
    let (rs, l) = three(&redis, name, &dir);
    let old = rs[l].daemon.identity().to_string();
    let old_fence = rs[l].daemon.status_doc().unwrap()["fence"]
        .as_u64()
        .unwrap();
    let mut pubc = Publisher::new(&redis);
    let stop = Arc::new(AtomicBool::new(false));
    let forging = {
        let stop = stop.clone();
        let channel = released_channel(name);
        std::thread::spawn(move || {
            let forged = forged_acquired("evil", MAX_FENCE, "127.0.0.1:9");
            let mut sent = 0;
            while !stop.load(Ordering::SeqCst) && sent < 20_000 {
                pubc.publish(&channel, &forged, 1);
                sent += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            sent
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let out = rs[l].daemon.cli(&["handover", "--json"]);
    stop.store(true, Ordering::SeqCst);
    let sent = forging.join().unwrap();
    assert!(sent > 10, "forged during the handover: {sent}");
    assert_eq!(out.code, Some(0), "{out:?}");
    let doc: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    let new = doc["to"].as_str().expect("to").to_string();
    assert_eq!(doc["from"], old.as_str(), "{doc}");
    assert_eq!(doc["from_fence"], old_fence, "{doc}");
    assert_ne!(new, old);
    let successor = rs
        .iter()
        .find(|r| r.daemon.identity() == new)
        .expect("a replica");
    // The successor's own `acquired` line names that fence (written a moment after the
    // command may have read the lease).
    let to_fence = doc["to_fence"].as_u64().expect("to_fence");
    let logged = wait_until(BOUND, STEP, || {
        let acquired = successor.daemon.events_named("acquired");
        let fence = acquired.last().and_then(|ev| field_u64(ev, "fence"))?;
        (fence >= to_fence).then_some(fence)
    });
    assert_eq!(logged, Some(to_fence), "{doc}");
    let _ = std::fs::remove_dir_all(&dir);
}
