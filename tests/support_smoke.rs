//! Smoke tests of the test support itself: real redis-server, proxy faults, and the safety checker.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{
    check_logs, check_no_overlap, resp_cmd, terms_from_logs, wait_until, Proxy, RedisServer,
    RespConn, Term,
};

const T: Duration = Duration::from_secs(5);

#[test]
fn redis_starts_and_answers() {
    let r = RedisServer::start();
    assert_eq!(r.url(), format!("redis://127.0.0.1:{}/0", r.port()));
    assert_eq!(r.addr().port(), r.port());
    assert!(r.pid() > 0);
    assert_eq!(r.cmd(&["PING"]), "PONG");
    assert_eq!(r.cmd(&["SET", "k", "v w"]), "OK");
    assert_eq!(r.cmd(&["GET", "k"]), "v w");
    assert_eq!(r.cmd(&["GET", "missing"]), "(nil)");
    assert_eq!(r.cmd(&["INCR", "n"]), "1");
    assert_eq!(r.cmd(&["PTTL", "n"]), "-1");
    assert_eq!(r.cmd(&["HSET", "h", "a", "1", "b", "2"]), "2");
    let all = r.cmd(&["HGETALL", "h"]);
    assert_eq!(all.lines().collect::<Vec<_>>(), ["a", "1", "b", "2"]);
    assert!(r.cmd(&["INCR", "k"]).starts_with("error: ERR"));
    assert!(r.cmd(&["HGET", "k", "x"]).starts_with("error: WRONGTYPE"));
    assert!(r.cmd(&["INFO", "server"]).contains("redis_version:"));
    assert_eq!(r.cmd(&["SCRIPT", "FLUSH"]), "OK");
}

#[test]
fn redis_with_password_authenticates_cmd() {
    let r = RedisServer::start_with_args(&["--requirepass", "secret"]);
    assert_eq!(r.password(), Some("secret"));
    assert_eq!(r.cmd(&["PING"]), "PONG");
    let raw = resp_cmd(r.addr(), &["PING"], T).unwrap();
    assert!(raw.starts_with("error: NOAUTH"), "{raw}");
}

#[test]
fn redis_restart_empty_loses_data_and_keeps_port() {
    let mut r = RedisServer::start();
    let (port, pid) = (r.port(), r.pid());
    r.cmd(&["SET", "k", "v"]);
    r.restart_empty();
    assert_eq!(r.port(), port);
    assert_ne!(r.pid(), pid);
    assert_eq!(r.cmd(&["GET", "k"]), "(nil)");
    assert_eq!(r.cmd(&["DBSIZE"]), "0");

    r.stop();
    assert!(!r.is_running());
    assert!(resp_cmd(r.addr(), &["PING"], Duration::from_millis(300)).is_err());
    r.start_again();
    assert_eq!(r.port(), port);
    assert_eq!(r.cmd(&["PING"]), "PONG");
}

#[test]
fn redis_pause_times_out_and_resume_restores() {
    let r = RedisServer::start();
    r.pause();
    let t0 = Instant::now();
    let err = r.try_cmd(&["PING"], Duration::from_millis(300));
    assert!(err.is_err(), "PING answered while paused: {err:?}");
    assert!(t0.elapsed() >= Duration::from_millis(250));
    r.resume();
    assert_eq!(r.cmd(&["PING"]), "PONG");
}

#[test]
fn proxy_forwards() {
    let r = RedisServer::start();
    let p = Proxy::start(r.addr());
    assert_eq!(p.url(), format!("redis://127.0.0.1:{}/0", p.addr().port()));
    assert_eq!(p.target(), r.addr());
    let mut c = RespConn::connect(p.addr(), T).unwrap();
    assert_eq!(c.call(&["SET", "k", "via proxy"]).unwrap().render(), "OK");
    assert_eq!(r.cmd(&["GET", "k"]), "via proxy");
    // A large value survives chunking.
    let big = "x".repeat(200_000);
    assert_eq!(c.call(&["SET", "big", &big]).unwrap().render(), "OK");
    assert_eq!(c.call(&["GET", "big"]).unwrap().render(), big);
    assert_eq!(p.connections(), 1);
    drop(c);
    assert!(
        wait_until(T, Duration::from_millis(20), || (p.connections() == 0)
            .then_some(()))
        .is_some()
    );
}

#[test]
fn proxy_latency_is_observable() {
    let r = RedisServer::start();
    let p = Proxy::start(r.addr());
    let mut c = RespConn::connect(p.addr(), T).unwrap();
    assert_eq!(c.call(&["PING"]).unwrap().render(), "PONG");
    p.set_latency(Duration::from_millis(200));
    let t0 = Instant::now();
    assert_eq!(c.call(&["PING"]).unwrap().render(), "PONG");
    let rtt = t0.elapsed();
    assert!(rtt >= Duration::from_millis(200), "rtt {rtt:?}");
    assert!(rtt < Duration::from_secs(3), "rtt {rtt:?}");
    p.set_latency(Duration::ZERO);
    let t0 = Instant::now();
    assert_eq!(c.call(&["PING"]).unwrap().render(), "PONG");
    assert!(t0.elapsed() < Duration::from_millis(200));
}

#[test]
fn proxy_cut_and_restore() {
    let r = RedisServer::start();
    let p = Proxy::start(r.addr());
    let mut c = RespConn::connect(p.addr(), T).unwrap();
    assert_eq!(c.call(&["PING"]).unwrap().render(), "PONG");
    p.cut();
    assert!(
        c.call(&["PING"]).is_err(),
        "existing connection survived cut"
    );
    let refused = TcpStream::connect_timeout(&p.addr(), Duration::from_millis(500));
    assert!(refused.is_err(), "new connection accepted while cut");
    assert!(resp_cmd(p.addr(), &["PING"], Duration::from_millis(500)).is_err());
    p.restore();
    assert_eq!(resp_cmd(p.addr(), &["PING"], T).unwrap(), "PONG");
    // cut/restore are repeatable and idempotent.
    p.restore();
    p.cut();
    p.cut();
    assert!(resp_cmd(p.addr(), &["PING"], Duration::from_millis(500)).is_err());
    p.restore();
    assert_eq!(resp_cmd(p.addr(), &["PING"], T).unwrap(), "PONG");
}

#[test]
fn proxy_blackhole_hangs_then_delivers_in_order() {
    let r = RedisServer::start();
    let p = Proxy::start(r.addr());
    let mut c = RespConn::connect(p.addr(), T).unwrap();
    assert_eq!(c.call(&["PING"]).unwrap().render(), "PONG");
    p.blackhole(true);
    c.set_timeout(Duration::from_millis(300)).unwrap();
    assert!(
        c.call(&["INCR", "n"]).is_err(),
        "answered through a blackhole"
    );
    assert_eq!(
        r.cmd(&["GET", "n"]),
        "(nil)",
        "forwarded through a blackhole"
    );
    // A fresh connection is accepted but hangs too.
    let mut raw = TcpStream::connect_timeout(&p.addr(), T).unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 16];
    assert!(raw.read(&mut buf).is_err());
    p.blackhole(false);
    // Held bytes arrive in order once lifted.
    let got = wait_until(T, Duration::from_millis(20), || {
        (r.cmd(&["GET", "n"]) == "1").then_some(())
    });
    assert!(got.is_some());
    raw.set_read_timeout(Some(T)).unwrap();
    let n = raw.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"+PONG\r\n");
}

#[test]
fn proxy_drop_closes_connections() {
    let r = RedisServer::start();
    let p = Proxy::start(r.addr());
    let addr = p.addr();
    let mut c = RespConn::connect(addr, T).unwrap();
    assert_eq!(c.call(&["PING"]).unwrap().render(), "PONG");
    drop(p);
    assert!(c.call(&["PING"]).is_err());
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_works_with_async_redis_client() {
    let r = RedisServer::start();
    let p = Proxy::start(r.addr());
    let client = redis::Client::open(p.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
    assert_eq!(pong, "PONG");
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("async")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(r.cmd(&["GET", "k"]), "async");
}

#[test]
fn wait_until_is_bounded() {
    let t0 = Instant::now();
    let mut calls = 0;
    let r: Option<()> = wait_until(
        Duration::from_millis(200),
        Duration::from_millis(20),
        || {
            calls += 1;
            None
        },
    );
    assert!(r.is_none());
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert!(calls <= 12, "{calls} calls");
    let mut n = 0;
    assert_eq!(
        wait_until(T, Duration::from_millis(1), || {
            n += 1;
            (n == 3).then_some(n)
        }),
        Some(3)
    );
}

/// `free_port` keeps every block it claimed: 300 ports (five blocks) handed out before any
/// is bound are all different, and all can be held at once.
#[test]
fn free_port_hands_out_300_ports_that_can_all_be_held_at_once() {
    let ports: Vec<u16> = (0..300).map(|_| support::free_port()).collect();
    let distinct: std::collections::HashSet<u16> = ports.iter().copied().collect();
    assert_eq!(distinct.len(), ports.len(), "a port handed out twice");
    let held: Vec<std::net::TcpListener> = ports
        .iter()
        .map(|&p| {
            std::net::TcpListener::bind(("127.0.0.1", p))
                .unwrap_or_else(|e| panic!("port {p} handed out but taken: {e}"))
        })
        .collect();
    assert_eq!(held.len(), 300);
    // More after that: new ones still.
    let more = support::free_port();
    assert!(!distinct.contains(&more), "{more} handed out again");
    assert!(std::net::TcpListener::bind(("127.0.0.1", more)).is_ok());
}

// ---- safety checker ----

fn acquired(fence: u64, at: u64, valid: u64) -> Value {
    json!({"level": "INFO", "event": "acquired", "fence": fence, "acquired_at_ms": at, "lease_valid_until_ms": valid})
}

fn renewed(fence: u64, valid: u64) -> Value {
    json!({"level": "DEBUG", "event": "renewed", "fence": fence, "lease_valid_until_ms": valid})
}

fn stepped_down(fence: u64, valid: u64, ended: u64) -> Value {
    json!({"event": "stepped_down", "fence": fence, "reason": "shutdown", "lease_valid_until_ms": valid, "ended_at_ms": ended})
}

fn logs(v: Vec<(&str, Vec<Value>)>) -> Vec<(String, Vec<Value>)> {
    v.into_iter().map(|(r, e)| (r.to_string(), e)).collect()
}

#[test]
fn safety_clean_handover_passes() {
    let l = logs(vec![
        (
            "a",
            vec![
                json!({"msg": "starting"}),
                acquired(10, 1000, 2980),
                renewed(10, 3280),
                renewed(10, 3580),
                stepped_down(10, 3580, 3300),
                json!({"event": "leader_changed", "leader": "b", "fence": 11}),
                acquired(12, 9000, 10980),
            ],
        ),
        (
            "b",
            vec![
                json!({"event": "leader_changed", "leader": "a", "fence": 10}),
                acquired(11, 3300, 5280),
                renewed(11, 5580),
                // SIGKILLed: no stepped_down; claim ends at its last validity.
            ],
        ),
    ]);
    let terms = terms_from_logs(&l);
    assert_eq!(
        terms,
        vec![
            Term {
                replica: "a".into(),
                shard: None,
                fence: 10,
                acquired_at_ms: 1000,
                last_valid_until_ms: 3580,
                ended_at_ms: Some(3300),
            },
            Term {
                replica: "b".into(),
                shard: None,
                fence: 11,
                acquired_at_ms: 3300,
                last_valid_until_ms: 5580,
                ended_at_ms: None,
            },
            Term {
                replica: "a".into(),
                shard: None,
                fence: 12,
                acquired_at_ms: 9000,
                last_valid_until_ms: 10980,
                ended_at_ms: None,
            },
        ]
    );
    assert_eq!(terms[0].claim_end_ms(), 3300);
    assert_eq!(terms[1].claim_end_ms(), 5580);
    check_no_overlap(&terms).unwrap();
    check_logs(&l).unwrap();
}

#[test]
fn safety_overlap_detected() {
    let l = logs(vec![
        ("a", vec![acquired(1, 1000, 3000), renewed(1, 3500)]),
        ("b", vec![acquired(2, 3200, 5000)]),
    ]);
    let err = check_no_overlap(&terms_from_logs(&l)).unwrap_err();
    assert!(err.contains("overlap of 300 ms"), "{err}");
    assert!(
        err.contains("a fence 1") && err.contains("b fence 2"),
        "{err}"
    );

    // Ending the claim (stepped_down) before the next acquire makes it safe...
    let ok = logs(vec![
        (
            "a",
            vec![
                acquired(1, 1000, 3000),
                renewed(1, 3500),
                stepped_down(1, 3500, 3100),
            ],
        ),
        ("b", vec![acquired(2, 3200, 5000)]),
    ]);
    check_no_overlap(&terms_from_logs(&ok)).unwrap();

    // ...and a non-neighbouring overlap is found too.
    let far = logs(vec![
        ("a", vec![acquired(1, 1000, 9000)]),
        (
            "b",
            vec![acquired(2, 2000, 2500), stepped_down(2, 2500, 2400)],
        ),
        ("c", vec![acquired(3, 3000, 4000)]),
    ]);
    let err = check_no_overlap(&terms_from_logs(&far)).unwrap_err();
    assert!(err.starts_with("2 safety violation(s)"), "{err}");
}

#[test]
fn safety_fence_regression_and_duplicates_detected() {
    let l = logs(vec![
        (
            "a",
            vec![acquired(5, 1000, 2000), stepped_down(5, 2000, 1900)],
        ),
        ("b", vec![acquired(4, 2100, 3000)]),
    ]);
    let err = check_no_overlap(&terms_from_logs(&l)).unwrap_err();
    assert!(err.contains("fence regression"), "{err}");
    assert!(!err.contains("overlap"), "{err}");

    let dup = logs(vec![
        (
            "a",
            vec![acquired(7, 1000, 2000), stepped_down(7, 2000, 1500)],
        ),
        ("b", vec![acquired(7, 2100, 3000)]),
    ]);
    let err = check_no_overlap(&terms_from_logs(&dup)).unwrap_err();
    assert!(err.contains("fence 7 acquired 2 times"), "{err}");
    assert!(err.contains("fence regression"), "{err}");
}

#[test]
fn safety_check_logs_reports_orphans_and_nested_fields() {
    let l = logs(vec![("a", vec![renewed(3, 5000)])]);
    let err = check_logs(&l).unwrap_err();
    assert!(err.contains("no earlier `acquired` line"), "{err}");

    // Fields nested under "fields" (tracing's default JSON layout) and numbers as strings.
    let nested = logs(vec![(
        "a",
        vec![
            json!({"fields": {"event": "acquired", "fence": "9", "acquired_at_ms": 100, "lease_valid_until_ms": 200}}),
        ],
    )]);
    let terms = check_logs(&nested).unwrap();
    assert_eq!(terms.len(), 1);
    assert_eq!((terms[0].fence, terms[0].last_valid_until_ms), (9, 200));
}

// ---- daemon helpers that need no leaderd binary ----

#[test]
fn daemon_config_renders_and_merges_extra_yaml() {
    use support::daemon::render_config;
    let mut o = support::DaemonOpts::new("el", "pod-a", "redis://127.0.0.1:1/0");
    let leader = std::path::Path::new("/tmp/x/leader.json");
    let plain: serde_yaml::Value = serde_yaml::from_str(&render_config(&o, 4242, leader)).unwrap();
    assert_eq!(plain["name"].as_str(), Some("el"));
    assert_eq!(plain["identity"].as_str(), Some("pod-a"));
    assert_eq!(
        plain["redis"]["url"].as_str(),
        Some("redis://127.0.0.1:1/0")
    );
    assert_eq!(plain["redis"]["command_timeout"].as_str(), Some("200ms"));
    assert_eq!(plain["election"]["lease_duration"].as_str(), Some("2s"));
    assert_eq!(plain["election"]["renew_deadline"].as_str(), Some("1400ms"));
    assert_eq!(
        plain["publish"]["http_addr"].as_str(),
        Some("127.0.0.1:4242")
    );
    assert_eq!(
        plain["publish"]["leader_file"].as_str(),
        Some("/tmp/x/leader.json")
    );
    assert_eq!(plain["logging"]["format"].as_str(), Some("json"));

    o.extra_yaml =
        "election:\n  on_lost: exit\n  lease_duration: 3s\nexec:\n  grace_period: 200ms\n".into();
    let merged: serde_yaml::Value = serde_yaml::from_str(&render_config(&o, 4242, leader)).unwrap();
    assert_eq!(merged["election"]["on_lost"].as_str(), Some("exit"));
    assert_eq!(merged["election"]["lease_duration"].as_str(), Some("3s"));
    assert_eq!(merged["election"]["retry_period"].as_str(), Some("300ms"));
    assert_eq!(merged["exec"]["grace_period"].as_str(), Some("200ms"));
    assert_eq!(merged["redis"]["connect_timeout"].as_str(), Some("500ms"));

    o.identity.clear();
    o.extra_yaml = "not: [valid".into();
    let raw = render_config(&o, 4242, leader);
    assert!(!raw.contains("identity"));
    assert!(raw.ends_with("not: [valid"));
}

#[test]
fn http_client_reads_plain_and_chunked_responses() {
    use support::daemon::{http_request, parse_http_response};
    assert_eq!(
        parse_http_response(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 3\r\n\r\nno\n"),
        (503, "no\n".to_string())
    );
    assert_eq!(
        parse_http_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        ),
        (200, "hello world".to_string())
    );
    assert_eq!(parse_http_response(b"garbage"), (0, String::new()));

    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut req = Vec::new();
        let mut b = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).unwrap();
            assert!(n > 0);
            req.extend_from_slice(&b[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .unwrap();
        String::from_utf8(req).unwrap()
    });
    assert_eq!(
        http_request(addr, "GET", "/healthz", T),
        (200, "ok".to_string())
    );
    let req = server.join().unwrap();
    assert!(req.starts_with("GET /healthz HTTP/1.1\r\n"), "{req}");
    assert!(req.contains("Connection: close"), "{req}");

    // Nothing listening: status 0, no panic.
    let closed = support::free_port();
    let closed = std::net::SocketAddr::from(([127, 0, 0, 1], closed));
    assert_eq!(http_request(closed, "GET", "/", T).0, 0);
}
