//! `leaderd status --watch` (docs/operating.md#candidates): against real replicas, one new
//! document per change (a candidate joining, one leaving after SIGTERM, a leader taking over
//! after a SIGKILL), none while nothing changes, the error line while Redis is down and the
//! status again after it is back, no terminal escapes without a TTY, a cleared screen and a
//! redraw on one, exit 0 on SIGINT/SIGTERM.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use support::daemon::parse_json_lines;
use support::{leaderd_bin, run_cli, seed_fence, wait_until, Daemon, DaemonOpts, RedisServer};

const BOUND: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);
/// How long nothing may be printed while nothing changes: six polls of the watcher and three
/// heartbeats of every replica.
const QUIET: Duration = Duration::from_secs(3);

/// A running `leaderd status --watch`, its stdout in a file. Killed on drop.
struct Watch {
    child: Child,
    dir: tempfile::TempDir,
    exit: Option<i32>,
}

impl Watch {
    fn start(redis: &RedisServer, name: &str, json: bool) -> Watch {
        Watch::start_with(redis, name, json, "")
    }

    /// With `election` added to the config's `election` section (indented lines).
    fn start_with(redis: &RedisServer, name: &str, json: bool, election: &str) -> Watch {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("config.yaml");
        let yaml = format!(
            "name: {name}\nidentity: watcher\nredis:\n  url: {}\n  connect_timeout: 200ms\n  \
             command_timeout: 200ms\nelection:\n  lease_duration: 3s\n  renew_deadline: 2s\n  \
             retry_period: 500ms\n{election}publish:\n  http_addr: \"\"\n",
            redis.url()
        );
        std::fs::write(&config, yaml).expect("write config");
        let mut cmd = Command::new(leaderd_bin());
        cmd.args(["status", "--watch", "--config", config.to_str().unwrap()]);
        if json {
            cmd.arg("--json");
        }
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("LEADERD_") {
                cmd.env_remove(k);
            }
        }
        let out = std::fs::File::create(dir.path().join("stdout")).expect("stdout file");
        let err = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let child = cmd
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn leaderd status --watch");
        Watch {
            child,
            dir,
            exit: None,
        }
    }

    fn file(&self, which: &str) -> PathBuf {
        self.dir.path().join(which)
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(self.file("stdout")).unwrap_or_default()
    }

    fn docs(&self) -> Vec<Value> {
        parse_json_lines(&self.stdout())
    }

    /// The index of the first document at `from` or later that passes `want`, within BOUND.
    fn wait_doc(&self, from: usize, what: &str, want: impl Fn(&Value) -> bool) -> usize {
        wait_until(BOUND, POLL, || {
            let docs = self.docs();
            (from..docs.len()).find(|&i| want(&docs[i]))
        })
        .unwrap_or_else(|| panic!("no document {what} within {BOUND:?}:\n{}", self.stdout()))
    }

    /// Asserts that document `last` is the last one, and that none follows for `QUIET`;
    /// returns how many there are.
    fn quiet_after(&self, last: usize) -> usize {
        let before = self.docs().len();
        assert_eq!(before, last + 1, "{}", self.stdout());
        std::thread::sleep(QUIET);
        let after = self.docs().len();
        assert_eq!(
            after,
            before,
            "a document while nothing changed:\n{}",
            self.stdout()
        );
        before
    }

    fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), sig);
    }

    /// Its exit code, waiting at most `bound`.
    fn wait_exit(&mut self, bound: Duration) -> Option<i32> {
        if self.exit.is_none() {
            self.exit = wait_until(bound, POLL, || {
                self.child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map(|s| s.code().unwrap_or(-1))
            });
        }
        self.exit
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let err = std::fs::read_to_string(self.file("stderr")).unwrap_or_default();
            eprintln!("---- status --watch stderr ----\n{err}");
        }
    }
}

fn replica(redis: &RedisServer, name: &str, identity: &str) -> Daemon {
    replica_with(redis, name, identity, "")
}

/// A replica with `extra` in its config.
fn replica_with(redis: &RedisServer, name: &str, identity: &str, extra: &str) -> Daemon {
    let mut o = DaemonOpts::new(name, identity, &redis.url());
    o.lease = "3s".into();
    o.renew_deadline = "2s".into();
    o.retry = "500ms".into();
    o.extra_yaml = extra.into();
    Daemon::spawn(&o)
}

fn leads(d: &Daemon) -> bool {
    d.status_doc()
        .is_some_and(|doc| doc["is_leader"] == Value::Bool(true))
}

/// The identities a document lists, in its order.
fn ids(doc: &Value) -> Vec<&str> {
    doc["candidates"]
        .as_array()
        .map(|cs| cs.iter().filter_map(|c| c["identity"].as_str()).collect())
        .unwrap_or_default()
}

/// Every listed candidate is in `state` except the holder, which leads.
fn settled(doc: &Value) -> bool {
    doc["candidates"].as_array().is_some_and(|cs| {
        cs.iter().all(|c| {
            let leads = c["identity"] == doc["holder"];
            c["state"] == if leads { "leader" } else { "follower" }
        })
    })
}

/// A document without the counters that move by themselves.
fn steady(doc: &Value) -> Value {
    let mut doc = doc.clone();
    doc.as_object_mut().unwrap().remove("remaining_ms");
    if let Some(cs) = doc["candidates"].as_array_mut() {
        for c in cs {
            c.as_object_mut().unwrap().remove("seen_ms_ago");
        }
    }
    doc
}

#[test]
fn watch_json_prints_a_document_per_change_and_none_without() {
    let redis = RedisServer::start();
    let name = "watch-json";
    seed_fence(&redis, name);
    let mut a = replica(&redis, name, "a");
    assert!(wait_until(BOUND, POLL, || leads(&a).then_some(())).is_some());
    let mut w = Watch::start(&redis, name, true);
    let first = w.wait_doc(0, "held by a, listing a", |d| {
        d["holder"] == "a" && ids(d) == ["a"] && settled(d)
    });

    // Candidates joining: each one a new document.
    let b = replica(&redis, name, "b");
    let joined_b = w.wait_doc(first + 1, "listing a and b", |d| {
        d["holder"] == "a" && ids(d) == ["a", "b"] && settled(d)
    });
    let mut c = replica(&redis, name, "c");
    let joined_c = w.wait_doc(joined_b + 1, "listing a, b and c", |d| {
        d["holder"] == "a" && ids(d) == ["a", "b", "c"] && settled(d)
    });

    // Nothing changes (heartbeats and renewals only move the clocks): nothing printed.
    let before = w.quiet_after(joined_c);

    // A candidate leaving after SIGTERM.
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit(BOUND), Some(0));
    let left_c = w.wait_doc(before, "without c", |d| {
        d["holder"] == "a" && ids(d) == ["a", "b"]
    });

    // A leader taking over after the old one is SIGKILLed, then the dead one dropped.
    a.kill();
    let took_over = w.wait_doc(left_c + 1, "held by b", |d| d["holder"] == "b");
    w.wait_doc(took_over, "listing b alone", |d| {
        d["holder"] == "b" && ids(d) == ["b"]
    });
    assert!(leads(&b), "b leads");

    // Every document differs from the one before in more than the clocks.
    let docs = w.docs();
    for pair in docs.windows(2) {
        assert_ne!(
            steady(&pair[0]),
            steady(&pair[1]),
            "a document without a change:\n{}",
            w.stdout()
        );
    }
    assert!(docs.iter().all(|d| d["name"] == name), "{}", w.stdout());

    let t0 = Instant::now();
    w.signal(Signal::SIGINT);
    assert_eq!(
        w.wait_exit(Duration::from_secs(5)),
        Some(0),
        "exit 0 on SIGINT"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn watch_text_without_a_tty_shows_the_error_and_recovers() {
    let mut redis = RedisServer::start();
    let name = "watch-text";
    seed_fence(&redis, name);
    let a = replica(&redis, name, "a");
    assert!(wait_until(BOUND, POLL, || leads(&a).then_some(())).is_some());
    let mut w = Watch::start(&redis, name, false);
    let held = format!("{name}: held by a (fence ");
    wait_until(BOUND, POLL, || w.stdout().starts_with(&held).then_some(()))
        .unwrap_or_else(|| panic!("no status block: {:?}", w.stdout()));
    // The first block is what `status` prints: its first line, then the candidates.
    let out = w.stdout();
    let block: Vec<&str> = out.split("\n\n").next().unwrap().lines().collect();
    assert_eq!(block.len(), 2, "{out:?}");
    assert!(block[1].starts_with("  a "), "{out:?}");
    assert!(block[1].contains(" seen "), "{out:?}");
    let once = a.cli(&["status"]).stdout;
    assert_eq!(once.lines().count(), 2, "{once:?}");

    // Redis gone: the error line, once; back: the status again, after a blank line.
    redis.stop();
    let error = format!("leaderd: status of {name}: ");
    wait_until(BOUND, POLL, || w.stdout().contains(&error).then_some(()))
        .unwrap_or_else(|| panic!("no error line: {:?}", w.stdout()));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(w.stdout().matches(&error).count(), 1, "{:?}", w.stdout());
    redis.start_again();
    let back = format!("\n\n{name}: ");
    wait_until(BOUND, POLL, || {
        let out = w.stdout();
        let after = &out[out.find(&error)?..];
        after.contains(&back).then_some(())
    })
    .unwrap_or_else(|| panic!("no status after Redis came back: {:?}", w.stdout()));

    assert!(!w.stdout().contains('\x1b'), "escapes without a TTY");
    w.signal(Signal::SIGTERM);
    assert_eq!(
        w.wait_exit(Duration::from_secs(5)),
        Some(0),
        "exit 0 on SIGTERM"
    );
}

#[test]
fn watch_on_a_terminal_clears_and_redraws() {
    let redis = RedisServer::start();
    let name = "watch-tty";
    seed_fence(&redis, name);
    let a = replica(&redis, name, "a");
    assert!(wait_until(BOUND, POLL, || leads(&a).then_some(())).is_some());
    // `script` (util-linux, Essential on Debian) gives the watcher a pseudo-terminal; `timeout`
    // ends it with SIGINT after 12s, and `--preserve-status` hands back its exit code.
    let inner = format!(
        "timeout --preserve-status -s INT 12 {} status --watch --config {}",
        leaderd_bin().display(),
        a.config_path().display()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let out = std::fs::File::create(dir.path().join("tty")).expect("output file");
    let mut script = Command::new("script")
        .args(["-q", "-f", "-e", "-c", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn script (util-linux)");
    let screen = || std::fs::read_to_string(dir.path().join("tty")).unwrap_or_default();
    let clear = "\x1b[H\x1b[2J";
    let first = format!("{clear}{name}: held by a (fence ");
    wait_until(BOUND, POLL, || screen().starts_with(&first).then_some(()))
        .unwrap_or_else(|| panic!("no cleared screen with the status: {:?}", screen()));
    let _b = replica(&redis, name, "b");
    wait_until(BOUND, POLL, || {
        let s = screen();
        let last = s.rsplit(clear).next()?;
        (s.matches(clear).count() >= 2 && last.contains("  b ")).then_some(())
    })
    .unwrap_or_else(|| panic!("no redraw listing b: {:?}", screen()));
    let code = wait_until(BOUND, POLL, || script.try_wait().ok().flatten());
    let _ = script.kill();
    assert_eq!(code.and_then(|s| s.code()), Some(0), "{:?}", screen());
}

#[test]
fn watch_with_bad_usage_exits_2() {
    let out = run_cli(
        &["status", "--watch", "--no-such-flag"],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.yaml");
    let out = run_cli(
        &["status", "--watch", "--config", missing.to_str().unwrap()],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(out.code, Some(2), "{out:?}");
}

/// The owner of each shard a sharded election's document lists.
fn owners(doc: &Value) -> Vec<Option<&str>> {
    let rows = doc["shards"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    rows.iter().map(|r| r["owner"].as_str()).collect()
}

/// In a sharded election (README, "Shards"): the document of `status --json` with every shard,
/// again when shards move (a leaver's, at its SIGTERM), none while nothing changes; exit 0.
#[test]
fn watch_json_in_a_sharded_election_follows_the_shards() {
    let redis = RedisServer::start();
    let name = "watch-shards";
    seed_fence(&redis, name);
    let sharded = "election:\n  shards: 4\n";
    let _a = replica_with(&redis, name, "a", sharded);
    let mut b = replica_with(&redis, name, "b", sharded);
    let mut w = Watch::start_with(&redis, name, true, "  shards: 4\n");
    let two = leaderd::shard::Assignment::compute(name, 4, &["a", "b"], 0);
    let targets: Vec<Option<&str>> = (0..4).map(|s| two.target(s)).collect();
    let settled = w.wait_doc(0, "every shard owned by its target", |d| {
        let leading = |i: usize| d["candidates"][i]["state"] == "leader";
        ids(d) == ["a", "b"] && owners(d) == targets && leading(0) && leading(1)
    });

    // Nothing changes (renewals only move the clocks): nothing printed.
    let before = w.quiet_after(settled);

    // b leaves: its shards move to a.
    b.signal(Signal::SIGTERM);
    assert_eq!(b.wait_exit(BOUND), Some(0));
    w.wait_doc(before, "every shard owned by a", |d| {
        ids(d) == ["a"] && owners(d) == [Some("a"); 4]
    });
    w.signal(Signal::SIGTERM);
    assert_eq!(w.wait_exit(BOUND), Some(0));
}
