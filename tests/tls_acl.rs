//! ACL users and TLS against real redis-server processes.
//!
//! - leaderd runs with exactly the minimal ACL of `docs/redis-modes.md` (acquire, renew,
//!   NOSCRIPT reload, release, pub/sub takeover, `status`) and Redis logs no denial;
//! - a user lacking one permission gets an error naming it;
//! - the password (from `password_file` or `LEADERD_REDIS_PASSWORD`) never appears in logs,
//!   `check-config` output or errors, also when it is wrong;
//! - TLS with a CA and a client certificate generated here (`openssl`), with the same ACL.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use support::{
    free_port, keys, minimal_acl, new_token, now_ms, seed_fence, wait_until, Daemon, DaemonOpts,
    RedisServer,
};

const LEASE_MS: u64 = 2000;

fn create_user(server: &RedisServer, acl: &[String]) {
    let args: Vec<&str> = acl.iter().map(String::as_str).collect();
    assert_eq!(server.cmd(&args), "OK", "{args:?}");
}

/// The identity of a daemon leading with a validity from a renew sent after `after_ms`.
fn leader_after(daemons: &[&Daemon], after_ms: u64) -> Option<String> {
    wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        let leader = daemons.iter().find(|d| {
            d.status_doc().is_some_and(|doc| {
                doc["is_leader"] == true
                    && doc["lease_valid_until_ms"]
                        .as_u64()
                        .is_some_and(|v| v > after_ms + LEASE_MS)
            })
        });
        leader.map(|d| d.identity().to_string())
    })
}

fn opts(name: &str, identity: &str, url: &str, extra: &str) -> DaemonOpts {
    let mut o = DaemonOpts::new(name, identity, url);
    o.extra_yaml = extra.to_string();
    // A TLS handshake on a loaded 2-core machine can take longer than the fast test timings'
    // 200 ms command timeout; these tests are about what is refused, not about speed.
    o.lease = "4s".into();
    o.renew_deadline = "3s".into();
    o.retry = "1s".into();
    o.command_timeout = "800ms".into();
    o
}

fn assert_secret_absent(secret: &str, what: &str, text: &str) {
    assert!(
        !text.contains(secret),
        "the password appears in {what}:\n{text}"
    );
}

#[test]
fn the_minimal_acl_is_enough_and_the_password_stays_secret() {
    let server = RedisServer::start();
    let password = format!("pw-{}", new_token());
    create_user(&server, &minimal_acl("leaderd", &password, &[]));
    let name = "acl-election";
    seed_fence(&server, name);
    let dir = tempfile::tempdir().expect("temp dir");
    let password_file = dir.path().join("redis-password");
    std::fs::write(&password_file, format!("{password}\n")).expect("write password file");

    let from_file = format!(
        "redis:\n  username: leaderd\n  password_file: {}\n",
        password_file.display()
    );
    let a = Daemon::spawn(&opts(name, "acl-a", &server.url(), &from_file));
    let mut b_opts = opts(
        name,
        "acl-b",
        &server.url(),
        "redis:\n  username: leaderd\n",
    );
    b_opts.env = vec![("LEADERD_REDIS_PASSWORD".into(), password.clone())];
    let b = Daemon::spawn(&b_opts);

    let both = [&a, &b];
    let first = leader_after(&both, 0).expect("a leader under the minimal ACL");
    // The script cache is emptied: the next renew answers NOSCRIPT and loads it again.
    assert_eq!(server.cmd(&["SCRIPT", "FLUSH"]), "OK");
    let t = now_ms() + 100;
    let again = leader_after(&both, t).expect("renews continue after NOSCRIPT");
    assert_eq!(again, first);
    // A release (PUBLISH) wakes the other one (SUBSCRIBE), which takes over.
    let (mut leader, follower) = if first == a.identity() {
        (a, b)
    } else {
        (b, a)
    };
    leader.signal(Signal::SIGTERM);
    assert_eq!(leader.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(leader.events_named("released").len(), 1, "{}", leader.log());
    let took_over = leader_after(&[&follower], 0).expect("the follower takes over");
    assert_eq!(took_over, follower.identity());
    let status = follower.cli(&["status", "--json"]);
    assert_eq!(status.code, Some(0), "{status:?}");
    // Redis refused nothing: the ACL is enough.
    assert_eq!(server.cmd(&["ACL", "LOG"]), "", "Redis denied something");

    let check = follower.cli(&["check-config"]);
    assert_eq!(check.code, Some(0), "{check:?}");
    assert!(check.stdout.contains("<redacted>"), "{}", check.stdout);
    for (what, text) in [
        (
            "check-config output",
            format!("{}{}", check.stdout, check.stderr),
        ),
        (
            "status output",
            format!("{}{}", status.stdout, status.stderr),
        ),
        ("a log", leader.log()),
        ("a log", follower.log()),
    ] {
        assert_secret_absent(&password, what, &text);
    }

    // A wrong password: errors say so, without either password.
    let wrong = format!("wrong-{}", new_token());
    let mut c_opts = opts(
        name,
        "acl-c",
        &server.url(),
        "redis:\n  username: leaderd\n",
    );
    c_opts.env = vec![("LEADERD_REDIS_PASSWORD".into(), wrong.clone())];
    let c = Daemon::spawn(&c_opts);
    let failed = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        c.events_named("redis_error").into_iter().next()
    });
    let failed = failed.expect("the wrong password is reported");
    let status = c.cli(&["status"]);
    assert_eq!(status.code, Some(1), "{status:?}");
    for (what, text) in [
        ("a log", c.log()),
        (
            "status output",
            format!("{}{}", status.stdout, status.stderr),
        ),
    ] {
        assert_secret_absent(&wrong, what, &text);
        assert_secret_absent(&password, what, &text);
    }
    let shown = failed.to_string().to_lowercase();
    assert!(
        shown.contains("auth") || shown.contains("password"),
        "{failed}"
    );
}

/// The metric `leaderd_redis_errors_total{kind="auth"}` of `d`.
fn auth_errors(d: &Daemon) -> f64 {
    let (_, body) = d.get("/metrics");
    body.lines()
        .find(|l| l.starts_with("leaderd_redis_errors_total{") && l.contains("kind=\"auth\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_missing_permission_is_named() {
    let server = RedisServer::start();
    let password = format!("pw-{}", new_token());
    create_user(&server, &minimal_acl("noincr", &password, &["+incr"]));
    create_user(&server, &minimal_acl("noevalsha", &password, &["+evalsha"]));
    let user = |u: &str| format!("redis:\n  username: {u}\n");
    let mut o1 = opts("perm-a", "p-a", &server.url(), &user("noincr"));
    o1.env = vec![("LEADERD_REDIS_PASSWORD".into(), password.clone())];
    let mut o2 = opts("perm-b", "p-b", &server.url(), &user("noevalsha"));
    o2.env = vec![("LEADERD_REDIS_PASSWORD".into(), password.clone())];
    let (no_incr, no_evalsha) = (Daemon::spawn(&o1), Daemon::spawn(&o2));

    let named = |d: &Daemon, needle: &str| {
        wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
            d.events_named("redis_error")
                .into_iter()
                .find(|e| e.to_string().contains(needle))
        })
    };
    let e = named(&no_incr, &format!("INCR {}", keys("perm-a").fence)).unwrap_or_else(|| {
        panic!("the missing +incr is named:\n{}", no_incr.log());
    });
    assert!(e.to_string().contains("acquire script"), "{e}");
    let e = named(&no_evalsha, "'evalsha'").unwrap_or_else(|| {
        panic!("the missing +evalsha is named:\n{}", no_evalsha.log());
    });
    assert!(e.to_string().to_lowercase().contains("noperm"), "{e}");
    for d in [&no_incr, &no_evalsha] {
        assert!(auth_errors(d) >= 1.0, "counted as kind auth");
        assert_secret_absent(&password, "a log", &d.log());
        assert_eq!(d.status_doc().expect("status")["is_leader"], false);
    }
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl.
fn make_certificates(dir: &Path) {
    let script = r#"
set -e
key() { echo "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"; }
openssl req -x509 $(key) -keyout ca.key -out ca.crt -days 2 -subj /CN=leaderd-test-ca
printf "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n" > server.ext
openssl req $(key) -keyout server.key -out server.csr -subj /CN=127.0.0.1
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile server.ext
printf "extendedKeyUsage=clientAuth\n" > client.ext
openssl req $(key) -keyout client.key -out client.csr -subj /CN=leaderd
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 2 -extfile client.ext
"#;
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tls_with_a_ca_and_a_client_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    make_certificates(dir.path());
    let file = |f: &str| dir.path().join(f).display().to_string();
    let tls_port = free_port().to_string();
    let server = RedisServer::start_with_args(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &file("server.crt"),
        "--tls-key-file",
        &file("server.key"),
        "--tls-ca-cert-file",
        &file("ca.crt"),
        "--tls-auth-clients",
        "yes",
    ]);
    let password = format!("pw-{}", new_token());
    create_user(&server, &minimal_acl("leaderd", &password, &[]));
    let name = "tls-election";
    seed_fence(&server, name);

    let url = format!("rediss://127.0.0.1:{tls_port}/0");
    let tls = format!(
        "redis:\n  username: leaderd\n  tls:\n    ca_file: {}\n    cert_file: {}\n    key_file: {}\n",
        file("ca.crt"),
        file("client.crt"),
        file("client.key")
    );
    let mut o = opts(name, "tls-a", &url, &tls);
    o.env = vec![("LEADERD_REDIS_PASSWORD".into(), password.clone())];
    let d = Daemon::spawn(&o);
    leader_after(&[&d], 0).unwrap_or_else(|| panic!("a leader over TLS:\n{}", d.log()));
    let status = d.cli(&["status", "--json"]);
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(status.stdout.contains("tls-a"), "{status:?}");
    let check = d.cli(&["check-config"]);
    assert!(check.stdout.contains("client.key"), "{}", check.stdout);
    assert_eq!(server.cmd(&["ACL", "LOG"]), "", "Redis denied something");

    // Without the client certificate the server refuses the connection.
    let ca_only = format!(
        "redis:\n  username: leaderd\n  tls:\n    ca_file: {}\n",
        file("ca.crt")
    );
    let mut o = opts(name, "tls-b", &url, &ca_only);
    o.env = vec![("LEADERD_REDIS_PASSWORD".into(), password.clone())];
    let no_cert = Daemon::spawn(&o);
    let status = no_cert.cli(&["status"]);
    assert_eq!(status.code, Some(1), "{status:?}");
    // Without the CA the server's certificate is not trusted.
    let mut o = opts(name, "tls-c", &url, "redis:\n  username: leaderd\n");
    o.env = vec![("LEADERD_REDIS_PASSWORD".into(), password)];
    let untrusted = Daemon::spawn(&o);
    let status = untrusted.cli(&["status"]);
    assert_eq!(status.code, Some(1), "{status:?}");
    assert!(
        status.stderr.to_lowercase().contains("certificate"),
        "{status:?}"
    );
}
