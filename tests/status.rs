//! `leaderd status` against placeholders written by hand, so that what it shows does not
//! depend on the machine's speed: a quarantine, a reservation, a holder with an address.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{keys, run_cli, RedisServer};

/// A config file in `dir` for election `name` on `redis`; returns its path.
fn config_in(dir: &tempfile::TempDir, redis: &RedisServer, name: &str) -> String {
    let path = dir.path().join("config.yaml");
    let yaml = format!(
        "name: {name}\nidentity: probe\nredis:\n  url: {}\n",
        redis.url()
    );
    std::fs::write(&path, yaml).expect("write config");
    path.to_str().unwrap().to_string()
}

fn status(redis: &RedisServer, name: &str) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_cli(
        &[
            "status",
            "--json",
            "--config",
            &config_in(&dir, redis, name),
        ],
        &[],
        Duration::from_secs(10),
    );
    let doc = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("status --json printed no JSON ({e}): {out:?}"));
    (out.code, doc)
}

fn place(redis: &RedisServer, name: &str, fields: &[&str]) {
    let key = keys(name).lock;
    let mut args = vec!["HSET", key.as_str()];
    args.extend_from_slice(fields);
    redis.cmd(&args);
    assert_eq!(redis.cmd(&["PEXPIRE", &key, "30000"]), "1");
}

#[test]
fn status_shows_a_quarantine_and_a_reservation() {
    let redis = RedisServer::start();
    let (code, st) = status(&redis, "st-vacant");
    assert_eq!(
        (code, st["state"].as_str()),
        (Some(3), Some("vacant")),
        "{st}"
    );

    place(&redis, "st-q", &["holder", "", "token", "", "fence", "77"]);
    let (code, st) = status(&redis, "st-q");
    assert_eq!(code, Some(3), "{st}");
    assert_eq!(st["state"], "quarantined", "{st}");
    assert_eq!(st["holder"], Value::Null, "{st}");
    assert!(
        st["remaining_ms"].as_u64().is_some_and(|ms| ms <= 30_000),
        "{st}"
    );

    let fields = [
        "holder",
        "",
        "token",
        "",
        "fence",
        "78",
        "reserved_for",
        "pod-b",
    ];
    place(&redis, "st-r", &fields);
    let (code, st) = status(&redis, "st-r");
    assert_eq!(code, Some(3), "{st}");
    assert_eq!(st["state"], "reserved", "{st}");
    assert_eq!(st["reserved_for"], "pod-b", "{st}");
    assert_eq!(st["holder"], Value::Null, "{st}");
    let order = ["name", "state", "holder", "fence", "remaining_ms"];
    let reserved: Vec<&str> = order
        .iter()
        .chain(&["reserved_for", "candidates"])
        .copied()
        .collect();
    assert_eq!(key_order(&st), reserved, "keys in the README's order: {st}");

    let fields = [
        "holder",
        "pod-a",
        "token",
        "t",
        "fence",
        "79",
        "address",
        "10.0.0.1:80",
    ];
    place(&redis, "st-h", &fields);
    let (code, st) = status(&redis, "st-h");
    assert_eq!(code, Some(0), "{st}");
    assert_eq!(
        (st["state"].as_str(), st["holder"].as_str()),
        (Some("held"), Some("pod-a"))
    );
    assert_eq!(st["fence"], 79, "{st}");
    let held: Vec<&str> = order.iter().chain(&["candidates"]).copied().collect();
    assert_eq!(key_order(&st), held, "keys in the README's order: {st}");
}

/// The keys of a document in the order it printed them (serde_json keeps it here).
fn key_order(doc: &Value) -> Vec<&str> {
    let keys = doc
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect());
    keys.unwrap_or_default()
}

/// `status` and `handover` run on an operator's host, which need not have the
/// replicas' hook and exec programs: only check-config and run check that they can run.
#[test]
fn status_and_handover_do_not_need_the_hook_and_exec_programs() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    let yaml = format!(
        "name: st-ops\nidentity: probe\nredis:\n  url: {}\n\
         hooks:\n  on_acquired: [/opt/app/bin/notify]\n  on_leader_changed: [no-such-notifier-xyz]\n\
         exec:\n  command: [/opt/app/bin/worker, --once]\n",
        redis.url()
    );
    std::fs::write(&path, yaml).expect("write config");
    let path = path.to_str().unwrap();
    let bound = Duration::from_secs(10);
    for args in [
        vec!["status", "--config", path],
        vec!["status", "--json", "--config", path],
        vec!["handover", "--config", path],
    ] {
        let out = run_cli(&args, &[], bound);
        // Vacant: exit 3 ("nobody leads" for handover), not 2 for the missing programs.
        assert_eq!(out.code, Some(3), "{args:?}: {out:?}");
        assert!(!out.stderr.contains("notify"), "{args:?}: {out:?}");
    }
    // check-config (and run) still refuse them, every one named.
    let out = run_cli(&["check-config", "--config", path], &[], bound);
    assert_eq!(out.code, Some(2), "{out:?}");
    for key in [
        "hooks.on_acquired[0]",
        "hooks.on_leader_changed[0]",
        "exec.command[0]",
    ] {
        assert!(out.stderr.contains(key), "{key} not in {out:?}");
    }
}

/// `status` as text for the election `name`: the exit code and stdout.
fn status_text(redis: &RedisServer, name: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let args = ["status", "--config", &config_in(&dir, redis, name)];
    let out = run_cli(&args, &[], Duration::from_secs(10));
    (out.code, out.stdout)
}

/// Whatever Redis holds, `status` prints one line per candidate (control
/// characters escaped), and says how long is left in one style, `no TTL` for a key without.
#[test]
fn status_text_is_one_line_per_candidate_and_says_no_ttl() {
    let redis = RedisServer::start();
    let fields = ["holder", "x", "token", "abc", "fence", "9"];
    redis.cmd(&[&["HSET", &keys("st-t").lock][..], &fields].concat());
    // Seen now by the server's clock (an entry seen in the future is ignored), indexed.
    let t = redis.cmd(&["TIME"]);
    let mut t = t.lines().map(|x| x.parse::<u64>().unwrap());
    let now = t.next().unwrap() * 1000 + t.next().unwrap() / 1000;
    let entry = format!(
        "{{\"state\":\"fol\\nlower\",\"healthy\":true,\"priority\":1,\
         \"address\":\"10.0.0.1:80\\r\\nX\",\"version\":\"0.1\\u001b[31m\",\
         \"started_at_ms\":1,\"seen_at_ms\":{now}}}"
    );
    redis.cmd(&["HSET", &keys("st-t").candidates, "ev\nil", &entry]);
    let score = now.to_string();
    redis.cmd(&["ZADD", &keys("st-t").candidates_index, &score, "ev\nil"]);
    let (code, text) = status_text(&redis, "st-t");
    assert_eq!(code, Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text:?}");
    assert_eq!(lines[0], "st-t: held by x (fence 9, no TTL)");
    let candidate = "  ev\\u{a}il fol\\u{a}lower healthy priority 1 10.0.0.1:80\\u{d}\\u{a}X \
                     0.1\\u{1b}[31m seen ";
    assert!(
        lines[1].starts_with(candidate) && lines[1].ends_with(" ms ago"),
        "{text:?}"
    );

    let fields = [
        "holder",
        "",
        "token",
        "",
        "fence",
        "5",
        "reserved_for",
        "pod-b",
    ];
    place(&redis, "st-r2", &fields);
    let (code, text) = status_text(&redis, "st-r2");
    assert_eq!(code, Some(3), "{text}");
    assert!(text.starts_with("st-r2: reserved for pod-b ("), "{text}");
    let left = text.trim_end().strip_prefix("st-r2: reserved for pod-b (");
    let ms = left.and_then(|t| t.strip_suffix(" ms left)"));
    assert!(
        ms.is_some_and(|ms| ms.parse::<u64>().is_ok_and(|ms| ms <= 30_000)),
        "worded as the README: {text}"
    );
}

/// `status`, `handover` and `check-config` piped into a reader that has gone (`| head -0`)
/// end quietly by SIGPIPE, as other Unix tools do: no panic, no backtrace on stderr.
#[test]
fn status_into_a_closed_pipe_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    let redis = RedisServer::start();
    place(
        &redis,
        "st-pipe",
        &["holder", "pod-a", "token", "t", "fence", "3"],
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let config = &config_in(&dir, &redis, "st-pipe");
    for args in [
        vec!["status", "--config", config],
        vec!["status", "--json", "--config", config],
        vec!["check-config", "--config", config],
        vec!["handover", "--json", "--timeout", "1s", "--config", config],
    ] {
        let mut child = Command::new(support::leaderd_bin())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("leaderd");
        drop(child.stdout.take()); // the reader goes before anything is printed
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(nix::libc::SIGPIPE),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}
