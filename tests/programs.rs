//! A hook, exec or health-check program that any user may change (mode o+w, or in a
//! directory any user may write without the sticky bit) is refused by `check-config` and
//! `run` (exit 2, one line naming the key and the path); a group-writable one is a warning.
//! The real binary, real files and modes.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::daemon::{run_cli, CliOutput};

/// The config of `program` under each key that names a program.
fn configs(program: &str) -> [(&'static str, String); 3] {
    let p = format!("{program:?}");
    [
        (
            "hooks.on_acquired",
            format!("hooks:\n  on_acquired: [{p}]\n"),
        ),
        ("exec.command", format!("exec:\n  command: [{p}]\n")),
        (
            "election.health_check.command",
            format!("election:\n  health_check:\n    command: [{p}]\n"),
        ),
    ]
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `dir/name`, a script with `mode`, in `dir` with `dir_mode`.
fn script(dir: &Path, dir_mode: u32, name: &str, mode: u32) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    chmod(&path, mode);
    chmod(dir, dir_mode);
    path
}

fn cli(cmd: &str, dir: &Path, yaml: &str, path_var: &str) -> CliOutput {
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, format!("name: e\nidentity: a\n{yaml}")).unwrap();
    let env = [("PATH", path_var)];
    run_cli(
        &[cmd, "--config", cfg.to_str().unwrap()],
        &env,
        Duration::from_secs(10),
    )
}

const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Refused by both commands, in one line naming the key, the path and `what`.
fn assert_refused(top: &Path, program: &str, path_var: &str, shown: &Path, what: &str) {
    for (key, yaml) in configs(program) {
        for cmd in ["check-config", "run"] {
            let out = cli(cmd, top, &yaml, path_var);
            assert_eq!(out.code, Some(2), "{cmd} {key}: {out:?}");
            let line = out
                .stderr
                .lines()
                .find(|l| l.contains(key))
                .unwrap_or_else(|| panic!("{cmd} {key}: no line names the key: {out:?}"));
            assert!(line.contains(&shown.display().to_string()), "{line}");
            assert!(line.contains(what), "{line}");
        }
    }
}

#[test]
fn a_program_any_user_may_write_is_refused_naming_the_key_and_the_path() {
    let top = tempfile::tempdir().unwrap();
    let safe = top.path().join("safe");
    let open = script(&safe, 0o755, "hook.sh", 0o777);
    let prog = open.to_str().unwrap();
    assert_refused(
        top.path(),
        prog,
        SYSTEM_PATH,
        &open,
        "writable by any user (mode 0777)",
    );
    // A bare name is looked up on PATH, as when it runs.
    let path_var = format!("{}:{SYSTEM_PATH}", safe.display());
    assert_refused(
        top.path(),
        "hook.sh",
        &path_var,
        &open,
        "writable by any user",
    );
}

#[test]
fn a_program_in_a_directory_any_user_may_write_is_refused_unless_it_is_sticky() {
    let top = tempfile::tempdir().unwrap();
    let shared = top.path().join("shared");
    let prog = script(&shared, 0o777, "check.sh", 0o755);
    let p = prog.to_str().unwrap();
    assert_refused(
        top.path(),
        p,
        SYSTEM_PATH,
        &shared,
        "which any user may write",
    );

    // With the sticky bit (as /tmp has) only the owner may replace the file.
    chmod(&shared, 0o1777);
    for (key, yaml) in configs(p) {
        let out = cli("check-config", top.path(), &yaml, SYSTEM_PATH);
        assert_eq!(out.code, Some(0), "{key}: {out:?}");
        assert!(!out.stderr.contains(key), "{key}: {}", out.stderr);
    }
    chmod(&shared, 0o755);
}

#[test]
fn a_group_writable_program_is_a_warning() {
    let top = tempfile::tempdir().unwrap();
    let team = top.path().join("team");
    let prog = script(&team, 0o755, "hook.sh", 0o775);
    for (key, yaml) in configs(prog.to_str().unwrap()) {
        let out = cli("check-config", top.path(), &yaml, SYSTEM_PATH);
        assert_eq!(out.code, Some(0), "{key}: {out:?}");
        let warning = out
            .stderr
            .lines()
            .find(|l| l.contains("warning") && l.contains(key))
            .unwrap_or_else(|| panic!("{key}: no warning: {out:?}"));
        assert!(warning.contains(&prog.display().to_string()), "{warning}");
        assert!(warning.contains("writable by group"), "{warning}");
    }
    // A program nobody else may change: no warning at all.
    chmod(&prog, 0o755);
    for (key, yaml) in configs(prog.to_str().unwrap()) {
        let out = cli("check-config", top.path(), &yaml, SYSTEM_PATH);
        assert_eq!(out.code, Some(0), "{key}: {out:?}");
        assert!(!out.stderr.contains("warning"), "{key}: {}", out.stderr);
    }
}
