//! The sections `hooks` and `proxy`: commands run when leadership changes and the
//! leader-aware proxy, with their checks (a hook must name a program that can run and that
//! no other user may change).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::tree::{Node, Reader};
use super::values::{self as v, choice};
use super::{HooksConfig, OnChange, ProxyConfig};

const DEFAULT_UPSTREAM: &str = "127.0.0.1:8080";

/// `on_this_host`: also check that each hook's program can be run here.
pub(super) fn hooks(r: &mut Reader<'_>, root: &Node<'_>, on_this_host: bool) -> HooksConfig {
    let n = r.section(root, "hooks");
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
        timeout: r
            .get(r.file(&n, "timeout"), v::positive_duration)
            .unwrap_or(Duration::from_secs(10)),
    }
}

pub(super) fn proxy(r: &mut Reader<'_>, root: &Node<'_>) -> ProxyConfig {
    let n = r.section(root, "proxy");
    // An explicit null is no upstream, as "" is: more likely a forgotten value than a
    // request for the default.
    let upstream_null = n.is_null("upstream");
    let upstream_given = r.file(&n, "upstream").is_some() || upstream_null;
    let upstream = r.get(r.file(&n, "upstream"), v::host_port);
    let cfg = ProxyConfig {
        listen: r.get(r.file(&n, "listen"), v::listen_addr).flatten(),
        upstream: match (upstream_given, upstream) {
            (false, _) => Some(DEFAULT_UPSTREAM.to_string()),
            (true, u) => u.flatten(),
        },
        on_change: r
            .get(r.file(&n, "on_change"), choice(v::ON_CHANGE))
            .unwrap_or(OnChange::Close),
        connect_timeout: r
            .get(r.file(&n, "connect_timeout"), v::positive_duration)
            .unwrap_or(Duration::from_secs(2)),
        idle_timeout: r
            .get(r.file(&n, "idle_timeout"), v::duration)
            .unwrap_or(Duration::from_secs(3600)),
        max_connections: r
            .get(r.file(&n, "max_connections"), v::count(1))
            .unwrap_or(10_000),
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

/// Why a hook's or the exec command's program cannot be run; displayed as the end of a
/// sentence that starts with the program's name.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProgramError {
    /// The command list is empty or starts with "".
    #[error("is not allowed (the first item is the program to run)")]
    Empty,
    /// No directory of `PATH` has it.
    #[error("cannot be found on PATH ({0})")]
    NotOnPath(String),
    /// The path does not exist or cannot be read.
    #[error("cannot be found ({}: {source})", path.display())]
    Missing {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The path is a file this process may not execute (access(2) with X_OK).
    #[error("({}) is not executable by this user: {source}", path.display())]
    NotExecutable {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    /// The path is a directory or another non-file.
    #[error("({}) is not a file", .0.display())]
    NotAFile(PathBuf),
}

/// Where `program` is, searched like `execvp` does.
///
/// # Errors
/// Why it cannot be run ([`ProgramError`]).
pub(crate) fn find_program(program: &str, path_var: &str) -> Result<PathBuf, ProgramError> {
    if program.is_empty() {
        return Err(ProgramError::Empty);
    }
    if program.contains('/') {
        return executable(Path::new(program)).map(|()| PathBuf::from(program));
    }
    let mut last = None;
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(program);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(why) if candidate.exists() => last = Some(why),
            Err(_) => {}
        }
    }
    Err(last.unwrap_or_else(|| ProgramError::NotOnPath(path_var.to_string())))
}

/// A regular file that this process may execute: not "has an x bit", which a root-owned
/// mode-0700 script has too when leaderd runs as another user.
fn executable(path: &Path) -> Result<(), ProgramError> {
    let meta = std::fs::metadata(path).map_err(|source| ProgramError::Missing {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(ProgramError::NotAFile(path.to_path_buf()));
    }
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).map_err(|source| {
        ProgramError::NotExecutable {
            path: path.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn finds_programs_on_path_and_rejects_the_rest() {
        assert!(find_program("sh", "/nonexistent:/bin:/usr/bin").is_ok());
        assert!(find_program("/bin/sh", "").is_ok());
        let missing = find_program("no-such-program-xyz", "/bin")
            .unwrap_err()
            .to_string();
        assert!(missing.contains("cannot be found on PATH"), "{missing}");
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let not_exec = find_program(plain.to_str().unwrap(), "")
            .unwrap_err()
            .to_string();
        assert!(not_exec.contains("not executable"), "{not_exec}");
        let dir_path = dir.path().to_str().unwrap();
        let on_path = find_program("plain", dir_path).unwrap_err().to_string();
        assert!(on_path.contains("not executable"), "{on_path}");
        assert!(find_program("", "/bin").is_err());
    }
}
