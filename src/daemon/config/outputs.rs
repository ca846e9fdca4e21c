//! The sections `hooks` and `proxy`: commands run when leadership changes and the
//! leader-aware proxy, with their checks (a hook must name a program that can run and that
//! no other user may change).

use std::path::Path;

use super::programs::{find_program, ProgramError};
use super::tree::{Node, Reader};
use super::values::{self as v, choice};
use super::{HooksConfig, ProxyConfig};

/// `on_this_host`: also check that each hook's program can be run here.
pub(super) fn hooks(r: &mut Reader<'_>, root: &Node<'_>, on_this_host: bool) -> HooksConfig {
    let n = r.section(root, "hooks");
    let d = HooksConfig::default();
    let mut command = |leaf: &str| {
        let cmd = r.list(r.file(&n, leaf)).unwrap_or_default();
        let key = n.key(leaf);
        check_program(r, &key, &format!("{key}[0]"), &cmd, on_this_host);
        cmd
    };
    HooksConfig {
        on_acquired: command("on_acquired"),
        on_stepped_down: command("on_stepped_down"),
        on_leader_changed: command("on_leader_changed"),
        timeout: r.or(&n, "timeout", v::positive_duration, d.timeout),
    }
}

pub(super) fn proxy(r: &mut Reader<'_>, root: &Node<'_>) -> ProxyConfig {
    let n = r.section(root, "proxy");
    let d = ProxyConfig::default();
    // An explicit null is no upstream, as "" is: more likely a forgotten value than a
    // request for the default.
    let upstream_null = n.is_null("upstream");
    let upstream_given = r.file(&n, "upstream").is_some() || upstream_null;
    let upstream = r.get(r.file(&n, "upstream"), v::host_port);
    let cfg = ProxyConfig {
        listen: r.get(r.file(&n, "listen"), v::listen_addr).flatten(),
        upstream: match (upstream_given, upstream) {
            (false, _) => d.upstream,
            (true, u) => u.flatten(),
        },
        on_change: r.or(&n, "on_change", choice, d.on_change),
        connect_timeout: r.or(
            &n,
            "connect_timeout",
            v::positive_duration,
            d.connect_timeout,
        ),
        idle_timeout: r.or(&n, "idle_timeout", v::duration, d.idle_timeout),
        max_connections: r.or(&n, "max_connections", v::count(1), d.max_connections),
    };
    if cfg.listen.is_some() && cfg.upstream.is_none() && r.all_valid(&["proxy.upstream"]) {
        let written = if upstream_null { "null" } else { "\"\"" };
        let msg = format!("proxy.upstream: {written} is not allowed while proxy.listen is set (write this replica's service, e.g. 127.0.0.1:8080, or leave the key out for that default)");
        r.problem("proxy.upstream", msg);
    }
    cfg
}

/// A command's first item (shown as `label`) names its program: never "", and with
/// `on_this_host` a program that exists here and may be executed (a path, or a name found
/// on `PATH`).
pub(super) fn check_program(
    r: &mut Reader<'_>,
    key: &str,
    label: &str,
    cmd: &[String],
    on_this_host: bool,
) {
    let Some(program) = cmd.first() else { return };
    let found = if program.is_empty() {
        Err(ProgramError::Empty)
    } else if on_this_host {
        find_program(program, &r.env("PATH").unwrap_or_default())
    } else {
        return;
    };
    match found {
        Ok(path) => refuse_writable(r, key, label, &path),
        Err(why) => r.problem(key, format!("{label}: {program:?} {why}")),
    }
}

/// Refuses the program at `path` (found for `label`) when any user may change it.
pub(super) fn refuse_writable(r: &mut Reader<'_>, key: &str, label: &str, path: &Path) {
    let refused = super::programs::writers(path)
        .into_iter()
        .find(super::programs::Writable::by_anyone);
    if let Some(why) = refused {
        r.problem(key, format!("{label}: {why}"));
    }
}
