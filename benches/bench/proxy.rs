//! The leader-aware proxy's cost: added latency of a small request-response and throughput of
//! a large transfer, through leaderd's proxy (on the leader: to its own upstream) against a
//! direct connection and against `socat`, in the same run.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::stats::{f, summarize, Table};
use crate::support::{free_port, wait_until, Daemon, DaemonOpts, RedisServer};

type Json = serde_json::Map<String, serde_json::Value>;

const REQUEST: usize = 64;

/// An echo service (64-byte requests) and a sink that acknowledges the end of a transfer.
fn start_services() -> (u16, u16) {
    let echo = TcpListener::bind("127.0.0.1:0").unwrap();
    let sink = TcpListener::bind("127.0.0.1:0").unwrap();
    let ports = (
        echo.local_addr().unwrap().port(),
        sink.local_addr().unwrap().port(),
    );
    std::thread::spawn(move || {
        for conn in echo.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let _ = conn.set_nodelay(true);
                let mut buf = [0u8; REQUEST];
                while conn.read_exact(&mut buf).is_ok() {
                    if conn.write_all(&buf).is_err() {
                        break;
                    }
                }
            });
        }
    });
    std::thread::spawn(move || {
        for conn in sink.incoming().flatten() {
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = vec![0u8; 1 << 16];
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
                let _ = conn.write_all(b"k");
            });
        }
    });
    ports
}

fn round_trips(port: u16, n: usize) -> Vec<f64> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_nodelay(true).unwrap();
    let req = [7u8; REQUEST];
    let mut resp = [0u8; REQUEST];
    for _ in 0..n / 10 {
        c.write_all(&req).unwrap();
        c.read_exact(&mut resp).unwrap();
    }
    (0..n)
        .map(|_| {
            let t = Instant::now();
            c.write_all(&req).unwrap();
            c.read_exact(&mut resp).unwrap();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// MiB/s of sending `bytes` and getting the sink's acknowledgement.
fn transfer(port: u16, bytes: usize) -> f64 {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let chunk = vec![1u8; 1 << 16];
    let t = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        c.write_all(&chunk).unwrap();
        sent += chunk.len();
    }
    c.shutdown(Shutdown::Write).unwrap();
    let mut ack = [0u8; 1];
    c.read_exact(&mut ack).unwrap();
    sent as f64 / (1 << 20) as f64 / t.elapsed().as_secs_f64()
}

struct Socat(Child);

impl Drop for Socat {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn socat(target: u16) -> Option<(Socat, u16)> {
    let port = free_port();
    let child = Command::new("socat")
        .arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"))
        .arg(format!("TCP:127.0.0.1:{target},nodelay"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let up = wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
        TcpStream::connect(("127.0.0.1", port)).ok()
    });
    up.map(|_| (Socat(child), port))
}

/// A leaderd leading alone, its proxy in front of `upstream`; returns it and the proxy port.
fn leaderd(redis: &RedisServer, upstream: u16) -> (Daemon, u16) {
    let port = free_port();
    let mut o = DaemonOpts::new("bench-proxy", "a", &redis.url());
    o.extra_yaml = format!(
        "logging:\n  level: info\nproxy:\n  listen: \"127.0.0.1:{port}\"\n  upstream: \"127.0.0.1:{upstream}\"\n"
    );
    let d = Daemon::spawn(&o);
    wait_until(Duration::from_secs(15), Duration::from_millis(20), || {
        d.status_doc().filter(|doc| doc["is_leader"] == true)
    })
    .expect("leaderd leads");
    (d, port)
}

pub fn run(quick: bool, tables: &mut Vec<Table>, out: &mut Json) {
    let n = if quick { 5_000 } else { 50_000 };
    let bytes = if quick { 256 << 20 } else { 1 << 30 };
    let redis = RedisServer::start();
    let (echo, sink) = start_services();
    let (_echo_daemon, echo_proxy) = leaderd(&redis, echo);
    let mut lat = Table::new(
        "Proxy: added latency of a 64-byte request-response on loopback",
        &["path", "p50 us", "p99 us", "added p50 us", "added p99 us"],
    );
    let direct = summarize(&round_trips(echo, n));
    let mut row = |name: &str, s: super::stats::Summary| {
        lat.row(vec![
            name.into(),
            f(s.p50, 1),
            f(s.p99, 1),
            f(s.p50 - direct.p50, 1),
            f(s.p99 - direct.p99, 1),
        ]);
        out.insert(
            format!("proxy_rr_{name}"),
            json!({"p50_us": s.p50, "p99_us": s.p99}),
        );
    };
    row("direct", direct);
    row("leaderd", summarize(&round_trips(echo_proxy, n)));
    let socat_echo = socat(echo);
    match &socat_echo {
        Some((_, port)) => row("socat", summarize(&round_trips(*port, n))),
        None => lat.note("socat is not installed: its row is skipped (apt-get install socat)"),
    }
    lat.note(format!("{n} round trips per path on one connection after {} warm-up ones; target: leaderd adds <= 50 us at p50", n / 10));
    tables.push(lat);
    drop(socat_echo);

    let redis2 = RedisServer::start();
    let (_sink_daemon, sink_proxy) = leaderd(&redis2, sink);
    let mut thr = Table::new(
        &format!("Proxy: throughput of a {} MiB transfer", bytes >> 20),
        &["path", "MiB/s", "% of direct"],
    );
    let direct = transfer(sink, bytes);
    let mut row = |name: &str, mibs: f64| {
        thr.row(vec![name.into(), f(mibs, 0), f(100.0 * mibs / direct, 1)]);
        out.insert(format!("proxy_transfer_{name}"), json!({"mib_s": mibs}));
    };
    row("direct", direct);
    row("leaderd", transfer(sink_proxy, bytes));
    match socat(sink) {
        Some((_s, port)) => row("socat", transfer(port, bytes)),
        None => thr.note("socat is not installed: its row is skipped"),
    }
    thr.note("one connection, 64 KiB writes, timed until the sink acknowledges the end; target: >= 90 % of direct");
    tables.push(thr);
}
