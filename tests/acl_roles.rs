//! The ACL lines of docs/security.md on a real redis-server (7.0): replicas run with the
//! minimal line of docs/redis-modes.md#acl; an operator with exactly the operator line runs `leaderd status`
//! and `leaderd handover` without a denial, and cannot write the lease, the fence or the
//! registry (directly or from a script) nor publish on the release channels.

mod support;

use std::time::Duration;

use support::daemon::run_cli;
use support::{keys, minimal_acl, new_token, wait_until, Daemon, DaemonOpts, RedisServer, Reply};

const OPERATOR: &str = "leaderd-operator";

/// The operator line of docs/security.md as ACL arguments (a quoted selector is one argument).
fn operator_acl(password: &str) -> Vec<String> {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md"),
    )
    .expect("read docs/security.md");
    let line = docs
        .lines()
        .find(|l| l.starts_with(&format!("ACL SETUSER {OPERATOR} on ")))
        .expect("the operator ACL line in the docs");
    let mut args = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        let (arg, tail) = match rest.strip_prefix('"') {
            Some(quoted) => quoted.split_once('"').expect("a closing quote"),
            None => rest.split_once(' ').unwrap_or((rest, "")),
        };
        args.push(arg.replace(">PASSWORD", &format!(">{password}")));
        rest = tail.trim_start();
    }
    args
}

fn create_user(server: &RedisServer, acl: &[String]) {
    let args: Vec<&str> = acl.iter().map(String::as_str).collect();
    assert_eq!(server.cmd(&args), "OK", "{args:?}");
}

fn replica(name: &str, id: &str, url: &str, password: &str) -> Daemon {
    let mut o = DaemonOpts::new(name, id, url);
    o.extra_yaml = "redis:\n  username: leaderd\n".to_string();
    o.env = vec![("LEADERD_REDIS_PASSWORD".into(), password.to_string())];
    o.lease = "4s".into();
    o.renew_deadline = "3s".into();
    o.retry = "1s".into();
    o.command_timeout = "800ms".into();
    Daemon::spawn(&o)
}

fn leader(ds: &[&Daemon]) -> Option<String> {
    ds.iter()
        .find(|d| d.status_doc().is_some_and(|doc| doc["is_leader"] == true))
        .map(|d| d.identity().to_string())
}

#[test]
fn an_operator_runs_status_and_handover_and_cannot_write_the_election() {
    let server = RedisServer::start();
    let (replica_pw, operator_pw) = (format!("r-{}", new_token()), format!("o-{}", new_token()));
    create_user(&server, &minimal_acl("leaderd", &replica_pw, &[]));
    create_user(&server, &operator_acl(&operator_pw));
    let name = "roles";
    let a = replica(name, "role-a", &server.url(), &replica_pw);
    let b = replica(name, "role-b", &server.url(), &replica_pw);
    let first = wait_until(Duration::from_secs(15), Duration::from_millis(50), || {
        leader(&[&a, &b])
    })
    .expect("a leader");
    // Both candidates registered.
    wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let out = b.cli(&["status", "--json"]);
        (out.stdout.matches("\"identity\"").count() == 2).then_some(())
    })
    .expect("two candidates");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("operator.yaml");
    let yaml = format!(
        "name: {name}\nredis:\n  url: {}\n  username: {OPERATOR}\n",
        server.url()
    );
    std::fs::write(&cfg, yaml).unwrap();
    let env = [("LEADERD_REDIS_PASSWORD", operator_pw.as_str())];
    let cfg = cfg.to_str().unwrap();
    let status = run_cli(
        &["status", "--json", "--config", cfg],
        &env,
        Duration::from_secs(10),
    );
    assert_eq!(status.code, Some(0), "{status:?}");
    let doc: serde_json::Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(doc["holder"].as_str(), Some(first.as_str()), "{doc}");
    assert_eq!(doc["candidates"].as_array().map(Vec::len), Some(2), "{doc}");

    let handover = run_cli(
        &["handover", "--config", cfg],
        &env,
        Duration::from_secs(20),
    );
    assert_eq!(handover.code, Some(0), "{handover:?}");
    let second = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        leader(&[&a, &b]).filter(|l| *l != first)
    })
    .expect("the handover moved leadership");
    assert_eq!(
        server.cmd(&["ACL", "LOG"]),
        "",
        "Redis denied the operator something"
    );

    // What the operator may not do.
    let mut c = server.connect(Duration::from_secs(5)).unwrap();
    let auth = c.call(&["AUTH", OPERATOR, &operator_pw]).unwrap().render();
    assert_eq!(auth, "OK");
    let lock = keys(name).lock;
    let fence = keys(name).fence;
    let candidates = keys(name).candidates;
    let released = keys(name).released;
    // A script the operator may load and run (EVALSHA): its own commands are checked too.
    let write = "return redis.call('HSET', KEYS[1], 'holder', 'evil')";
    let sha = match c.call(&["SCRIPT", "LOAD", write]).unwrap() {
        Reply::Bulk(sha) => String::from_utf8(sha).unwrap(),
        other => panic!("SCRIPT LOAD: {}", other.render()),
    };
    let attempts: Vec<Vec<&str>> = vec![
        vec!["HSET", &lock, "holder", "evil"],
        vec!["DEL", &lock],
        vec!["PEXPIRE", &lock, "1"],
        vec!["SET", &fence, "1"],
        vec!["HSET", &candidates, "evil", "{}"],
        vec!["HDEL", &candidates, "role-a"],
        vec!["PUBLISH", &released, "{}"],
        vec!["EVALSHA", &sha, "1", &lock],
        vec!["EVALSHA", &sha, "1", &candidates],
    ];
    for attempt in attempts {
        let reply = c.call(&attempt).unwrap().render();
        assert!(
            reply.starts_with("error:"),
            "{attempt:?} was allowed: {reply}"
        );
        if attempt[0] == "EVALSHA" {
            // Refused inside the script (EVALSHA itself is allowed), not for a missing script.
            assert!(reply.contains("user_script"), "{attempt:?}: {reply}");
        }
    }
    let holder = server.cmd(&["HGET", &lock, "holder"]);
    assert_eq!(holder, second, "the lease changed");
}
