//! The HTTP endpoints and their metrics without Redis, driven by a hand-held state channel:
//! probes, the status document, the event stream and `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;

use super::{serve, HttpContext, ReadyWhen};
use crate::daemon::metrics::Metrics;
use crate::daemon::state::samples::{
    assert_document_shape, follower, leader, with_phase, ME, NAME,
};
use crate::daemon::state::{Phase, Progress, Snapshot};

/// `promtool check metrics`, as the integration tests run it.
#[path = "../../../tests/support/tools.rs"]
#[allow(dead_code, unreachable_pub)]
mod tools;

// ---- a tiny HTTP/1.1 client ------------------------------------------------------------

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        let found = self
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name));
        found.map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn send_request(addr: SocketAddr, method: &str, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let mut stream = send_request(addr, method, path).await;
    let mut raw = Vec::new();
    let read = stream.read_to_end(&mut raw);
    timeout(Duration::from_secs(5), read)
        .await
        .unwrap()
        .unwrap();
    parse_reply(&String::from_utf8(raw).unwrap())
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path).await
}

fn parse_reply(raw: &str) -> Reply {
    let (head, body) = raw.split_once("\r\n\r\n").expect("a complete head");
    let mut lines = head.lines();
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut reply = Reply {
        status,
        headers,
        body: body.to_owned(),
    };
    if reply.header("transfer-encoding") == Some("chunked") {
        reply.body = dechunk(body);
    }
    reply
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

// ---- the server under test -------------------------------------------------------------

struct Server {
    addr: SocketAddr,
    tx: watch::Sender<Snapshot>,
    progress: Progress,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

async fn start(ready_when: ReadyWhen, renew_deadline: Duration, first: Snapshot) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = watch::channel(first);
    let progress = Progress::new();
    let metrics = Arc::new(Metrics::new(NAME, "9.9.9"));
    let ctx = HttpContext {
        name: NAME.into(),
        identity: ME.into(),
        ready_when,
        renew_deadline,
        state: rx,
        progress: progress.clone(),
        metrics: metrics.clone(),
        max_connections: 1024,
        candidates: None,
        shards: None,
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(listener, ctx, shutdown.clone()));
    Server {
        addr,
        tx,
        progress,
        metrics,
        shutdown,
        task,
    }
}

impl Server {
    async fn stop(self) {
        self.shutdown.cancel();
        let done = timeout(Duration::from_secs(5), self.task).await;
        done.expect("serve returns after shutdown")
            .unwrap()
            .unwrap();
    }
}

async fn default_server(first: Snapshot) -> Server {
    start(ReadyWhen::Leader, Duration::from_secs(10), first).await
}

// ---- HTTP tests ------------------------------------------------------------------------

#[tokio::test]
async fn healthz_turns_503_when_the_loop_is_stuck() {
    let server = start(ReadyWhen::Leader, Duration::from_millis(50), follower()).await;
    server.progress.touch();
    let ok = get(server.addr, "/healthz").await;
    assert_eq!((ok.status, ok.body.as_str()), (200, "ok"));
    tokio::time::sleep(Duration::from_millis(120)).await;
    let stuck = get(server.addr, "/healthz").await;
    assert_eq!((stuck.status, stuck.body.as_str()), (503, "stuck"));
    server.progress.touch();
    assert_eq!(get(server.addr, "/healthz").await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn readyz_follows_the_validity_without_a_new_state() {
    let server = default_server(follower()).await;
    let follower_reply = get(server.addr, "/readyz").await;
    assert_eq!(follower_reply.status, 503);
    assert_eq!(follower_reply.body, "not leader");

    let validity = Duration::from_millis(300);
    let expires = Instant::now() + validity;
    server.tx.send(leader(validity)).unwrap();
    let leading = get(server.addr, "/readyz").await;
    assert_eq!((leading.status, leading.body.as_str()), (200, "leader"));

    tokio::time::sleep_until(expires + Duration::from_millis(50)).await;
    assert_eq!(get(server.addr, "/readyz").await.status, 503);
    server.stop().await;
}

#[tokio::test]
async fn readyz_always_is_ready_between_start_and_stop() {
    let server = start(
        ReadyWhen::Always,
        Duration::from_secs(10),
        Snapshot::starting(true),
    )
    .await;
    assert_eq!(get(server.addr, "/readyz").await.status, 503);
    server.tx.send(follower()).unwrap();
    assert_eq!(get(server.addr, "/readyz").await.status, 200);
    server.tx.send(with_phase(Phase::Stopped)).unwrap();
    assert_eq!(get(server.addr, "/readyz").await.status, 503);
    server.stop().await;
}

#[tokio::test]
async fn leader_document_of_a_follower_has_nulls() {
    let server = default_server(follower()).await;
    let reply = get(server.addr, "/leader").await;
    assert_eq!(reply.status, 200);
    assert!(reply
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let doc = reply.json();
    assert_document_shape(&doc);
    assert_eq!(doc["state"], "follower");
    assert_eq!(doc["is_leader"], false);
    assert_eq!(doc["leader"], "pod-b");
    assert_eq!(doc["fence"], 3);
    for key in [
        "acquired_at",
        "acquired_at_ms",
        "lease_valid_until",
        "lease_valid_until_ms",
    ] {
        assert!(doc[key].is_null(), "{key} in {doc}");
    }
    assert_eq!(doc["healthy"], true);
    server.stop().await;
}

#[tokio::test]
async fn leader_document_of_a_valid_then_expired_leader() {
    let validity = Duration::from_millis(300);
    let expires = Instant::now() + validity;
    let server = default_server(leader(validity)).await;
    let doc = get(server.addr, "/leader").await.json();
    assert_document_shape(&doc);
    assert_eq!(doc["state"], "leader");
    assert_eq!(doc["is_leader"], true);
    assert_eq!(doc["leader"], ME);
    assert_eq!(doc["fence"], 7);
    assert!(doc["acquired_at"].as_str().unwrap().ends_with('Z'));
    let until = doc["lease_valid_until_ms"].as_u64().unwrap();
    assert!(until >= doc["acquired_at_ms"].as_u64().unwrap());

    tokio::time::sleep_until(expires + Duration::from_millis(50)).await;
    let doc = get(server.addr, "/leader").await.json();
    assert_eq!(doc["state"], "stepping_down");
    assert_eq!(doc["is_leader"], false);
    assert!(doc["lease_valid_until_ms"].is_null());
    server.stop().await;
}

#[tokio::test]
async fn root_names_the_leader_or_nobody() {
    let validity = Duration::from_millis(300);
    let expires = Instant::now() + validity;
    let server = default_server(Snapshot::starting(true)).await;
    let reply = get(server.addr, "/").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), serde_json::json!({ "name": "" }));

    server.tx.send(follower()).unwrap();
    assert_eq!(
        get(server.addr, "/").await.json(),
        serde_json::json!({ "name": "pod-b" })
    );

    server.tx.send(leader(validity)).unwrap();
    assert_eq!(
        get(server.addr, "/").await.json(),
        serde_json::json!({ "name": ME })
    );
    tokio::time::sleep_until(expires + Duration::from_millis(50)).await;
    assert_eq!(
        get(server.addr, "/").await.json(),
        serde_json::json!({ "name": "" })
    );
    server.stop().await;
}

#[tokio::test]
async fn unknown_paths_are_404_and_other_methods_405() {
    let server = default_server(follower()).await;
    assert_eq!(get(server.addr, "/nope").await.status, 404);
    assert_eq!(request(server.addr, "POST", "/leader").await.status, 405);
    assert_eq!(request(server.addr, "DELETE", "/healthz").await.status, 405);
    server.stop().await;
}

/// Reads from `stream` until `buf` holds `count` complete SSE events; returns their data.
async fn read_events(stream: &mut TcpStream, buf: &mut String, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let events = sse_events(buf);
        if events.len() >= count {
            return events;
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .expect("events in time")
            .unwrap();
        assert!(n > 0, "stream closed early: {buf}");
        buf.push_str(std::str::from_utf8(&chunk[..n]).unwrap());
    }
}

/// The `status` events' data in `raw` (chunk framing lines are not `data:` lines).
fn sse_events(raw: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut is_status = false;
    for line in raw.split(['\n', '\r']) {
        if line == "event: status" {
            is_status = true;
        } else if let Some(data) = line.strip_prefix("data: ").or(line.strip_prefix("data:")) {
            assert!(is_status, "data without `event: status`: {raw}");
            events.push(serde_json::from_str(data).unwrap());
            is_status = false;
        }
    }
    events
}

#[tokio::test]
async fn events_stream_the_document_then_every_change_until_shutdown() {
    let server = default_server(follower()).await;
    let mut stream = send_request(server.addr, "GET", "/events").await;
    let mut buf = String::new();
    let first = read_events(&mut stream, &mut buf, 1).await;
    assert!(buf.contains("text/event-stream"), "{buf}");
    assert_eq!(first[0]["state"], "follower");
    assert_document_shape(&first[0]);

    server.tx.send(leader(Duration::from_secs(30))).unwrap();
    let both = read_events(&mut stream, &mut buf, 2).await;
    assert_eq!(both[1]["state"], "leader");
    assert_eq!(both[1]["is_leader"], true);

    server.shutdown.cancel();
    let mut rest = Vec::new();
    let read = stream.read_to_end(&mut rest);
    timeout(Duration::from_secs(5), read)
        .await
        .expect("the stream ends at shutdown")
        .unwrap();
    server.stop().await;
}

#[tokio::test]
async fn events_report_the_end_of_validity() {
    let server = default_server(leader(Duration::from_millis(200))).await;
    let mut stream = send_request(server.addr, "GET", "/events").await;
    let mut buf = String::new();
    let events = read_events(&mut stream, &mut buf, 2).await;
    assert_eq!(events[0]["is_leader"], true);
    assert_eq!(events[1]["is_leader"], false);
    assert_eq!(events[1]["state"], "stepping_down");
    server.stop().await;
}

const SERIES: [&str; 12] = [
    "leaderd_is_leader",
    "leaderd_leader_transitions_total",
    "leaderd_acquire_attempts_total",
    "leaderd_renewals_total",
    "leaderd_renew_duration_seconds_bucket",
    "leaderd_lease_remaining_seconds",
    "leaderd_fence",
    "leaderd_step_downs_total",
    "leaderd_redis_errors_total",
    "leaderd_build_info",
    "leader_election_master_status",
    "leaderd_healthy",
];

fn series_value(text: &str, series: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with(series))?;
    line.rsplit(' ').next()?.parse().ok()
}

#[tokio::test]
async fn metrics_carry_every_series_and_follow_the_validity() {
    let validity = Duration::from_millis(300);
    let expires = Instant::now() + validity;
    let server = default_server(leader(validity)).await;
    server
        .metrics
        .renewal(crate::election::RenewResult::Ok, Duration::from_millis(3));
    let reply = get(server.addr, "/metrics").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = reply.body;
    for series in SERIES {
        assert!(
            text.contains(&format!("\n{series}{{")),
            "{series} in\n{text}"
        );
    }
    assert!(text.contains("\nprocess_cpu_seconds_total{"), "{text}");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains("name=\"orders\""), "unlabelled: {line}");
    }
    for labels in [
        r#"result="acquired""#,
        r#"result="lost""#,
        r#"reason="child_exit""#,
        r#"kind="connection""#,
        r#"version="9.9.9""#,
    ] {
        assert!(text.contains(labels), "{labels} in\n{text}");
    }
    let leading = r#"leaderd_is_leader{name="orders"}"#;
    assert_eq!(series_value(&text, leading), Some(1.0));
    let fence = series_value(&text, r#"leaderd_fence{name="orders"}"#);
    assert_eq!(fence, Some(7.0));
    let remaining = series_value(&text, r#"leaderd_lease_remaining_seconds{name="orders"}"#);
    assert!(remaining.unwrap() > 0.0);
    tools::promtool_accepts(&text, "/metrics");

    tokio::time::sleep_until(expires + Duration::from_millis(50)).await;
    let text = get(server.addr, "/metrics").await.body;
    assert_eq!(series_value(&text, leading), Some(0.0));
    let status = r#"leader_election_master_status{name="orders"}"#;
    assert_eq!(series_value(&text, status), Some(0.0));
    let fence = series_value(&text, r#"leaderd_fence{name="orders"}"#);
    assert_eq!(fence, Some(0.0));
    server.stop().await;
}
