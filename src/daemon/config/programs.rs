//! The programs leaderd runs (a hook, the exec command, the health check): where one is
//! ([`find_program`], as `execvp` looks) and who else may change it: one that any user may
//! write, or that lies in a directory any user may write without the sticky bit, is refused;
//! a group-writable one is warned about (README "Security").

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::Config;

const OTHERS_WRITE: u32 = 0o002;
const GROUP_WRITE: u32 = 0o020;
const STICKY: u32 = 0o1000;

/// Someone besides the owner may replace a program's contents; displayed as the end of a
/// sentence that starts with the config key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Writable {
    /// The file is o+w.
    #[error("{} is writable by any user (mode {mode:04o}): chmod o-w it", path.display())]
    File { path: PathBuf, mode: u32 },
    /// A directory on its path is o+w without the sticky bit: anyone may replace the file.
    #[error("{} is in {}, which any user may write (mode {mode:04o}, no sticky bit): move the program or chmod o-w the directory", program.display(), dir.display())]
    Dir {
        program: PathBuf,
        dir: PathBuf,
        mode: u32,
    },
    /// The file, or the directory it is in (without the sticky bit), is g+w.
    #[error("{} is writable by group {gid} (mode {mode:04o} on {}): every member may change what leaderd runs", program.display(), path.display())]
    Group {
        program: PathBuf,
        path: PathBuf,
        gid: u32,
        mode: u32,
    },
}

impl Writable {
    /// Any user may change the program: refused. (Group-writable is a warning.)
    pub(crate) fn by_anyone(&self) -> bool {
        !matches!(self, Writable::Group { .. })
    }
}

/// Who besides its owner may change `program` (an existing file, as found on `PATH`): the
/// file itself, every directory above it (as written and after resolving symbolic links) for
/// any user, and the file and the directory holding it for its group.
pub(crate) fn writers(program: &Path) -> Vec<Writable> {
    let given = match std::env::current_dir() {
        Ok(cwd) if program.is_relative() => cwd.join(program),
        _ => program.to_path_buf(),
    };
    let real = std::fs::canonicalize(&given).unwrap_or_else(|_| given.clone());
    let mut found = Vec::new();
    if let Ok(meta) = std::fs::metadata(&real) {
        let mode = meta.permissions().mode() & 0o7777;
        if mode & OTHERS_WRITE != 0 {
            found.push(Writable::File {
                path: program.to_path_buf(),
                mode,
            });
        } else if mode & GROUP_WRITE != 0 {
            found.push(group(program, &real, &meta));
        }
    }
    let mut seen: Vec<&Path> = Vec::new();
    for path in [&given, &real] {
        for (depth, dir) in path.ancestors().skip(1).enumerate() {
            if seen.contains(&dir) {
                continue;
            }
            seen.push(dir);
            let Ok(meta) = std::fs::metadata(dir) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o7777;
            if mode & STICKY != 0 {
                continue;
            }
            if mode & OTHERS_WRITE != 0 {
                found.push(Writable::Dir {
                    program: program.to_path_buf(),
                    dir: dir.to_path_buf(),
                    mode,
                });
            } else if depth == 0 && mode & GROUP_WRITE != 0 {
                found.push(group(program, dir, &meta));
            }
        }
    }
    found
}

fn group(program: &Path, path: &Path, meta: &std::fs::Metadata) -> Writable {
    Writable::Group {
        program: program.to_path_buf(),
        path: path.to_path_buf(),
        gid: meta.gid(),
        mode: meta.permissions().mode() & 0o7777,
    }
}

/// The commands `config` runs, each with its key: the hooks, the exec command and the
/// health check's command.
pub(super) fn commands(config: &Config) -> Vec<(&'static str, &[String])> {
    let h = &config.hooks;
    let mut out: Vec<(_, &[String])> = vec![
        ("hooks.on_acquired", &h.on_acquired),
        ("hooks.on_stepped_down", &h.on_stepped_down),
        ("hooks.on_leader_changed", &h.on_leader_changed),
        ("exec.command", &config.exec.command),
    ];
    let health = config.election.health_check.as_ref();
    out.extend(health.map(|c| ("election.health_check.command", &c.command[..])));
    out
}

/// One line per program of `config` that its group may change (the refusals for any user
/// were made while loading).
pub(crate) fn group_writable_warnings(config: &Config) -> Vec<String> {
    let path_var = std::env::var("PATH").unwrap_or_default();
    let writable = |(key, cmd): (&str, &[String])| {
        let found = find_program(cmd.first()?, &path_var).ok()?;
        Some((format!("{key}[0]"), writers(&found)))
    };
    commands(config)
        .into_iter()
        .filter_map(writable)
        .flat_map(|(label, found)| {
            found
                .into_iter()
                .filter(|w| !w.by_anyone())
                .map(move |w| format!("{label}: {w}"))
        })
        .collect()
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

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// What tests/programs.rs does not run (it checks a file and a directory any user may
    /// write, the sticky bit and a group-writable file through the binary): a
    /// group-writable directory, and a link in a safe directory to a program in an unsafe
    /// one.
    #[test]
    fn finds_who_else_may_write_a_program() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("bin");
        std::fs::create_dir(&dir).unwrap();
        let prog = dir.join("hook.sh");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        chmod(&prog, 0o755);
        chmod(&dir, 0o775);
        let found = writers(&prog);
        assert!(matches!(&found[..], [Writable::Group { .. }]), "{found:?}");
        assert!(!found[0].by_anyone());

        chmod(&dir, 0o777);
        let safe = top.path().join("safe");
        std::fs::create_dir(&safe).unwrap();
        chmod(&safe, 0o755);
        let link = safe.join("hook");
        std::os::unix::fs::symlink(&prog, &link).unwrap();
        assert!(writers(&link).iter().any(Writable::by_anyone));
        chmod(&dir, 0o755);
    }

    /// Beyond tests/daemon_config.rs (a missing path, a name not on PATH, a file that is
    /// not executable): a name found after a missing directory, and a file on PATH that is
    /// not executable is named as such, not as missing.
    #[test]
    fn finds_programs_on_path_and_rejects_the_rest() {
        assert!(find_program("sh", "/nonexistent:/bin:/usr/bin").is_ok());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain"), "#!/bin/sh\n").unwrap();
        chmod(&dir.path().join("plain"), 0o644);
        let dir_path = dir.path().to_str().unwrap();
        let on_path = find_program("plain", dir_path).unwrap_err().to_string();
        assert!(on_path.contains("not executable"), "{on_path}");
    }
}
