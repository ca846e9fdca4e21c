//! The proxy's slots always come back: an upstream that accepts and then never reads nor
//! closes cannot keep connections open past `proxy.idle_timeout` (no bytes either way) or past
//! 60 s once one side has closed, bytes passing or not.
//! A real leaderd over a real redis-server, real sockets.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{free_port, wait_until, Daemon, DaemonOpts, RedisServer};

const STEP: Duration = Duration::from_millis(20);

/// An upstream that greets each connection with `hi\n`, then never reads and never closes;
/// with `chatty` it also writes a byte every 100 ms for as long as it can.
fn upstream(chatty: bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.write_all(b"hi\n");
            if chatty {
                let mut writer = conn.try_clone().unwrap();
                std::thread::spawn(move || {
                    while writer.write_all(b".").is_ok() {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            }
            held.push(conn); // never read, never closed
        }
    });
    port
}

/// A leader whose proxy (on the returned port) forwards to `upstream_port`.
fn leader(name: &str, redis: &RedisServer, upstream_port: u16, proxy_yaml: &str) -> (Daemon, u16) {
    let proxy_port = free_port();
    let mut o = DaemonOpts::new(name, "a", &redis.url());
    o.extra_yaml = format!(
        "proxy:\n  listen: \"127.0.0.1:{proxy_port}\"\n  upstream: \"127.0.0.1:{upstream_port}\"\n{proxy_yaml}"
    );
    let d = Daemon::spawn(&o);
    wait_until(Duration::from_secs(15), STEP, || {
        d.status_doc()
            .filter(|doc| doc["is_leader"] == Value::Bool(true))
    })
    .expect("leads");
    (d, proxy_port)
}

/// Connects through the proxy; the stream once the upstream's greeting has arrived, None
/// when the proxy closed it at once (refused).
fn served(port: u16) -> Option<TcpStream> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    let mut greeting = [0u8; 3];
    c.read_exact(&mut greeting).ok()?;
    (&greeting == b"hi\n").then_some(c)
}

/// Reads until end of file (or an error: the proxy closed) or until `limit` has passed;
/// how long that took.
fn until_closed(mut c: TcpStream, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    while let Some(left) = limit.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) {
        c.set_read_timeout(Some(left)).unwrap();
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    start.elapsed()
}

fn active(d: &Daemon, name: &str) -> String {
    let metrics = d.get("/metrics").1;
    let prefix = format!("leaderd_proxy_active_connections{{name=\"{name}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .unwrap_or_else(|| panic!("no active gauge in {metrics}"))
}

#[test]
fn clients_that_open_and_close_cannot_lock_others_out() {
    let redis = RedisServer::start();
    let (d, port) = leader(
        "slots",
        &redis,
        upstream(false),
        "  max_connections: 5\n  idle_timeout: 1s\n",
    );
    for _ in 0..5 {
        let mut c = served(port).expect("a slot is free");
        c.write_all(b"never read\n").unwrap();
        drop(c); // the client closes; the upstream keeps its side open
    }
    let closed = Instant::now();
    // Every slot is back within the idle timeout (1 s): nothing passes after the close.
    let back = wait_until(Duration::from_secs(4), STEP, || {
        (active(&d, "slots") == "0").then_some(())
    });
    assert!(back.is_some(), "slots still held: {}", active(&d, "slots"));
    println!("slots back {:?} after the clients closed", closed.elapsed());
    let again: Vec<TcpStream> = (0..5)
        .map(|i| served(port).unwrap_or_else(|| panic!("connection {i} refused")))
        .collect();
    assert!(served(port).is_none(), "a sixth past max_connections: 5");
    drop(again);
}

#[test]
fn an_idle_connection_closes_at_idle_timeout_and_a_busy_one_stays() {
    let redis = RedisServer::start();
    let yaml = "  idle_timeout: 1500ms\n";
    let (_quiet_d, quiet) = leader("idle-quiet", &redis, upstream(false), yaml);
    let (_busy_d, busy) = leader("idle-busy", &redis, upstream(true), yaml);
    let chatting = served(busy).expect("served");
    let idle = served(quiet).expect("served");

    let took = until_closed(idle, Duration::from_secs(6));
    assert!(
        took >= Duration::from_millis(1200) && took < Duration::from_secs(5),
        "the idle connection closed after {took:?}"
    );
    // Bytes every 100 ms: open well past the idle timeout.
    let took = until_closed(chatting, Duration::from_secs(4));
    assert!(
        took >= Duration::from_secs(4),
        "a busy connection closed after {took:?}"
    );
}

/// Once the client has half-closed, the other side is given 60 s, then the connection is
/// closed although bytes still pass: an idle timeout shorter than that does not cut a
/// connection that is not idle.
#[test]
fn a_half_closed_connection_gets_60_s_then_closes_even_while_bytes_pass() {
    let redis = RedisServer::start();
    let (_d, port) = leader("half", &redis, upstream(true), "  idle_timeout: 1500ms\n");
    let c = served(port).expect("served");
    c.shutdown(Shutdown::Write).unwrap(); // the client is done sending, still reads
    let took = until_closed(c, Duration::from_secs(75));
    assert!(
        took >= Duration::from_secs(58) && took < Duration::from_secs(66),
        "the half-closed connection closed after {took:?}"
    );
}

/// `idle_timeout: 0`: an idle connection is never closed for it (here: open after 4 s with
/// no bytes either way), and its slot stays taken.
#[test]
fn idle_timeout_0_never_closes_an_idle_connection() {
    let redis = RedisServer::start();
    let (d, port) = leader("idle-never", &redis, upstream(false), "  idle_timeout: 0\n");
    let c = served(port).expect("served");
    let took = until_closed(c.try_clone().unwrap(), Duration::from_secs(4));
    assert!(took >= Duration::from_secs(4), "closed after {took:?}");
    assert_eq!(active(&d, "idle-never"), "1");
    drop(c);
}
