//! What some checks need beyond Redis and leaderd (promtool, root), and what a test does
//! without it: under `CI=true` it fails (CI installs every tool, see `scripts/test`);
//! elsewhere it prints one `skipped: <reason>` line and goes on without that check.

use std::io::Write;
use std::process::{Command, Stdio};

/// True when `CI` is `true` (or `1`): nothing may be skipped there.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A check that cannot run here for `reason`: a failure under CI, a `skipped:` line elsewhere.
pub fn skip(reason: &str) {
    assert!(!in_ci(), "CI=true, and this check cannot run: {reason}");
    eprintln!("skipped: {reason}");
}

/// True when this process runs as root; otherwise [`skip`]s for `why`.
pub fn root_or_skip(why: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    // `/proc/self` belongs to the process's effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        skip(&format!("not root: {why}"));
    }
    root
}

/// `promtool check metrics` accepts `text` with no findings at all. promtool is `$PROMTOOL`,
/// else `promtool` on `PATH`; without it the check is [`skip`]ped.
pub fn promtool_accepts(text: &str, what: &str) {
    let promtool = std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let spawned = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            skip(&format!(
                "`promtool check metrics` of {what}: cannot run {promtool:?} ({e}); put promtool on PATH or set PROMTOOL"
            ));
            return;
        }
    };
    let mut stdin = child.stdin.take().expect("promtool stdin");
    stdin.write_all(text.as_bytes()).expect("feed promtool");
    drop(stdin);
    let out = child.wait_with_output().expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool rejects {what}: {said}");
    assert_eq!(said.trim(), "", "promtool findings on {what}");
}
