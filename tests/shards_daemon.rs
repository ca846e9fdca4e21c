//! `leaderd run` in a sharded election (README, "Shards") against a real redis-server and
//! real leaderd processes: three replicas and 16 shards settle to exactly the assignment, a
//! fourth joins and gets its share, SIGTERM moves every shard of the leaver at once, SIGKILL
//! moves each after its validity; no two claims of one shard overlap in the replicas' logs.

mod support;

use std::time::{Duration, Instant};

use leaderd::shard::Assignment;
use nix::sys::signal::Signal;
use serde_json::Value;
use support::logs::{assert_identity_conflict, wait_event};
use support::metrics::metric;
use support::safety::{check_logs_with, Fences};
use support::shards::{owned_in_doc, owners, shard_rows as shards, wait_assigned};
use support::{check_logs, wait_until, Daemon, DaemonOpts, RedisServer};

const NAME: &str = "sh-daemon";
const SHARDS: u32 = 16;
/// How long any settling may take: heartbeats to be seen and settled, then the moves.
const SETTLE: Duration = Duration::from_secs(15);

fn replica(redis: &RedisServer, id: &str) -> Daemon {
    let mut opts = DaemonOpts::new(NAME, id, &redis.url());
    opts.extra_yaml = format!("election:\n  shards: {SHARDS}\n");
    Daemon::spawn(&opts)
}

/// A replica whose `redis` section is `redis_yaml` (a mode with its addresses).
fn replica_over(redis_yaml: &str, id: &str) -> Daemon {
    let mut opts = DaemonOpts::new(NAME, id, "");
    opts.extra_yaml = format!("{redis_yaml}election:\n  shards: {SHARDS}\n");
    Daemon::spawn(&opts)
}

/// A replica over the Redlock of `nodes`.
fn redlock_replica(nodes: &[RedisServer], id: &str) -> Daemon {
    let urls: Vec<String> = nodes.iter().map(|n| format!("\"{}\"", n.url())).collect();
    let yaml = format!("redis:\n  mode: redlock\n  urls: [{}]\n", urls.join(", "));
    replica_over(&yaml, id)
}

/// Two settled replicas `r1` and `r2`: SIGTERM of r2 moves its shards to r1, both exit 0,
/// and their logs show no overlapping claims and a term for every shard and every move.
fn sigterm_moves_then_both_stop(r: &mut [Daemon]) {
    let leaving = owned_in_doc(&r[1]);
    assert!(!leaving.is_empty(), "r2 owns no shard");
    r[1].signal(Signal::SIGTERM);
    moved(&r[0], &leaving, &["r1"], Duration::from_secs(5));
    assert_eq!(r[1].wait_exit(Duration::from_secs(10)), Some(0));
    r[0].signal(Signal::SIGTERM);
    assert_eq!(r[0].wait_exit(Duration::from_secs(10)), Some(0));

    let logs: Vec<_> = r.iter().map(Daemon::safety_log).collect();
    let terms = check_logs(&logs).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
    assert!(
        terms.len() >= SHARDS as usize + leaving.len(),
        "{} terms",
        terms.len()
    );
}

/// Waits until the shards' owners are exactly `expected`'s targets (read from `d`).
fn settle_to(d: &Daemon, members: &[&str]) -> Assignment {
    let step = Duration::from_millis(50);
    wait_assigned(d, NAME, SHARDS, members, step, SETTLE).unwrap_or_else(|last| {
        panic!("not settled to the assignment of {members:?} within {SETTLE:?}: last {last:?}")
    })
}

/// Waits until every shard in `moving` is owned by one of `others` (read from `d`); returns
/// how long it took.
fn moved(d: &Daemon, moving: &[u64], others: &[&str], within: Duration) -> Duration {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < within {
        if let Some(o) = owners(d) {
            if moving
                .iter()
                .all(|s| o.get(s).is_some_and(|id| others.contains(&id.as_str())))
            {
                return start.elapsed();
            }
            last = Some(o);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("shards {moving:?} not owned by {others:?} within {within:?}: last {last:?}");
}

#[test]
fn replicas_settle_share_with_a_newcomer_and_take_over_a_leaver() {
    let redis = RedisServer::start();
    let mut r: Vec<Daemon> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| replica(&redis, id))
        .collect();
    let expected = settle_to(&r[0], &["r1", "r2", "r3"]);

    // Each replica publishes what it owns, and leads while it owns a shard.
    for d in &r {
        let mine: Vec<u64> = expected
            .shards_of(d.identity())
            .into_iter()
            .map(u64::from)
            .collect();
        // Redis shows a grant before the replica has read its reply and published it: the
        // document follows within moments, not at the same instant.
        let step = Duration::from_millis(10);
        wait_until(Duration::from_secs(1), step, || {
            (owned_in_doc(d) == mine).then_some(())
        });
        assert_eq!(owned_in_doc(d), mine, "{}", d.identity());
        let doc = d.status_doc().expect("doc");
        assert_eq!(doc["shards"]["count"], SHARDS);
        assert_eq!(
            (doc["state"].as_str(), doc["is_leader"].as_bool()),
            (Some("leader"), Some(true))
        );
        assert!(doc["leader"].is_null() && doc["fence"].is_null(), "{doc}");
        assert_eq!(d.get("/"), (200, r#"{"name":""}"#.to_owned()));
        assert_eq!(d.get("/readyz").0, 200);
        let metrics = d.get("/metrics").1;
        let line = format!("leaderd_shards_owned{{name=\"{NAME}\"}} {}", mine.len());
        assert!(metrics.contains(&line), "{line} missing");
        assert!(metrics.contains(&format!("leaderd_is_leader{{name=\"{NAME}\"}} 1")));
    }
    // Any replica's GET /shards gives every shard its target.
    let rows = shards(&r[1]).expect("GET /shards");
    assert_eq!(rows.len(), SHARDS as usize);
    for (s, _, target) in rows {
        assert_eq!(target.as_deref(), expected.target(s as u32));
    }

    // `leaderd status`: the count line, then each candidate with what it owns; exit 0.
    let out = r[0].cli(&["status"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut lines = out.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(format!("{NAME}: 16 shards, 3 owners, 0 unowned").as_str())
    );
    for id in ["r1", "r2", "r3"] {
        let mine: Vec<String> = expected.shards_of(id).iter().map(u32::to_string).collect();
        let owns = format!("owns {}: {}", mine.len(), mine.join(","));
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&format!("  {id} ")) && l.ends_with(&owns)),
            "{id} {owns}: {}",
            out.stdout
        );
    }
    let out = r[0].cli(&["status", "--json"]);
    let doc: Value = serde_json::from_str(out.stdout.trim()).expect("status --json");
    assert_eq!(
        doc["shards"].as_array().map(Vec::len),
        Some(SHARDS as usize)
    );
    // It keeps one lease's keys: held while every shard is owned, no one holder or fence.
    assert_eq!((out.code, doc["state"].as_str()), (Some(0), Some("held")));
    for key in ["holder", "fence", "remaining_ms"] {
        assert!(doc.get(key).is_some_and(Value::is_null), "{key}: {doc}");
    }
    // `leaderd handover`: a usage error.
    let out = r[0].cli(&["handover"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("the assignment decides") && out.stderr.lines().count() == 1,
        "{out:?}"
    );

    // A fourth joins and gets its share.
    r.push(replica(&redis, "r4"));
    let four = settle_to(&r[0], &["r1", "r2", "r3", "r4"]);
    assert!(!four.shards_of("r4").is_empty());

    // SIGTERM: every shard of r4 moves at once (well before its lease could expire).
    let leaving: Vec<u64> = owned_in_doc(&r[3]);
    assert!(!leaving.is_empty());
    r[3].signal(Signal::SIGTERM);
    let took = moved(&r[0], &leaving, &["r1", "r2", "r3"], Duration::from_secs(2));
    assert!(
        took < Duration::from_millis(1500),
        "SIGTERM moves took {took:?}"
    );
    assert_eq!(r[3].wait_exit(Duration::from_secs(10)), Some(0));

    // SIGKILL: every shard of r3 is taken again (each after its validity: the checker).
    settle_to(&r[0], &["r1", "r2", "r3"]);
    let dead: Vec<u64> = owned_in_doc(&r[2]);
    r[2].kill();
    moved(&r[0], &dead, &["r1", "r2"], SETTLE);

    for d in &r[..2] {
        d.signal(Signal::SIGTERM);
    }
    for d in &mut r[..2] {
        assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    }
    // Nobody left: every shard unowned, exit 3.
    let out = r[0].cli(&["status"]);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(
        out.stdout
            .starts_with(&format!("{NAME}: 16 shards, 0 owners, 16 unowned\n")),
        "{out:?}"
    );
    let out = r[0].cli(&["status", "--json"]);
    let doc: Value = serde_json::from_str(out.stdout.trim()).expect("status --json");
    assert_eq!((out.code, doc["state"].as_str()), (Some(3), Some("vacant")));

    let logs: Vec<_> = r.iter().map(Daemon::safety_log).collect();
    let terms = check_logs(&logs).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
    let per_shard = terms.iter().filter(|t| t.shard.is_some()).count();
    // The first terms, r4's share taken and given back, r3's taken again.
    let least = SHARDS as usize + 2 * leaving.len() + dead.len();
    assert!(
        per_shard >= least,
        "only {per_shard} shard terms, want >= {least}"
    );
    let moves: Vec<_> = r[0].events_named("stepped_down");
    assert!(
        moves
            .iter()
            .all(|e| e["shard"].is_u64() && e["reason"].is_string()),
        "{moves:?}"
    );
}

/// Over a Redlock of 3 nodes: settled to the assignment; a node killed changes no owner and
/// no fence; SIGTERM moves every shard of the leaver at once, SIGKILL each after its
/// validity; no two claims of one shard overlap, each shard's fences increase.
#[test]
fn redlock_replicas_settle_keep_their_shards_without_a_node_and_take_over_leavers() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let ids = ["r1", "r2", "r3"];
    let mut r: Vec<Daemon> = ids.iter().map(|id| redlock_replica(&nodes, id)).collect();
    settle_to(&r[0], &ids);
    let out = r[0].cli(&["status"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let fences = |d: &Daemon| d.status_doc().expect("doc")["shards"]["owned"].clone();
    let before: Vec<Value> = r.iter().map(fences).collect();

    nodes[2].stop();
    std::thread::sleep(Duration::from_secs(3)); // past every shard's validity of before
    let after: Vec<Value> = r.iter().map(fences).collect();
    let shards_of = |v: &[Value]| -> Vec<(u64, u64)> {
        let owned = v
            .iter()
            .flat_map(|o| o.as_array().cloned().unwrap_or_default());
        owned
            .map(|o| {
                (
                    o["shard"].as_u64().unwrap_or(0),
                    o["fence"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    };
    assert_eq!(
        shards_of(&after),
        shards_of(&before),
        "a dead node moved a shard"
    );
    assert_eq!(shards_of(&after).len(), SHARDS as usize);
    assert!(r.iter().all(|d| d.events_named("stepped_down").is_empty()));
    nodes[2].start_again();

    let leaving = owned_in_doc(&r[2]);
    r[2].signal(Signal::SIGTERM);
    let took = moved(&r[0], &leaving, &["r1", "r2"], Duration::from_secs(2));
    assert!(
        took < Duration::from_millis(1500),
        "SIGTERM moves took {took:?}"
    );
    assert_eq!(r[2].wait_exit(Duration::from_secs(10)), Some(0));
    settle_to(&r[0], &["r1", "r2"]);

    let dead = owned_in_doc(&r[1]);
    r[1].kill();
    moved(&r[0], &dead, &["r1"], SETTLE);
    r[0].signal(Signal::SIGTERM);
    assert_eq!(r[0].wait_exit(Duration::from_secs(10)), Some(0));

    // Each node numbers terms with its own counter and a term's fence is its majority's
    // highest, so two shards' terms may share a fence; per shard they strictly increase.
    let logs: Vec<_> = r.iter().map(Daemon::safety_log).collect();
    let terms = check_logs_with(&logs, Fences::PerLease)
        .unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
    let least = SHARDS as usize + leaving.len() + dead.len();
    assert!(
        terms.len() >= least,
        "only {} shard terms, want >= {least}",
        terms.len()
    );
}

#[test]
fn proxy_is_refused_with_shards() {
    let redis = RedisServer::start();
    let mut opts = DaemonOpts::new(NAME, "r1", &redis.url());
    opts.extra_yaml = format!("election:\n  shards: {SHARDS}\nproxy:\n  listen: 127.0.0.1:0\n");
    let mut d = Daemon::spawn(&opts);
    assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(2));
    assert!(
        d.log().contains("the proxy is not shard-aware"),
        "{}",
        d.log()
    );
}

/// The value of `metric{name=NAME, label=value}` on `d`'s `/metrics`.
fn counted(d: &Daemon, metric_name: &str, label: &str, value: &str) -> f64 {
    let text = d.get("/metrics").1;
    metric(&text, metric_name, &[("name", NAME), (label, value)]).unwrap_or(f64::NAN)
}

/// `leaderd_leader_transitions_total` of `d`, summed over `began`.
fn transitions(d: &Daemon) -> f64 {
    let series = support::metrics::parse_metrics(&d.get("/metrics").1);
    let terms = series
        .into_iter()
        .filter(|(m, _, _)| m == "leaderd_leader_transitions_total");
    terms.map(|(_, _, v)| v).sum()
}

#[test]
fn sigusr1_hands_every_shard_over_and_sits_out_a_lease() {
    let redis = RedisServer::start();
    let r: Vec<Daemon> = ["r1", "r2"].iter().map(|id| replica(&redis, id)).collect();
    settle_to(&r[0], &["r1", "r2"]);
    let mine = owned_in_doc(&r[0]);
    assert!(!mine.is_empty());
    let handovers =
        |d: &Daemon| counted(d, "leaderd_leader_transitions_total", "began", "handover");
    let before = handovers(&r[1]);
    r[0].signal(Signal::SIGUSR1);
    moved(&r[1], &mine, &["r2"], Duration::from_secs(1));
    assert!(owned_in_doc(&r[0]).is_empty());
    let yields = r[0].events_named("stepped_down");
    let reasons: Vec<_> = yields.iter().map(|e| e["reason"].as_str()).collect();
    assert_eq!(reasons, vec![Some("yield"); mine.len()]);
    // The per-term counters count shard terms: r1's step-downs, r2's terms begun by handover
    // (a reply's handling after Redis shows the move), and every term logged.
    let n = mine.len() as f64;
    let yielded = counted(&r[0], "leaderd_step_downs_total", "reason", "yield");
    assert_eq!(yielded, n);
    let took = || handovers(&r[1]) - before;
    let step = Duration::from_millis(20);
    wait_until(Duration::from_secs(2), step, || (took() == n).then_some(()));
    assert_eq!(took(), n, "r2's terms begun by handover");
    // Each attempt and each renew call counted too (r2 renews within a retry_period).
    let attempts = counted(
        &r[1],
        "leaderd_acquire_attempts_total",
        "result",
        "acquired",
    );
    assert!(attempts >= n, "{attempts} attempts counted");
    let renewed = || counted(&r[1], "leaderd_renewals_total", "result", "ok");
    let renews = wait_until(Duration::from_secs(2), step, || {
        (renewed() >= 1.0).then_some(())
    });
    assert!(renews.is_some(), "no renewal counted");
    for d in &r {
        let logged = || d.events_named("acquired").len() as f64;
        let agree = || (transitions(d) == logged()).then_some(());
        let agreed = wait_until(Duration::from_secs(2), step, agree);
        let (began, logged) = (transitions(d), logged());
        assert!(
            agreed.is_some(),
            "{}: {began} terms counted, {logged} logged",
            d.identity()
        );
    }
    // Still sitting out well within one lease (2 s), back with its share after it.
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        owned_in_doc(&r[0]).is_empty(),
        "took a shard while sitting out"
    );
    settle_to(&r[0], &["r1", "r2"]);
    let logs: Vec<_> = r.iter().map(Daemon::safety_log).collect();
    check_logs(&logs).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
}

/// A replica of `NAME` with 16 shards and at most 2 of them.
fn bounded_replica(redis: &RedisServer, id: &str) -> Daemon {
    let mut opts = DaemonOpts::new(NAME, id, &redis.url());
    opts.extra_yaml = format!("election:\n  shards: {SHARDS}\n  max_shards_per_replica: 2\n");
    Daemon::spawn(&opts)
}

/// Waits until every shard, as `d` reads them, is owned by its target among `members` with
/// at most 2 shards each, and those without a target are vacant.
fn settle_bounded(d: &Daemon, members: &[&str]) {
    let expected = Assignment::compute(NAME, SHARDS, members, 2);
    let row = |s: u32| {
        let target = expected.target(s).map(str::to_owned);
        (u64::from(s), target.clone(), target)
    };
    let want: Vec<_> = (0..SHARDS).map(row).collect();
    let settled = wait_until(SETTLE, Duration::from_millis(50), || {
        (shards(d)? == want).then_some(())
    });
    assert!(
        settled.is_some(),
        "not settled to the assignment of {members:?} (at most 2 each): {:?}",
        shards(d)
    );
}

/// With `max_shards_per_replica: 2`, 16 shards and three replicas, the last to join takes
/// its own share (not shards nobody is assigned, vacant all along, which would leave no room
/// for its share): the shards owned are the assigned ones, and `status` exits 3.
#[test]
fn with_a_bound_the_shards_owned_settle_to_the_assigned_ones() {
    let redis = RedisServer::start();
    let mut r = vec![bounded_replica(&redis, "r1"), bounded_replica(&redis, "r3")];
    settle_bounded(&r[0], &["r1", "r3"]);
    r.push(bounded_replica(&redis, "r2"));
    settle_bounded(&r[0], &["r1", "r2", "r3"]);
    let out = r[0].cli(&["status"]);
    assert_eq!(out.code, Some(3), "{out:?}");
    let first = format!("{NAME}: 16 shards, 3 owners, 10 unowned\n");
    assert!(out.stdout.starts_with(&first), "{out:?}");
    // A leaver: the others' shares change; each gives up what is no longer assigned.
    r[0].signal(Signal::SIGTERM);
    assert_eq!(r[0].wait_exit(Duration::from_secs(10)), Some(0));
    settle_bounded(&r[1], &["r2", "r3"]);
    for d in &r[1..] {
        d.signal(Signal::SIGTERM);
    }
    for d in &mut r[1..] {
        assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    }
    let logs: Vec<_> = r.iter().map(Daemon::safety_log).collect();
    check_logs(&logs).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
}

#[test]
fn exec_runs_one_child_per_owned_shard_with_its_shard_and_fence() {
    let redis = RedisServer::start();
    let out = tempfile::tempdir().expect("temp dir");
    let dir = out.path().to_str().expect("utf-8").to_owned();
    let script = r#"echo "$$" > "$OUT/$LEADERD_SHARD.$LEADERD_FENCE"; exec sleep 600"#;
    let mut r: Vec<Daemon> = ["r1", "r2"]
        .iter()
        .map(|id| {
            let mut opts = DaemonOpts::new(NAME, id, &redis.url());
            opts.extra_yaml = "election:\n  shards: 4\nexec:\n  grace_period: 300ms\n".into();
            opts.exec = vec!["sh".into(), "-c".into(), script.into()];
            opts.env = vec![("OUT".into(), dir.clone())];
            Daemon::spawn(&opts)
        })
        .collect();
    let expected = Assignment::compute(NAME, 4, &["r1", "r2"], 0);
    // Each replica's owned shards, with their fences, once settled.
    let deadline = Instant::now() + SETTLE;
    let owned = loop {
        let owned: Vec<(u64, u64)> = r
            .iter()
            .flat_map(|d| {
                let doc = d.status_doc().unwrap_or_default();
                let list = doc["shards"]["owned"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                list.iter()
                    .map(|o| {
                        (
                            o["shard"].as_u64().unwrap_or(99),
                            o["fence"].as_u64().unwrap_or(0),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let mine = |d: &Daemon| {
            owned_in_doc(d)
                == expected
                    .shards_of(d.identity())
                    .into_iter()
                    .map(u64::from)
                    .collect::<Vec<_>>()
        };
        let files = owned
            .iter()
            .all(|(s, f)| out.path().join(format!("{s}.{f}")).exists());
        if owned.len() == 4 && r.iter().all(mine) && files {
            break owned;
        }
        assert!(
            Instant::now() < deadline,
            "not settled with a child per shard: {owned:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // One child per shard, each started with its shard and that shard's fence.
    let pids: Vec<i32> = owned
        .iter()
        .map(|(s, f)| {
            let text =
                std::fs::read_to_string(out.path().join(format!("{s}.{f}"))).expect("child file");
            text.trim().parse().expect("a pid")
        })
        .collect();
    let alive = |pid: i32| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    // Each child's start is logged with its shard's fence.
    let started: Vec<u64> = r
        .iter()
        .flat_map(|d| d.events_named("child_started"))
        .filter_map(|e| e["fence"].as_u64())
        .collect();
    assert!(
        owned.iter().all(|(_, f)| started.contains(f)),
        "{started:?} {owned:?}"
    );
    assert!(pids.iter().all(|p| alive(*p)), "a child is not running");
    // SIGKILL of r1: each of its children is killed by its own keeper at once.
    let doomed: Vec<i32> = owned
        .iter()
        .zip(&pids)
        .filter(|((s, _), _)| expected.target(*s as u32) == Some("r1"))
        .map(|(_, p)| *p)
        .collect();
    assert!(!doomed.is_empty());
    r[0].kill();
    let killed_at = Instant::now();
    while doomed.iter().any(|p| alive(*p)) {
        assert!(
            killed_at.elapsed() < Duration::from_secs(1),
            "a child of r1 outlived it by 1s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // r2 takes them after their validity, each with a child of its own.
    moved(&r[1], &doomed_shards(&owned, &expected), &["r2"], SETTLE);
    let children = || std::fs::read_dir(out.path()).map_or(0, Iterator::count);
    let taken_at = Instant::now();
    while children() < 4 + doomed.len() {
        assert!(
            taken_at.elapsed() < Duration::from_secs(2),
            "{} children started",
            children()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SIGTERM: every child is stopped before leaderd exits.
    r[1].signal(Signal::SIGTERM);
    assert_eq!(r[1].wait_exit(Duration::from_secs(10)), Some(0));
    let every: Vec<i32> = std::fs::read_dir(out.path())
        .expect("read dir")
        .filter_map(|f| {
            std::fs::read_to_string(f.ok()?.path())
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(every.len(), 4 + doomed.len());
    let left: Vec<_> = every.iter().filter(|p| alive(**p)).collect();
    assert!(
        left.is_empty(),
        "children alive after leaderd exited: {left:?}"
    );
    let logs: Vec<_> = r.iter().map(Daemon::safety_log).collect();
    check_logs(&logs).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
}

/// The shards of `owned` whose target is r1.
fn doomed_shards(owned: &[(u64, u64)], expected: &Assignment) -> Vec<u64> {
    let r1 = owned
        .iter()
        .filter(|(s, _)| expected.target(*s as u32) == Some("r1"));
    r1.map(|(s, _)| *s).collect()
}

#[test]
fn an_unhealthy_replica_hands_its_shards_over_and_takes_them_back_when_healthy() {
    let redis = RedisServer::start();
    let flag = tempfile::NamedTempFile::new().expect("health flag");
    let path = flag.path().to_str().expect("utf-8").to_owned();
    let mut r = vec![replica(&redis, "r1")];
    let mut opts = DaemonOpts::new(NAME, "r2", &redis.url());
    opts.extra_yaml = format!(
        "election:\n  shards: {SHARDS}\n  health_check:\n    command: [\"test\", \"-f\", \"{path}\"]\n    period: 100ms\n    timeout: 80ms\n    failures: 1\n"
    );
    r.push(Daemon::spawn(&opts));
    settle_to(&r[0], &["r1", "r2"]);
    let mine = owned_in_doc(&r[1]);
    assert!(!mine.is_empty());
    let (_, kept) = flag.keep().expect("keep the flag");
    std::fs::remove_file(&kept).expect("fail the health check");
    moved(&r[0], &mine, &["r1"], Duration::from_secs(2));
    let reasons: Vec<_> = r[1]
        .events_named("stepped_down")
        .iter()
        .map(|e| e["reason"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(reasons, vec![Some("yield".to_owned()); mine.len()]);
    let doc = r[1].status_doc().expect("doc");
    assert_eq!(
        (doc["healthy"].as_bool(), doc["is_leader"].as_bool()),
        (Some(false), Some(false))
    );
    std::fs::write(&kept, "").expect("pass the health check");
    settle_to(&r[0], &["r1", "r2"]);
    let logs: Vec<_> = r.iter().map(Daemon::safety_log).collect();
    check_logs(&logs).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
    let _ = std::fs::remove_file(&kept);
}

#[test]
fn a_replica_that_owns_no_shard_is_a_live_follower() {
    let redis = RedisServer::start();
    let out = tempfile::tempdir().expect("temp dir");
    let hook = r#"["sh", "-c", "echo $LEADERD_SHARD $LEADERD_FENCE > $OUT/$LEADERD_IDENTITY"]"#;
    let r: Vec<Daemon> = ["r1", "r2"]
        .iter()
        .map(|id| {
            let mut opts = DaemonOpts::new(NAME, id, &redis.url());
            opts.extra_yaml = format!(
                "election:\n  shards: 1\nhooks:\n  on_acquired: {hook}\npublish:\n  advertise: \"{id}.svc:8080\"\n"
            );
            opts.env = vec![("OUT".into(), out.path().to_str().expect("utf-8").into())];
            Daemon::spawn(&opts)
        })
        .collect();
    let one = Assignment::compute(NAME, 1, &["r1", "r2"], 0);
    let idle = r
        .iter()
        .find(|d| Some(d.identity()) != one.target(0))
        .expect("an idle replica");
    let deadline = Instant::now() + SETTLE;
    while owners(idle).map(|o| o.get(&0).cloned()) != Some(one.target(0).map(str::to_owned)) {
        assert!(Instant::now() < deadline, "shard 0 not owned by its target");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Well past renew_deadline (1400ms) with nothing to renew: still making progress.
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(idle.get("/healthz").0, 200);
    assert_eq!(idle.get("/readyz").0, 503);
    let doc = idle.status_doc().expect("doc");
    assert_eq!(
        (doc["state"].as_str(), doc["is_leader"].as_bool()),
        (Some("follower"), Some(false))
    );
    assert_eq!(doc["shards"]["owned"], serde_json::json!([]));
    // Each registry entry advertises its replica's publish.advertise.
    let (code, body) = idle.get("/candidates");
    let listed: Vec<Value> = serde_json::from_str(&body).expect("GET /candidates");
    let addresses: Vec<_> = listed
        .iter()
        .map(|c| (c["identity"].as_str(), c["address"].as_str()))
        .collect();
    assert_eq!(code, 200);
    assert_eq!(
        addresses,
        [
            (Some("r1"), Some("r1.svc:8080")),
            (Some("r2"), Some("r2.svc:8080"))
        ],
        "{body}"
    );
    // The owner's on_acquired hook ran with its shard and that shard's fence.
    let owner = r
        .iter()
        .find(|d| Some(d.identity()) == one.target(0))
        .expect("owner");
    let fence = owner.status_doc().expect("doc")["shards"]["owned"][0]["fence"].as_u64();
    let ran = std::fs::read_to_string(out.path().join(owner.identity())).unwrap_or_default();
    assert_eq!(ran.trim(), format!("0 {}", fence.expect("a fence")));
    assert!(!out.path().join(idle.identity()).exists());
}

/// A replica's registry entry says `leader` once it owns a shard, at once (at every change of
/// its state), not at its next heartbeat a third of a lease later.
#[test]
fn the_registry_entry_says_leader_as_soon_as_a_shard_is_owned() {
    let redis = RedisServer::start();
    support::seed_fence(&redis, NAME);
    let mut opts = DaemonOpts::new(NAME, "r1", &redis.url());
    // Heartbeats every 3 s: the entry written before the first term says follower.
    (opts.lease, opts.renew_deadline, opts.retry) = ("9s".into(), "6s".into(), "1s".into());
    opts.extra_yaml = "election:\n  shards: 1\n".into();
    let d = Daemon::spawn(&opts);
    wait_event(&d, "acquired", 1, SETTLE);
    let state = || {
        let listed: Vec<Value> = serde_json::from_str(&d.get("/candidates").1).ok()?;
        listed.first()?["state"].as_str().map(str::to_owned)
    };
    let step = Duration::from_millis(20);
    let leads = wait_until(Duration::from_secs(1), step, || {
        (state()?.as_str() == "leader").then_some(())
    });
    assert!(leads.is_some(), "entry still says {:?}", state());
}

/// `leaderd_candidates{healthy}` counts the registry as the heartbeats read it in a sharded
/// election too (docs/outputs.md), so the alert `LeaderdNoHealthyStandby` does not fire on
/// replicas that own shards while the others are healthy.
#[test]
fn a_sharded_replica_counts_the_candidates_it_reads() {
    let redis = RedisServer::start();
    let r = [replica(&redis, "r1"), replica(&redis, "r2")];
    settle_to(&r[0], &["r1", "r2"]);
    for d in &r {
        let healthy = wait_until(SETTLE, Duration::from_millis(50), || {
            let n = counted(d, "leaderd_candidates", "healthy", "true");
            (n == 2.0).then_some(n)
        });
        assert_eq!(
            healthy,
            Some(2.0),
            "leaderd_candidates{{healthy=\"true\"}} of a replica that reads r1 and r2: {}",
            counted(d, "leaderd_candidates", "healthy", "true")
        );
        assert_eq!(counted(d, "leaderd_candidates", "healthy", "false"), 0.0);
    }
}

#[test]
fn on_sigterm_the_children_of_all_shards_stop_at_once() {
    let redis = RedisServer::start();
    let mut opts = DaemonOpts::new(NAME, "r1", &redis.url());
    opts.extra_yaml = "election:\n  shards: 4\nexec:\n  grace_period: 300ms\n".into();
    // Each child takes its whole grace period to stop (SIGKILLed at its end).
    let script = r#"trap "" TERM; touch "$OUT/$LEADERD_SHARD"; while :; do sleep 0.05; done"#;
    opts.exec = vec!["sh".into(), "-c".into(), script.into()];
    let out = tempfile::tempdir().expect("temp dir");
    opts.env = vec![("OUT".into(), out.path().to_str().expect("utf-8").into())];
    let mut d = Daemon::spawn(&opts);
    let deadline = Instant::now() + SETTLE;
    let owned = |d: &Daemon| d.status_doc().map_or(0, |_| owned_in_doc(d).len());
    while owned(&d) < 4 || std::fs::read_dir(out.path()).map_or(0, Iterator::count) < 4 {
        assert!(
            Instant::now() < deadline,
            "not all 4 shards owned with a child"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let start = Instant::now();
    d.signal(Signal::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    // One after another, 4 grace periods would take 1.2 s.
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(900),
        "SIGTERM to exit took {took:?}"
    );
}

/// One replica of a 2-shard election whose children are `script` (run by `sh -c`, with
/// `$OUT` a fresh directory), with `extra` in its config.
fn exec_replica(redis: &RedisServer, script: &str, extra: &str) -> (Daemon, tempfile::TempDir) {
    let out = tempfile::tempdir().expect("temp dir");
    let mut opts = DaemonOpts::new(NAME, "r1", &redis.url());
    opts.extra_yaml = format!("election:\n  shards: 2\nexec:\n  grace_period: 300ms\n{extra}");
    opts.exec = vec!["sh".into(), "-c".into(), script.into()];
    opts.env = vec![("OUT".into(), out.path().to_str().expect("utf-8").into())];
    (Daemon::spawn(&opts), out)
}

/// Each shard's first child exits by itself (code 3); the children of later terms stay.
const EXITS_ONCE: &str = r#"touch "$OUT/$LEADERD_SHARD.$LEADERD_FENCE"
if [ ! -e "$OUT/once.$LEADERD_SHARD" ]; then touch "$OUT/once.$LEADERD_SHARD"; exit 3; fi
exec sleep 600"#;

#[test]
fn a_shard_whose_child_exits_is_stepped_down_and_taken_again_after_a_retry_period() {
    let redis = RedisServer::start();
    let (mut d, out) = exec_replica(&redis, EXITS_ONCE, "");
    // Both shards: a first term whose child exits, then a second with a child that stays.
    let deadline = Instant::now() + SETTLE;
    while d.events_named("acquired").len() < 4 {
        assert!(Instant::now() < deadline, "no second terms:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let ended = d.events_named("stepped_down");
    let reasons: Vec<_> = ended.iter().map(|e| e["reason"].as_str()).collect();
    assert_eq!(reasons, [Some("child_exit"); 2], "{ended:?}");
    let acquired = d.events_named("acquired");
    for shard in 0..2u64 {
        let of = |e: &&Value| e["shard"].as_u64() == Some(shard);
        let terms: Vec<&Value> = acquired.iter().filter(of).collect();
        let end = ended.iter().find(of).expect("a step-down");
        assert_eq!(terms.len(), 2, "{terms:?}");
        // The next term comes a retry_period (300 ms) after the step-down, fenced higher.
        let gap = terms[1]["acquired_at_ms"].as_u64().unwrap_or(0)
            - end["ended_at_ms"].as_u64().unwrap_or(u64::MAX);
        assert!(
            gap >= 250,
            "shard {shard} taken again {gap} ms after its child exited"
        );
        assert!(terms[1]["fence"].as_u64() > terms[0]["fence"].as_u64());
        let second = format!("{shard}.{}", terms[1]["fence"]);
        let started = wait_until(SETTLE, Duration::from_millis(20), || {
            out.path().join(&second).exists().then_some(())
        });
        assert!(started.is_some(), "no child for shard {shard}'s next term");
    }
    let moves = metric(
        &d.get("/metrics").1,
        "leaderd_shard_moves_total",
        &[("name", NAME), ("reason", "child_exit")],
    );
    assert_eq!(moves, Some(2.0));
    d.signal(Signal::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(10)), Some(0));
    check_logs(&[d.safety_log()]).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
}

#[test]
fn with_on_exit_exit_a_shards_child_exiting_stops_leaderd_with_its_code() {
    let redis = RedisServer::start();
    let script = r#"touch "$OUT/$LEADERD_SHARD"; exit 7"#;
    let (mut d, _out) = exec_replica(&redis, script, "  on_exit: exit\n");
    assert_eq!(d.wait_exit(SETTLE), Some(7), "{}", d.log());
    let reasons: Vec<_> = d
        .events_named("stepped_down")
        .iter()
        .map(|e| e["reason"].as_str().map(str::to_owned))
        .collect();
    assert!(reasons.contains(&Some("child_exit".into())), "{reasons:?}");
    let exited = d.events_named("exited");
    assert_eq!(exited.last().map(|e| e["code"].as_i64()), Some(Some(7)));
    check_logs(&[d.safety_log()]).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
}

#[test]
fn two_sharded_processes_with_one_identity_both_warn_and_set_the_gauge() {
    let redis = RedisServer::start();
    let twins = [replica(&redis, "twin"), replica(&redis, "twin")];
    for d in &twins {
        assert_identity_conflict(d, SETTLE);
    }
}

/// Messages out of bounds on the election's channel (over 1 KiB, a 300-byte holder, a fence
/// that is not an integer) are dropped and counted in a sharded election too, each once.
#[test]
fn a_sharded_replica_counts_the_messages_it_drops() {
    let redis = RedisServer::start();
    let d = replica(&redis, "r1");
    settle_to(&d, &["r1"]);
    let channel = support::keys(NAME).released;
    let acquired = |holder: &str, fence: &str| {
        format!(r#"{{"event":"acquired","holder":"{holder}","fence":{fence},"shard":0}}"#)
    };
    let bad = [
        acquired(&"e".repeat(2048), "7"),
        acquired(&"e".repeat(300), "7"),
        acquired("evil", "1.5"),
    ];
    for m in &bad {
        assert_eq!(
            redis.cmd(&["PUBLISH", &channel, m]),
            "1",
            "r1 is subscribed"
        );
    }
    let series = "leaderd_messages_dropped_total";
    let counted = wait_until(SETTLE, Duration::from_millis(50), || {
        let n = metric(&d.get("/metrics").1, series, &[("name", NAME)])?;
        (n >= bad.len() as f64).then_some(n)
    });
    assert_eq!(
        counted,
        Some(bad.len() as f64),
        "each dropped message counted once"
    );
    settle_to(&d, &["r1"]);
}

#[test]
fn a_sharded_replica_says_when_redis_answers_again() {
    let redis = RedisServer::start();
    let d = replica(&redis, "r1");
    settle_to(&d, &["r1"]);
    redis.pause();
    wait_event(&d, "redis_error", 1, SETTLE);
    redis.resume();
    wait_event(&d, "redis_recovered", 1, SETTLE);
    settle_to(&d, &["r1"]);
}

/// `d`'s owned shards as its status document lists them: (shard, fence, valid until ms).
fn owned_terms(d: &Daemon) -> Vec<(u64, u64, u64)> {
    let doc = d.status_doc().unwrap_or_default();
    let owned = doc["shards"]["owned"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let term = |o: &Value| {
        let n = |k: &str| o[k].as_u64().unwrap_or(0);
        (n("shard"), n("fence"), n("lease_valid_until_ms"))
    };
    owned.iter().map(term).collect()
}

#[test]
fn an_owner_paused_past_its_validities_never_claims_a_shard_it_lost() {
    let redis = RedisServer::start();
    let r: Vec<Daemon> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| replica(&redis, id))
        .collect();
    let three = settle_to(&r[0], &["r1", "r2", "r3"]);
    // Its status document follows Redis within a reply's handling.
    let share: Vec<u64> = three.shards_of("r1").into_iter().map(u64::from).collect();
    assert!(!share.is_empty());
    let before = wait_until(SETTLE, Duration::from_millis(10), || {
        let owned = owned_terms(&r[0]);
        (owned.iter().map(|t| t.0).collect::<Vec<_>>() == share).then_some(owned)
    })
    .expect("r1's status document lists its share");
    let shards: Vec<u64> = before.iter().map(|t| t.0).collect();
    r[0].signal(Signal::SIGSTOP);
    // Its shards are taken by their targets without it once their validity has passed (the
    // logs say when).
    moved(&r[1], &shards, &["r2", "r3"], SETTLE);
    settle_to(&r[1], &["r2", "r3"]);
    std::thread::sleep(Duration::from_millis(500));
    r[0].signal(Signal::SIGCONT);
    // Resumed: whatever it publishes as valid is a term of its own begun since, never one of
    // the terms it lost.
    let resumed = Instant::now();
    while resumed.elapsed() < Duration::from_secs(2) {
        let read_at = support::now_ms();
        for (shard, fence, valid_until) in owned_terms(&r[0]) {
            let lost = before.iter().any(|t| (t.0, t.1) == (shard, fence));
            assert!(
                !(lost && valid_until > read_at),
                "r1 claims shard {shard} (fence {fence}) until {valid_until} after losing it"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let reasons: Vec<_> = r[0].events_named("stepped_down");
    for s in &shards {
        let ended = reasons.iter().find(|e| e["shard"].as_u64() == Some(*s));
        let reason = ended.and_then(|e| e["reason"].as_str());
        assert!(
            matches!(reason, Some("lost" | "deadline")),
            "shard {s}: {ended:?}"
        );
    }
    settle_to(&r[0], &["r1", "r2", "r3"]);
    let logs: Vec<_> = r.iter().map(Daemon::safety_log).collect();
    let terms = check_logs(&logs).unwrap_or_else(|e| panic!("overlapping claims:\n{e}"));
    let taken = terms.iter().filter(|t| t.shard.is_some()).count();
    assert!(
        taken >= SHARDS as usize + 2 * shards.len(),
        "{taken} shard terms"
    );
}

/// Sentinel mode: replicas of a sharded election over a master watched by three Sentinels
/// settle to the assignment; after a forced failover every shard is owned again by its
/// target on the new master, with each shard's fences still increasing; SIGTERM moves a
/// leaver's shards.
#[test]
fn over_sentinel_shards_settle_and_follow_a_failover() {
    let (servers, sentinels) =
        support::sentinel::start_watched_with(&["--repl-diskless-sync-delay", "0"], 1);
    support::seed_fence(&servers[0], NAME);
    let urls: Vec<String> = sentinels.iter().map(support::Sentinel::url).collect();
    let sentinel_yaml = format!(
        "redis:\n  mode: sentinel\n  sentinels: [{}]\n  master_name: {}\n",
        urls.join(", "),
        support::sentinel::MASTER
    );
    let ids = ["r1", "r2"];
    let mut r: Vec<Daemon> = ids
        .iter()
        .map(|id| replica_over(&sentinel_yaml, id))
        .collect();
    settle_to(&r[0], &ids);

    let old = sentinels[0].master_port();
    let asked = sentinels[0].cmd(&["SENTINEL", "FAILOVER", support::sentinel::MASTER]);
    assert_eq!(asked, "OK");
    let moved_master = wait_until(Duration::from_secs(20), Duration::from_millis(100), || {
        (sentinels[0].master_port() != old).then_some(())
    });
    assert!(moved_master.is_some(), "no failover within 20 s");
    // Every shard owned by its target again, read through the new master.
    settle_to(&r[1], &ids);

    sigterm_moves_then_both_stop(&mut r);
}

/// Cluster mode: replicas of a sharded election over a 3-master cluster (every shard key in
/// the election's slot) settle to the assignment after the first start's quarantine, and a
/// leaver's shards move on SIGTERM, with no overlap.
#[test]
fn over_a_cluster_shards_settle_and_a_leavers_shards_move() {
    let servers = support::cluster::create_cluster(3, 0, &[]);
    let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url())).collect();
    let yaml = format!("redis:\n  mode: cluster\n  urls: [{}]\n", urls.join(", "));
    let ids = ["r1", "r2"];
    let mut r: Vec<Daemon> = ids.iter().map(|id| replica_over(&yaml, id)).collect();
    settle_to(&r[0], &ids);

    sigterm_moves_then_both_stop(&mut r);
}

/// A replica of `shards` shards with `election_yaml` added to its `election` section, once it
/// owns them all.
fn sole_owner(redis: &RedisServer, shards: u32, election_yaml: &str) -> Daemon {
    let mut opts = DaemonOpts::new(NAME, "r1", &redis.url());
    opts.extra_yaml = format!("election:\n  shards: {shards}\n{election_yaml}");
    let d = Daemon::spawn(&opts);
    let all = wait_until(SETTLE, Duration::from_millis(50), || {
        let owned = d.status_doc()?["shards"]["owned"].as_array()?.len();
        (owned == shards as usize).then_some(())
    });
    assert!(all.is_some(), "owns {:?}: {}", d.status_doc(), d.log());
    d
}

fn shard_key(shard: u32) -> String {
    format!("leaderd:{{{NAME}}}:shard:{shard}")
}

/// `on_lost: exit` holds for shards as for one lease (README, "Shards"): a shard lost ends
/// leaderd with exit 1, after it has released every other shard as at any shutdown.
#[test]
fn with_on_lost_exit_a_lost_shard_ends_leaderd_with_1_after_releasing_the_others() {
    let redis = RedisServer::start();
    let mut d = sole_owner(&redis, 4, "  on_lost: exit\n");
    assert_eq!(redis.cmd(&["DEL", &shard_key(2)]), "1");
    assert_eq!(d.wait_exit(Duration::from_secs(5)), Some(1), "{}", d.log());
    let down = d.events_named("stepped_down");
    let reason = |shard: u64| {
        let of = down.iter().find(|e| e["shard"] == shard);
        of.map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(reason(2).as_deref(), Some("lost"), "{}", d.log());
    for shard in [0, 1, 3] {
        assert_eq!(reason(shard).as_deref(), Some("shutdown"), "{}", d.log());
        assert_eq!(redis.cmd(&["EXISTS", &shard_key(shard as u32)]), "0");
    }
}

/// `release_on_shutdown: false` holds for shards as for one lease: SIGTERM steps every shard
/// down and leaves it to expire in Redis.
#[test]
fn without_release_on_shutdown_the_shards_are_left_to_expire() {
    let redis = RedisServer::start();
    let mut d = sole_owner(&redis, 4, "  release_on_shutdown: false\n");
    d.signal(Signal::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(5)), Some(0), "{}", d.log());
    assert_eq!(d.events_named("stepped_down").len(), 4, "{}", d.log());
    for shard in 0..4 {
        let key = shard_key(shard);
        assert_eq!(redis.cmd(&["HGET", &key, "holder"]), "r1", "shard {shard}");
        let ttl: i64 = redis.cmd(&["PTTL", &key]).parse().unwrap_or(-2);
        assert!(ttl > 0, "shard {shard}: PTTL {ttl}");
    }
}
