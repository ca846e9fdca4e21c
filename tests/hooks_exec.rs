//! Hooks beside exec mode: a hook's environment is the exec child's (no Redis secret in
//! either) plus its event's variables; the shutdown's own `on_stepped_down` still runs
//! after a child that used its whole grace period, and leaderd exits within
//! `grace_period + 1s`.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use support::exec::*;
use support::safety::field;
use support::{wait_until, Daemon, RedisServer, POLL, SLOW};

const PASSWORD: &str = "hook-s3cret-pw";

/// `["sh", "-c", "env > <path>"]` as YAML.
fn env_dump(path: &Path) -> String {
    serde_json::to_string(&["sh", "-c", &format!("env > {}", path.display())]).unwrap()
}

/// The variable names of an `env` dump (lines that start a `NAME=value`).
fn names(dump: &str) -> BTreeSet<String> {
    dump.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(name, _)| name.to_string())
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

#[test]
fn hooks_get_the_environment_of_exec_mode_without_the_redis_secret() {
    let redis = RedisServer::start_with_args(&["--requirepass", PASSWORD]);
    let port = redis.port();
    let via_var = format!("redis://:${{MY_PW}}@127.0.0.1:{port}/0");
    let in_env_url = format!("redis://:{PASSWORD}@127.0.0.1:{port}/0");
    // The password through a variable named in the URL, then in LEADERD_REDIS_URL.
    let cases = [
        (via_var.as_str(), ("MY_PW", PASSWORD)),
        ("", ("LEADERD_REDIS_URL", in_env_url.as_str())),
    ];
    for (i, (url, (var, value))) in cases.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let [child, acquired, changed] =
            ["child", "acquired", "changed"].map(|f| dir.path().join(f));
        let exec = vec![
            "sh".into(),
            "-c".into(),
            format!("env > {}; sleep 30", child.display()),
        ];
        let hooks = format!(
            "hooks:\n  on_acquired: {}\n  on_leader_changed: {}\n",
            env_dump(&acquired),
            env_dump(&changed)
        );
        let mut o = opts(
            &format!("hook-env-{i}"),
            "a",
            url,
            &(hooks + GRACE_300),
            exec,
        );
        o.env = vec![
            (var.into(), value.into()),
            ("HARMLESS".into(), "kept".into()),
        ];
        let d = Daemon::spawn(&o);
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .ok()
                .filter(|s| s.contains("HARMLESS"))
        };
        let dumps = wait_until(SLOW, POLL, || {
            Some([read(&child)?, read(&acquired)?, read(&changed)?])
        });
        let [child, acquired, changed] =
            dumps.unwrap_or_else(|| panic!("no env written:\n{}", d.log()));
        for dump in [&child, &acquired, &changed] {
            assert!(
                !dump.contains(PASSWORD),
                "{var}: the secret leaked:\n{dump}"
            );
            assert!(dump.contains("HARMLESS=kept"), "{dump}");
        }
        // Exactly the child's variables, plus the event's own.
        let events = [
            "LEADERD_EVENT",
            "LEADERD_LEADER",
            "LEADERD_LEASE_VALID_UNTIL_MS",
        ];
        for dump in [&acquired, &changed] {
            let mut hook = names(dump);
            hook.retain(|n| !events.contains(&n.as_str()));
            assert_eq!(hook, names(&child), "{var}");
        }
    }
}

#[test]
fn the_shutdowns_own_stepped_down_hook_runs_after_a_child_that_used_its_grace_period() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hook");
    let beats = dir.path().join("beats");
    let script = format!(
        "echo \"$LEADERD_EVENT $LEADERD_REASON\" >> {}",
        out.display()
    );
    let hook = serde_json::to_string(&["sh", "-c", &script]).unwrap();
    let yaml = format!("hooks:\n  on_stepped_down: {hook}\nexec:\n  grace_period: 500ms\n");
    let mut d = Daemon::spawn(&opts(
        "hook-grace",
        "a",
        &redis.url(),
        &yaml,
        writer(&beats, true),
    ));
    child_pid(&d, 1);
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    d.signal(Signal::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(5)), Some(0));
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(450),
        "the child did not use its grace: {took:?}"
    );
    assert!(
        took < Duration::from_millis(500 + 1000),
        "exit after {took:?}"
    );
    assert!(d.events_named("hook_dropped").is_empty(), "{}", d.log());
    let ran = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(ran.trim(), "stepped_down shutdown", "{}", d.log());
    let finished = d.events_named("hook_finished");
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(
        field(&finished[0], "hook").and_then(Value::as_str),
        Some("on_stepped_down")
    );
    check_children(&[&d], &beats);
}

/// A hook (and a health-check command) dies with leaderd: a SIGKILL to leaderd's whole
/// process group leaves neither running, though they run in process groups of their own.
/// A hook and a hung health check, each a script that leaves a grandchild in its group
/// (`sleep 300 & sleep 300`): when leaderd is SIGKILLed, no process of either group survives.
#[test]
fn a_hook_and_a_health_check_die_with_leaderd_grandchildren_included() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let hook_pid = dir.path().join("hook.pid");
    let check_pid = dir.path().join("check.pid");
    let hook = dir.path().join("hook.sh");
    let script = format!(
        "#!/bin/sh\necho $$ > {}\nsleep 300 & sleep 300\n",
        hook_pid.display()
    );
    std::fs::write(&hook, script).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let hook = serde_json::to_string(&[hook.to_str().unwrap()]).unwrap();
    // The check passes once (so that it leads), then hangs until its timeout kills it.
    let check = serde_json::to_string(&[
        "sh",
        "-c",
        &format!(
            "if [ -f {p} ]; then echo $$ > {p}.hung; sleep 300 & sleep 300; fi; echo $$ > {p}",
            p = check_pid.display()
        ),
    ])
    .unwrap();
    let extra = format!(
        "hooks:\n  on_acquired: {hook}\n  timeout: 20s\nelection:\n  health_check:\n    command: {check}\n    period: 1s\n    timeout: 900ms\n    failures: 3\n"
    );
    let mut o = opts("diewith", "a", &redis.url(), &extra, Vec::new());
    o.own_group = true;
    let d = Daemon::spawn(&o);
    let pid_in =
        |path: &Path| -> Option<u32> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    let hung = check_pid.with_extension("pid.hung");
    // Each group holds its script and a grandchild (and the sleep the script waits on).
    let (hook, check) = wait_until(Duration::from_secs(15), Duration::from_millis(10), || {
        let both = (pid_in(&hook_pid)?, pid_in(&hung)?);
        (group_members(both.0).len() >= 3 && group_members(both.1).len() >= 3).then_some(both)
    })
    .expect("the hook and a hung check run, each with a grandchild");
    let _guards = (GroupGuard(hook), GroupGuard(check));
    d.signal_group(Signal::SIGKILL);
    let gone = wait_until(Duration::from_secs(2), Duration::from_millis(20), || {
        (group_members(hook).is_empty() && group_members(check).is_empty()).then_some(())
    });
    assert!(
        gone.is_some(),
        "processes outlived leaderd: hook group {:?}, health check group {:?}",
        group_members(hook),
        group_members(check)
    );
}
