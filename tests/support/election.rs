//! An election seen from outside: its Redis keys, a fence counter seeded before the first
//! acquire, which of a set of replicas leads (asked over their HTTP status), and its release
//! announcements.

use std::borrow::Borrow;
use std::time::Duration;

use leaderd::{LeaseKeys, LeaseSpec};

use serde_json::Value;

use super::redis::payload;
use super::{now_ms, wait_until, Daemon, RedisServer, RespConn, SLOW};

/// How often `wait_leader` asks.
const POLL: Duration = Duration::from_millis(25);

/// The Redis keys of election `name` (they depend on the name alone).
pub fn keys(name: &str) -> LeaseKeys {
    LeaseSpec::new(name, "x", Duration::from_secs(1)).keys()
}

/// Pretends election `name` already exists on `redis` (its fencing counter is there), so
/// that the first acquire is not quarantined for a lease duration.
pub fn seed_fence(redis: &RedisServer, name: &str) {
    assert_eq!(redis.cmd(&["SET", &keys(name).fence, "1000"]), "OK");
}

/// Whether `d`'s `GET /leader` says it leads right now.
pub fn is_leader(d: &Daemon) -> bool {
    d.status_doc().is_some_and(|doc| doc["is_leader"] == true)
}

/// The indexes of `0..n`.
pub fn all<D>(ds: &[D]) -> Vec<usize> {
    (0..ds.len()).collect()
}

/// The indexes of `ds` but `but`.
pub fn others<D>(ds: &[D], but: usize) -> Vec<usize> {
    (0..ds.len()).filter(|&i| i != but).collect()
}

/// The replicas among `among` that claim leadership right now.
pub fn claiming<D: Borrow<Daemon>>(ds: &[D], among: &[usize]) -> Vec<usize> {
    among
        .iter()
        .copied()
        .filter(|&i| is_leader(ds[i].borrow()))
        .collect()
}

/// The one replica among `among` that claims leadership, once exactly one does (bounded by
/// `timeout`; a panic naming them otherwise).
pub fn wait_leader<D: Borrow<Daemon>>(ds: &[D], among: &[usize], timeout: Duration) -> usize {
    wait_until(timeout, POLL, || match claiming(ds, among)[..] {
        [one] => Some(one),
        _ => None,
    })
    .unwrap_or_else(|| panic!("no single leader among {among:?} within {timeout:?}"))
}

/// Subscribes to election `name`'s release channel on `redis` (subscribed when this
/// returns); the thread returns the first `released` announcement and the wall time (unix
/// ms) it arrived, `None` if none came within `timeout` (or 16 other messages).
pub fn watch_release(
    redis: &RedisServer,
    name: &str,
    timeout: Duration,
) -> std::thread::JoinHandle<Option<(Value, u64)>> {
    let mut conn = RespConn::connect(redis.addr(), SLOW).expect("connect to Redis");
    conn.call(&["SUBSCRIBE", &keys(name).released])
        .expect("SUBSCRIBE");
    conn.set_timeout(timeout).expect("read timeout");
    std::thread::spawn(move || {
        for _ in 0..16 {
            let text = payload(conn.read_next().ok()?)?;
            let at = now_ms();
            let message: Value = serde_json::from_str(&text).unwrap_or_default();
            if message["event"] == "released" {
                return Some((message, at));
            }
        }
        None
    })
}

/// Whether election `name`'s lease exists on `redis` (held or quarantined).
pub fn lock_exists(redis: &RedisServer, name: &str) -> bool {
    redis.cmd(&["EXISTS", &keys(name).lock]) == "1"
}
