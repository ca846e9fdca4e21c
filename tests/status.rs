//! `leaderd status` against placeholders written by hand, so that what it shows does not
//! depend on the machine's speed: a quarantine, a reservation, a holder with an address.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{run_cli, RedisServer};

fn status(redis: &RedisServer, name: &str) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    let yaml = format!(
        "name: {name}\nidentity: probe\nredis:\n  url: {}\n",
        redis.url()
    );
    std::fs::write(&path, yaml).expect("write config");
    let out = run_cli(
        &["status", "--json", "--config", path.to_str().unwrap()],
        &[],
        Duration::from_secs(10),
    );
    let doc = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("status --json printed no JSON ({e}): {out:?}"));
    (out.code, doc)
}

fn place(redis: &RedisServer, name: &str, fields: &[&str]) {
    let key = format!("leaderd:{{{name}}}:lock");
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
}

/// Audit V3: `status` and `handover` run on an operator's host, which need not have the
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
