//! `Replicas`: real `leaderd` processes of one election over one real redis-server
//! (optionally behind a fault-injecting proxy), for the tests and the benchmarks alike; and
//! what they ask of them: who leads over HTTP, who holds the lease as Redis has it, the
//! release channel's subscribers, the next term, the end-of-test checks over every log.

use std::time::{Duration, Instant};

use leaderd::LeaseKeys;
use serde_json::Value;

use super::logs::{acquired_at, check_all_logs};
use super::{keys, seed_fence, wait_until, Daemon, DaemonOpts, Proxy, RedisServer, Term, POLL};

/// Lease duration of every test (the support default): 2s.
pub const LEASE: Duration = Duration::from_secs(2);
/// `lease_duration * 0.01 + 2ms`.
pub const DRIFT_MS: u64 = 22;

/// The identities [`Replicas::start`] gives.
pub const IDENTITIES: [&str; 3] = ["replica-a", "replica-b", "replica-c"];

/// A real redis-server, an optional proxy in front of it, and replicas of one election.
pub struct Replicas {
    pub name: String,
    pub daemons: Vec<Daemon>,
    pub proxy: Option<Proxy>,
    pub redis: RedisServer,
    /// Every replica's options but its identity.
    template: DaemonOpts,
}

impl Replicas {
    /// A fresh Redis (behind a proxy when `via_proxy`) and no replica yet; each one spawned
    /// later runs the test defaults of `DaemonOpts` changed by `configure`.
    pub fn empty(name: &str, via_proxy: bool, configure: impl FnOnce(&mut DaemonOpts)) -> Self {
        let redis = RedisServer::start();
        let proxy = via_proxy.then(|| Proxy::start(redis.addr()));
        let url = proxy.as_ref().map_or_else(|| redis.url(), Proxy::url);
        let mut template = DaemonOpts::new(name, "", &url);
        configure(&mut template);
        Replicas {
            name: name.to_string(),
            daemons: Vec::new(),
            proxy,
            redis,
            template,
        }
    }

    /// `n` replicas (identities `replica-a`, ...) of election `name` on a fresh Redis, each
    /// with `extra_yaml` merged into its config; through a proxy when `via_proxy`.
    pub fn start(name: &str, n: usize, via_proxy: bool, extra_yaml: &str) -> Self {
        let mut r = Self::empty(name, via_proxy, |o| o.extra_yaml = extra_yaml.to_string());
        for id in &IDENTITIES[..n] {
            r.spawn_as(id);
        }
        r
    }

    /// No replica yet, on a Redis whose election already has a fence counter (see
    /// [`seed_fence`]): the state of a running election, not a brand-new one.
    pub fn seeded(name: &str, configure: impl FnOnce(&mut DaemonOpts)) -> Self {
        let r = Self::empty(name, false, configure);
        seed_fence(&r.redis, name);
        r
    }

    /// The options replica `identity` runs with.
    pub fn opts(&self, identity: &str) -> DaemonOpts {
        DaemonOpts {
            identity: identity.to_string(),
            ..self.template.clone()
        }
    }

    /// Starts one more replica, `identity`; returns its index.
    pub fn spawn_as(&mut self, identity: &str) -> usize {
        let d = Daemon::spawn(&self.opts(identity));
        self.daemons.push(d);
        self.daemons.len() - 1
    }

    /// Starts one more replica, `r<index>`.
    pub fn spawn(&mut self) -> usize {
        self.spawn_as(&format!("r{}", self.daemons.len()))
    }

    pub fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("replicas started with a proxy")
    }

    /// The election's Redis keys.
    pub fn keys(&self) -> LeaseKeys {
        keys(&self.name)
    }

    pub fn identity(&self, i: usize) -> &str {
        self.daemons[i].identity()
    }

    pub fn all(&self) -> Vec<usize> {
        super::election::all(&self.daemons)
    }

    pub fn others(&self, but: usize) -> Vec<usize> {
        super::election::others(&self.daemons, but)
    }

    /// The replicas among `among` whose HTTP claims leadership right now.
    pub fn claiming(&self, among: &[usize]) -> Vec<usize> {
        super::election::claiming(&self.daemons, among)
    }

    /// The end-of-test checks over every replica's log (see [`check_all_logs`]).
    pub fn check_safety(&self) -> Vec<Term> {
        check_all_logs(&self.daemons)
    }

    pub fn logs(&self) -> Vec<(String, Vec<Value>)> {
        self.daemons.iter().map(Daemon::safety_log).collect()
    }
}

/// Leadership as every replica's HTTP tells it.
impl Replicas {
    /// The one replica among `among` that claims leadership over HTTP while every other one
    /// of them names it as leader in `GET /leader` and `GET /`; `None` otherwise.
    pub fn agreed_leader(&self, among: &[usize]) -> Option<usize> {
        let docs: Vec<(usize, Value)> = among
            .iter()
            .map(|&i| Some((i, self.daemons[i].status_doc()?)))
            .collect::<Option<_>>()?;
        let leaders: Vec<usize> = docs
            .iter()
            .filter(|(_, d)| d["is_leader"] == Value::Bool(true))
            .map(|(i, _)| *i)
            .collect();
        let [leader] = leaders[..] else {
            // Answers come one after another, so two claims may both be true at their own
            // moments; but never with overlapping validity.
            let claims: Vec<&Value> = docs
                .iter()
                .filter(|(i, _)| leaders.contains(i))
                .map(|(_, d)| d)
                .collect();
            for a in &claims {
                for b in &claims {
                    let (a_from, b_to) = (&a["acquired_at_ms"], &b["lease_valid_until_ms"]);
                    if a_from.as_u64() > b["acquired_at_ms"].as_u64() {
                        assert!(
                            b_to.as_u64() <= a_from.as_u64(),
                            "two overlapping claims over HTTP: {claims:#?}"
                        );
                    }
                }
            }
            return None;
        };
        let who = self.identity(leader);
        for (i, doc) in &docs {
            if doc["leader"].as_str() != Some(who) {
                return None;
            }
            let (code, body) = self.daemons[*i].get("/");
            let root: Value = serde_json::from_str(&body).ok()?;
            if code != 200 || root["name"].as_str() != Some(who) {
                return None;
            }
        }
        Some(leader)
    }

    /// Waits (bounded) until `agreed_leader(among)` holds; panics with the documents if not.
    pub fn wait_agreed_leader(&self, among: &[usize], timeout: Duration) -> usize {
        wait_until(timeout, POLL, || self.agreed_leader(among)).unwrap_or_else(|| {
            let docs: Vec<_> = among
                .iter()
                .map(|&i| self.daemons[i].status_doc())
                .collect();
            panic!("no agreed leader among {among:?} within {timeout:?}: {docs:#?}")
        })
    }
}

/// A term that began.
#[derive(Debug, Clone, Copy)]
pub struct NewTerm {
    pub replica: usize,
    pub fence: u64,
    /// From the winner's `acquired` line: when it received the grant.
    pub acquired_at_ms: u64,
    /// From the lease in Redis: when the winner sent the acquire that was granted.
    pub sent_ms: u64,
}

/// The lease as Redis has it, asked of the server directly (not through the proxy).
impl Replicas {
    fn ask(&self, args: &[&str]) -> Option<String> {
        self.redis.try_cmd(args, Duration::from_secs(2)).ok()
    }

    /// `(replica, fence)` of the lease's holder; `None` when vacant or quarantined.
    pub fn holder(&self) -> Option<(usize, u64)> {
        let out = self.ask(&["HMGET", &self.keys().lock, "holder", "fence"])?;
        let mut lines = out.lines();
        let holder = lines.next()?;
        let replica = self.daemons.iter().position(|d| d.identity() == holder)?;
        Some((replica, lines.next()?.parse().ok()?))
    }

    pub fn pttl_ms(&self) -> Option<i64> {
        self.ask(&["PTTL", &self.keys().lock])?.parse().ok()
    }

    /// Subscribers of the release channel.
    pub fn subscribers(&self) -> usize {
        self.ask(&["PUBSUB", "NUMSUB", &self.keys().released])
            .and_then(|s| s.lines().nth(1).and_then(|n| n.parse().ok()))
            .unwrap_or(0)
    }

    /// The lease's `acquired_at_ms` field: the winner's wall clock when it *sent* the
    /// acquire that Redis granted.
    pub fn lease_sent_ms(&self) -> Option<u64> {
        self.ask(&["HGET", &self.keys().lock, "acquired_at_ms"])?
            .parse()
            .ok()
    }

    /// Waits until every running replica is subscribed and a leader holds the lease.
    pub fn wait_settled(&mut self, timeout: Duration) -> (usize, u64) {
        let deadline = Instant::now() + timeout;
        loop {
            let running = self
                .daemons
                .iter_mut()
                .map(|d| d.is_running())
                .filter(|r| *r)
                .count();
            if let Some(h) = self.holder() {
                if self.subscribers() == running && self.daemons[h.0].is_running() {
                    return h;
                }
            }
            assert!(
                Instant::now() < deadline,
                "election {} did not settle within {timeout:?}: holder {:?}, {} of {running} subscribed",
                self.name,
                self.holder(),
                self.subscribers()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for a term other than `old_fence`, and reads the winner's `acquired` line.
    pub fn wait_new_term(&self, old_fence: u64, step: Duration, timeout: Duration) -> NewTerm {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((idx, fence)) = self.holder().filter(|h| h.1 != old_fence) {
                let sent_ms = self.lease_sent_ms().unwrap_or(0);
                while Instant::now() < deadline {
                    if let Some(acquired_at_ms) = acquired_at(&self.daemons[idx], fence) {
                        return NewTerm {
                            replica: idx,
                            fence,
                            acquired_at_ms,
                            sent_ms,
                        };
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            assert!(
                Instant::now() < deadline,
                "no new term after fence {old_fence} within {timeout:?}"
            );
            std::thread::sleep(step);
        }
    }
}
