//! The second pass over a configuration read leniently: what no single value can say (the
//! name is required, the identity defaults to the host name, mode single's URL to the local
//! server, the password and the TLS files are read, programs are looked up and must not be
//! changeable by any user) and the rules between keys (`rules.rs`). A rule on a value that
//! was refused is skipped.

use std::path::Path;

use super::problems::Problems;
use super::programs::{commands, find_program, writers, ProgramError, Writable};
use super::yaml::Value;
use super::{not_utf8, rules, values, Config, EnvLookup, ModeName, Overrides, Secret, TlsConfig};

const PASSWORD_VAR: &str = "LEADERD_REDIS_PASSWORD";

/// `redis.url` in mode single when it is not given.
const REDIS_URL: &str = "redis://127.0.0.1:6379/0";

/// Completes and checks `c`, read from `doc`; problems go to `p`.
pub(super) fn all(
    c: &mut Config,
    doc: &Value,
    o: &Overrides,
    env: EnvLookup<'_>,
    p: &mut Problems,
) {
    name_and_identity(c, p);
    redis_mode(c, doc, p);
    c.redis.password = password(c.redis.password_file.as_deref(), env, p);
    tls(c, p);
    rules::replicas_ack(p, c.redis.mode, c.redis.min_replicas_ack);
    rules::election(p, &c.election);
    health_check(c, p);
    if !o.exec_command.is_empty() {
        c.exec.command = o.exec_command.clone();
    }
    programs(c, o, env, p);
    proxy_upstream(c, doc, p);
    rules::across(p, c);
    rules::redis_client(p, c);
}

/// The health check's rules; None when neither `http_get` nor a command is set.
fn health_check(c: &mut Config, p: &mut Problems) {
    let Some(h) = c.election.health_check.take() else {
        return;
    };
    rules::health_check(p, &h);
    c.election.health_check = (h.http_get.is_some() || !h.command.is_empty()).then_some(h);
}

/// The programs of the commands `c` runs: never "", and with `o.check_programs` one that
/// exists on this host (`PATH` from `env`), may be executed and that no other user may
/// change. A health check's program that cannot be found here is a failing check, not a
/// mistake in the file.
fn programs(c: &Config, o: &Overrides, env: EnvLookup<'_>, p: &mut Problems) {
    let path_var = env("PATH").unwrap_or_default();
    for (key, cmd) in commands(c) {
        let Some(program) = cmd.first() else { continue };
        if !(o.check_programs || program.is_empty()) {
            continue;
        }
        let label = match key {
            "exec.command" if !o.exec_command.is_empty() => "exec.command[0] (run -- COMMAND)",
            _ => &format!("{key}[0]"),
        };
        let must_exist = key != "election.health_check.command";
        match find_program(program, &path_var) {
            Ok(path) => {
                if let Some(why) = writers(&path).into_iter().find(Writable::by_anyone) {
                    p.problem(key, format!("{label}: {why}"));
                }
            }
            Err(why) if must_exist || matches!(why, ProgramError::Empty) => {
                p.problem(key, format!("{label}: {program:?} {why}"));
            }
            Err(_) => {}
        }
    }
}

/// The keys each mode needs and allows (the flag or variable named if one gave `url`);
/// mode single's `url` defaults to [`REDIS_URL`].
fn redis_mode(c: &mut Config, doc: &Value, p: &mut Problems) {
    let url = doc.get("redis").and_then(|r| r.get("url"));
    let label = url
        .is_some_and(|u| !u.is_null())
        .then(|| p.label("redis.url"));
    rules::redis_mode(p, &c.redis, label.as_deref());
    if c.redis.mode == ModeName::Single {
        c.redis.url.get_or_insert_with(|| REDIS_URL.into());
    }
}

fn name_and_identity(c: &mut Config, p: &mut Problems) {
    if c.name.is_empty() && p.all_valid(&["name"]) {
        let msg = "name: missing; it is required (allowed: 1-200 characters of [A-Za-z0-9._-]; \
                   set it in the file, with --name or with LEADERD_NAME)";
        p.problem("name", msg.to_string());
    }
    if !c.identity.is_empty() || !p.all_valid(&["identity"]) {
        return;
    }
    let host = nix::unistd::gethostname()
        .map_err(|e| e.to_string())
        .and_then(|h| {
            h.into_string()
                .map_err(|_| "it is not valid UTF-8".to_string())
        })
        .and_then(|h| values::identity(&h).map_err(|e| e.to_string()));
    match host {
        Ok(host) => c.identity = host,
        Err(why) => {
            let msg = format!("identity: not set, and the host name cannot be used ({why}); set identity, --identity or LEADERD_IDENTITY");
            p.problem("identity", msg);
        }
    }
}

/// `LEADERD_REDIS_PASSWORD` when set and not empty, else the contents of the password file.
fn password(file: Option<&Path>, env: EnvLookup<'_>, p: &mut Problems) -> Option<Secret> {
    match env(PASSWORD_VAR) {
        Ok(pw) if !pw.is_empty() => return Some(Secret::new(pw)),
        Err(std::env::VarError::NotUnicode(_)) => {
            p.problem("redis.password", not_utf8(PASSWORD_VAR));
            return None;
        }
        _ => {}
    }
    let path = file?;
    let key = "redis.password_file";
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim_end_matches(['\r', '\n']).is_empty() => {
            let why = "is empty (write the password into it, or leave the key out)";
            p.problem(key, format!("{key}: {path:?} {why}"));
            None
        }
        Ok(text) => Some(Secret::new(text.trim_end_matches(['\r', '\n']))),
        Err(e) => {
            p.problem(key, format!("{key}: cannot read {path:?}: {e}"));
            None
        }
    }
}

/// `redis.tls`: each file readable, a certificate with its key; None when no file is set.
fn tls(c: &mut Config, p: &mut Problems) {
    let Some(t) = c.redis.tls.as_mut() else {
        return;
    };
    for (leaf, file) in [
        ("ca_file", &mut t.ca_file),
        ("cert_file", &mut t.cert_file),
        ("key_file", &mut t.key_file),
    ] {
        if let Some(path) = file.as_ref() {
            if let Err(e) = std::fs::File::open(path) {
                let key = format!("redis.tls.{leaf}");
                p.problem(&key, format!("{key}: cannot read {path:?}: {e}"));
                *file = None;
            }
        }
    }
    rules::tls(p, t);
    c.redis.tls = c.redis.tls.take().filter(|t| *t != TlsConfig::default());
}

/// An explicit null upstream is no upstream, as "" is (more likely a forgotten value than a
/// request for the default); with `proxy.listen` set, either is refused.
fn proxy_upstream(c: &mut Config, doc: &Value, p: &mut Problems) {
    let written = doc.get("proxy").and_then(|s| s.get("upstream"));
    let null = written.is_some_and(Value::is_null);
    if null {
        c.proxy.upstream = None;
    }
    if c.proxy.listen.is_some() && c.proxy.upstream.is_none() && p.all_valid(&["proxy.upstream"]) {
        let written = if null { "null" } else { "\"\"" };
        let msg = format!("proxy.upstream: {written} is not allowed while proxy.listen is set (write this replica's service, e.g. 127.0.0.1:8080, or leave the key out for that default)");
        p.problem("proxy.upstream", msg);
    }
}
