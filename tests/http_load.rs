//! HTTP under load (docs/outputs.md#http-when-publishhttp_addr-is-set), against the real binary: a
//! flood of idle, slow, oversized and non-reading clients neither starves the election nor grows
//! leaderd's memory; connections past `publish.max_connections` are closed at once and counted;
//! shutdown does not wait for a client; a low `nofile` limit does not make the leader fall.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::{is_leader, keys, wait_until, Daemon, DaemonOpts, RedisServer};

const STEP: Duration = Duration::from_millis(50);

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// Resident memory of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// True when the server closed `s` (end of file or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a 431 or 408 answer, then the close
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
    false
}

fn step_downs(d: &Daemon) -> usize {
    d.events_named("stepped_down").len()
}

fn start_leader(redis: &RedisServer, extra_yaml: &str) -> Daemon {
    let mut opts = DaemonOpts::new("load", "pod-a", &redis.url());
    opts.extra_yaml = extra_yaml.into();
    let d = Daemon::spawn(&opts);
    wait_until(Duration::from_secs(10), STEP, || {
        is_leader(&d).then_some(())
    })
    .expect("pod-a leads");
    d
}

#[test]
fn a_flood_of_hostile_clients_neither_stops_the_leader_nor_grows_its_memory() {
    let redis = RedisServer::start();
    let d = start_leader(&redis, "");
    let addr = d.http_addr();
    let rss_before = rss_kib(d.pid());
    let mut held = Vec::new();
    // 500 event streams that never read.
    for _ in 0..500 {
        let mut s = connect(addr);
        s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        held.push(s);
    }
    // 170 clients each sending 400 KB of headers that never end.
    let filler = format!("X-Fill: {}\r\n", "a".repeat(1000));
    let mut big = Vec::new();
    for _ in 0..170 {
        let mut s = connect(addr);
        let _ = s.write_all(b"GET /leader HTTP/1.1\r\nHost: x\r\n");
        for _ in 0..400 {
            if s.write_all(filler.as_bytes()).is_err() {
                break; // refused at the header limit: what we want
            }
        }
        big.push(s);
    }
    // 300 slowloris clients, and idle ones.
    let mut slow = Vec::new();
    for i in 0..300 {
        let mut s = connect(addr);
        if i % 2 == 0 {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ");
        }
        slow.push(s);
    }
    // While it all stays open: probes, scrapes and status answer, each within 1 s.
    let flood_end = Instant::now() + Duration::from_secs(4);
    let mut probes = 0;
    while Instant::now() < flood_end {
        for path in ["/readyz", "/leader", "/metrics"] {
            let t0 = Instant::now();
            let (code, _) =
                support::daemon::http_request(addr, "GET", path, Duration::from_secs(1));
            assert_eq!(code, 200, "{path} under the flood");
            assert!(
                t0.elapsed() < Duration::from_secs(1),
                "{path} took {:?}",
                t0.elapsed()
            );
            probes += 1;
        }
        for s in slow.iter_mut().step_by(2) {
            let _ = s.write_all(b"a"); // a byte now and then, never the end of the headers
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(probes >= 6);
    let rss_flood = rss_kib(d.pid());
    // Oversized heads are refused (431 and closed) long before 400 KB.
    let refused = big
        .iter_mut()
        .map(|s| closed_within(s, Duration::from_secs(1)))
        .filter(|closed| *closed)
        .count();
    assert_eq!(refused, 170, "every oversized head is closed");
    // Slowloris: past the 5 s header timeout every unfinished head is closed.
    let slow_closed = slow
        .iter_mut()
        .map(|s| closed_within(s, Duration::from_secs(4)))
        .filter(|closed| *closed)
        .count();
    assert_eq!(
        slow_closed, 300,
        "idle and unfinished connections are closed by the timeout"
    );
    assert!(is_leader(&d), "still leader after the flood");
    assert_eq!(
        step_downs(&d),
        0,
        "no step-down under the flood:\n{}",
        d.log()
    );
    eprintln!("RSS before {rss_before} KiB, under the flood {rss_flood} KiB");
    assert!(rss_flood < 64 * 1024, "RSS {rss_flood} KiB under the flood");
    drop(held);
}

#[test]
fn connections_past_max_connections_are_closed_at_once_and_counted() {
    let redis = RedisServer::start();
    let d = start_leader(&redis, "publish:\n  max_connections: 20\n");
    let addr = d.http_addr();
    let (_, metrics) = d.get("/metrics");
    assert!(
        metrics.contains("leaderd_http_refused_total{name=\"load\"} 0"),
        "{metrics}"
    );
    // Event streams count as connections, and may take every one of them.
    let held: Vec<TcpStream> = (0..20).map(|_| open_stream(addr)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut extra: Vec<TcpStream> = (0..5).map(|_| connect(addr)).collect();
    for s in &mut extra {
        let t0 = Instant::now();
        assert!(
            closed_within(s, Duration::from_secs(1)),
            "a connection past the cap is closed"
        );
        assert!(t0.elapsed() < Duration::from_millis(900), "closed at once");
    }
    drop(held);
    let text = wait_until(Duration::from_secs(3), STEP, || {
        let (code, body) = d.get("/metrics");
        (code == 200).then_some(body)
    })
    .expect("/metrics answers once the held connections are gone");
    let refused: f64 = text
        .lines()
        .find(|l| l.starts_with("leaderd_http_refused_total{"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("the refused counter");
    assert!(refused >= 5.0, "refused {refused}");
    assert!(is_leader(&d));
}

/// An `/events` stream whose answer began with 200.
fn open_stream(addr: std::net::SocketAddr) -> TcpStream {
    let mut s = connect(addr);
    s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).expect("the stream's answer");
    assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
    s
}

#[test]
fn shutdown_does_not_wait_for_a_client_with_a_half_sent_request() {
    let redis = RedisServer::start();
    let mut d = start_leader(&redis, "");
    let mut half = connect(d.http_addr());
    half.write_all(b"GET /leader HTTP/1.1\r\nHost: x\r\nX-Half: ")
        .unwrap();
    let mut stream = connect(d.http_addr());
    stream
        .write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    d.signal(Signal::SIGTERM);
    let code = d.wait_exit(Duration::from_secs(5));
    let took = t0.elapsed();
    assert_eq!(code, Some(0), "{}", d.log());
    // grace_period (3 s default, no child here) + 1 s bounds it; HTTP adds at most ~1 s.
    assert!(took < Duration::from_millis(2500), "exit took {took:?}");
    let key = &keys("load").lock;
    assert_eq!(redis.cmd(&["EXISTS", key]), "0", "the lease is released");
    drop((half, stream));
}

#[test]
fn idle_clients_under_a_low_nofile_limit_do_not_starve_the_election() {
    let redis = RedisServer::start();
    let mut opts = DaemonOpts::new("fds", "pod-a", &redis.url());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let leader_file = dir.path().join("leader.json");
    let port = support::free_port();
    opts.lease = "2s".into();
    std::fs::write(
        &config,
        support::daemon::render_config(&opts, port, &leader_file),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let script = format!(
        "ulimit -n 64 && exec {} run --config {}",
        support::leaderd_bin().display(),
        config.display()
    );
    let mut child = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let doc = || {
        let (code, body) =
            support::daemon::http_request(addr, "GET", "/leader", Duration::from_secs(1));
        (code == 200)
            .then(|| serde_json::from_str::<serde_json::Value>(&body).ok())
            .flatten()
    };
    let led = wait_until(Duration::from_secs(10), STEP, || {
        doc().filter(|d| d["is_leader"] == true).map(|_| ())
    });
    let logs = || std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    if led.is_none() {
        let _ = child.kill();
        panic!("never led:\n{}", logs());
    }
    // 80 idle clients: more than the 64 descriptors the process may have in total.
    let mut idle: Vec<TcpStream> = Vec::new();
    for _ in 0..80 {
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            idle.push(s);
        }
    }
    // Hold them past several renewals (retry 300 ms) and a Redis reconnect.
    let written_before = std::fs::metadata(&leader_file)
        .and_then(|m| m.modified())
        .ok();
    redis.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    std::thread::sleep(Duration::from_secs(3));
    let written_after = std::fs::metadata(&leader_file)
        .and_then(|m| m.modified())
        .ok();
    let text = logs();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&leader_file).unwrap()).unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        Signal::SIGTERM,
    );
    let _ = wait_until(Duration::from_secs(5), STEP, || {
        child.try_wait().ok().flatten()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !text.contains("stepped_down"),
        "the leader stepped down:\n{text}"
    );
    assert!(!text.contains("cannot write the leader file"), "{text}");
    assert!(written_before.is_some());
    assert_ne!(
        written_after, written_before,
        "the leader file is rewritten at renewals"
    );
    assert_eq!(file["is_leader"], true, "the leader file still says leader");
    drop(idle);
}

/// The two HTTP timeouts (docs/outputs.md#http-when-publishhttp_addr-is-set), told apart: a head
/// has 5 s, an idle keep-alive connection between requests 60 s (so a keep-alive client, e.g. a
/// scraper, keeps its connection across a 7 s pause).
#[test]
fn an_idle_keep_alive_connection_outlives_the_head_timeout() {
    let redis = RedisServer::start();
    let d = start_leader(&redis, "");
    let addr = d.http_addr();
    let mut silent = connect(addr); // never sends a byte: a head that never comes
    let mut partial = connect(addr);
    partial.write_all(b"GET /leader HTTP/1.1\r\n").unwrap();
    let mut kept = connect(addr);
    let get = b"GET /leader HTTP/1.1\r\nHost: x\r\n\r\n";
    kept.write_all(get).unwrap();
    let mut buf = [0u8; 4096];
    assert!(kept.read(&mut buf).unwrap() > 0, "a first answer");
    let t0 = Instant::now();
    assert!(
        closed_within(&mut silent, Duration::from_secs(8)),
        "no head in 5 s: closed"
    );
    assert!(
        closed_within(&mut partial, Duration::from_secs(2)),
        "an unfinished head: closed"
    );
    std::thread::sleep(Duration::from_secs(7).saturating_sub(t0.elapsed()));
    kept.write_all(get).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let n = kept
        .read(&mut buf)
        .expect("the kept connection answers after 7 s idle");
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}

/// hyper's own 30 s header timer does not close an idle keep-alive connection early: it
/// answers after 35 s without traffic, and one left alone is closed at 60 s, not before.
#[test]
fn an_idle_keep_alive_connection_is_closed_at_60_s_not_30() {
    let redis = RedisServer::start();
    let d = start_leader(&redis, "");
    let get = b"GET /leader HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut buf = [0u8; 4096];
    let mut answered = |s: &mut TcpStream| {
        s.write_all(get).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let n = s.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200")
    };
    let mut asks = connect(d.http_addr());
    let mut waits = connect(d.http_addr());
    assert!(answered(&mut asks) && answered(&mut waits));
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(35));
    assert!(answered(&mut asks), "answered after 35 s idle");
    std::thread::sleep(Duration::from_secs(57).saturating_sub(t0.elapsed()));
    assert!(
        !closed_within(&mut waits, Duration::from_millis(200)),
        "open after 57 s idle"
    );
    assert!(
        closed_within(&mut waits, Duration::from_secs(8)),
        "closed at 60 s idle"
    );
    assert!(
        t0.elapsed() >= Duration::from_secs(59),
        "{:?}",
        t0.elapsed()
    );
}

/// A leader of `name` renewing every 50 ms: about 20 new documents a second.
fn renewing_fast(redis: &RedisServer, name: &str) -> Daemon {
    let mut opts = DaemonOpts::new(name, "pod-a", &redis.url());
    (opts.retry, opts.command_timeout) = ("50ms".into(), "40ms".into());
    let d = Daemon::spawn(&opts);
    wait_until(Duration::from_secs(10), STEP, || {
        is_leader(&d).then_some(())
    })
    .expect("pod-a leads");
    d
}

/// An `/events` client that does not read is closed once a few documents wait for it: the
/// kernel's send buffer does not grow to hold hundreds of them first. Here renewals every
/// 50 ms change the document; the client's own receive buffer is small.
#[test]
fn an_events_client_that_does_not_read_is_closed_after_a_few_documents() {
    let redis = RedisServer::start();
    let d = renewing_fast(&redis, "sse");
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(2048).unwrap();
    socket
        .connect_timeout(&d.http_addr().into(), Duration::from_secs(2))
        .unwrap();
    let mut s: TcpStream = socket.into();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Unread, at up to 20 documents a second (about 420 bytes each): up to 60 are offered.
    // Both kernels' buffers hold about 20; leaderd a few more, then closes the stream. With
    // hyper's 16 KiB write buffer filled first, it was still open here.
    std::thread::sleep(Duration::from_secs(3));
    let mut got = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let t0 = Instant::now();
    let mut closed = false;
    while !closed && t0.elapsed() < Duration::from_secs(3) {
        let mut buf = [0u8; 16 * 1024];
        match s.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => closed = e.kind() == ErrorKind::ConnectionReset,
        }
    }
    let docs = String::from_utf8_lossy(&got).matches("\ndata:").count();
    println!("{docs} documents ({} bytes) read", got.len());
    assert!(closed, "the stream is closed ({docs} documents read)");
    assert!(docs < 35, "{docs} documents were held for the client");
    assert!(is_leader(&d), "the leader went on");
    assert_eq!(step_downs(&d), 0);
}

/// A client that reads keeps its stream however many documents pass through it: what is
/// held for it is counted since the connection's buffer was last empty, not in total.
#[test]
fn an_events_client_that_reads_keeps_its_stream() {
    let redis = RedisServer::start();
    let d = renewing_fast(&redis, "sse-read");
    let mut s = connect(d.http_addr());
    s.write_all(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut got = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(4) {
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => panic!("the stream was closed after {} bytes", got.len()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("the stream failed after {} bytes: {e}", got.len()),
        }
    }
    let docs = String::from_utf8_lossy(&got).matches("\ndata:").count();
    // About 80 documents (some 33 KB), ten times what is held for a client that does not read.
    assert!(docs >= 40, "{docs} documents in 4 s");
}

/// Reads one whole answer from a keep-alive connection; false when the connection failed.
fn read_answer(s: &mut TcpStream) -> bool {
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        let Some(head_end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length = text[..head_end]
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>())
            })
            .and_then(Result::ok);
        match length {
            Some(len) if got.len() >= head_end + 4 + len => return true,
            Some(_) => {}
            None => return true,
        }
    }
}

/// Under such a load the leader misses no renewal: the election's timers do not depend on HTTP work
/// (docs/outputs.md#http-when-publishhttp_addr-is-set). A thousand keep-alive clients scraping
/// `/metrics` as fast as they can for 8 s (the HTTP server's own thread busy all along): no
/// step-down, renewals on time, `/readyz` answered 200 within a kubelet's second.
#[test]
fn a_flood_of_scrapes_does_not_delay_the_leaders_renewals() {
    let redis = RedisServer::start();
    let d = start_leader(&redis, "publish:\n  max_connections: 2000\n");
    let addr = d.http_addr();
    let until = Instant::now() + Duration::from_secs(8);
    let scrapers: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut conns: Vec<TcpStream> = (0..125)
                    .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
                    .collect();
                for c in &mut conns {
                    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                }
                let mut scrapes = 0u64;
                // Every connection asks at once, then the answers are read: a thousand
                // scrapes in progress at a time.
                let get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
                while Instant::now() < until {
                    conns.retain_mut(|c| c.write_all(get).is_ok());
                    for c in &mut conns {
                        scrapes += u64::from(read_answer(c));
                    }
                }
                scrapes
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    while Instant::now() < until {
        let t0 = Instant::now();
        let (code, _) =
            support::daemon::http_request(addr, "GET", "/readyz", Duration::from_secs(2));
        assert_eq!(code, 200, "/readyz under the flood");
        slowest = slowest.max(t0.elapsed());
        std::thread::sleep(Duration::from_millis(200));
    }
    let scrapes: u64 = scrapers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(scrapes > 1000, "the flood was real: {scrapes} scrapes");
    assert!(slowest < Duration::from_secs(1), "/readyz took {slowest:?}");
    assert_eq!(step_downs(&d), 0, "{}", d.log());
    let renewals: Vec<u64> = d
        .events_named("renewed")
        .iter()
        .filter_map(|e| e["lease_valid_until_ms"].as_u64())
        .collect();
    let gap = renewals.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    // retry_period 300 ms: a renew every 300 ms, plus its round trip.
    assert!(
        gap < 700,
        "a renewal came {gap} ms after the one before ({} renewals)",
        renewals.len()
    );
    println!("{scrapes} scrapes, /readyz at most {slowest:?}, renew gap at most {gap} ms");
}
