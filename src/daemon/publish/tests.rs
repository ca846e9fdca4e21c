//! The leader file: written atomically and never through a planted link, by an idle-policy
//! thread, replaced at every change of a hand-held state channel and once more when the
//! validity passes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

use super::*;
use crate::daemon::state::samples::{
    assert_document_shape, follower, leader, with_phase, ME, NAME,
};
use crate::daemon::state::Phase;

#[test]
fn writes_beside_and_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/leader.json");
    write_atomically(&path, b"one").unwrap();
    write_atomically(&path, b"two").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"two");
    let left: Vec<_> = std::fs::read_dir(dir.path().join("sub")).unwrap().collect();
    assert_eq!(left.len(), 1, "no temp file is left behind");
}

#[test]
fn a_planted_symlink_is_never_followed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let path = dir.path().join("leader.json");
    std::os::unix::fs::symlink(&victim, dir.path().join("leader.json.tmp")).unwrap();
    for _ in 0..20 {
        write_atomically(&path, b"doc").unwrap();
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o022, 0, "mode {mode:o}");
    assert_eq!(mode & 0o444, 0o444, "mode {mode:o}");
}

#[test]
fn the_writer_thread_runs_in_the_idle_policy_and_writes_the_last_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leader.json");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = watch::channel(Snapshot::starting(true));
    let task = runtime.spawn(run_leader_file(path.clone(), "n".into(), "me".into(), rx));
    let policy = (0..200).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(5));
        writer_policy()
    });
    // `SCHED_IDLE` is 5 (field 41 of /proc/<tid>/stat).
    assert_eq!(policy, Some(5), "the leader-file thread's policy");
    drop(tx);
    runtime.block_on(task).unwrap();
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("\"state\":\"starting\""), "{written}");
}

/// The scheduling policy of this process's `leader-file` thread, if it runs.
fn writer_policy() -> Option<u32> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|t| {
        let t = t.ok()?.path();
        let comm = std::fs::read_to_string(t.join("comm")).ok()?;
        if comm.trim() != "leader-file" {
            return None;
        }
        let stat = std::fs::read_to_string(t.join("stat")).ok()?;
        let after_name = &stat[stat.rfind(')')? + 2..];
        after_name.split(' ').nth(38)?.parse().ok()
    })
}

#[test]
fn a_path_without_a_file_name_is_refused() {
    assert!(write_atomically(Path::new("/"), b"x").is_err());
}

// ---- the file at every change ---------------------------------------------------------

fn read_doc(path: &Path) -> Option<Value> {
    let bytes = std::fs::read(path).ok()?;
    Some(serde_json::from_slice(&bytes).expect("a whole document, never a partial one"))
}

async fn wait_for_doc(path: &Path, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(doc) = read_doc(path).filter(|d| check(d)) {
            return doc;
        }
        assert!(Instant::now() < deadline, "{what}: {:?}", read_doc(path));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Drops the state channel and waits (bounded) for the writer to finish.
async fn stop(tx: watch::Sender<Snapshot>, task: JoinHandle<()>) {
    drop(tx);
    timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

fn spawn_file(path: PathBuf, first: Snapshot) -> (watch::Sender<Snapshot>, JoinHandle<()>) {
    let (tx, rx) = watch::channel(first);
    let task = tokio::spawn(run_leader_file(path, NAME.into(), ME.into(), rx));
    (tx, task)
}

#[tokio::test]
async fn leader_file_is_replaced_at_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run/leaderd/leader.json");
    let (tx, task) = spawn_file(path.clone(), Snapshot::starting(true));
    wait_for_doc(&path, "starting", |d| d["state"] == "starting").await;

    for fence in 1..50u64 {
        let mut snapshot = follower();
        snapshot.fence = Some(fence);
        tx.send(snapshot).unwrap();
        // Every read parses: the file is never seen half written.
        let _ = read_doc(&path);
        tokio::task::yield_now().await;
    }
    let doc = wait_for_doc(&path, "last follower", |d| d["fence"] == 49).await;
    assert_document_shape(&doc);
    assert_eq!(doc["leader"], "pod-b");
    assert!(std::fs::read(&path).unwrap().ends_with(b"}\n"));
    assert!(!dir.path().join("run/leaderd/leader.json.tmp").exists());
    stop(tx, task).await;
}

#[tokio::test]
async fn leader_file_stops_claiming_when_the_validity_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leader.json");
    let (tx, task) = spawn_file(path.clone(), follower());
    wait_for_doc(&path, "follower", |d| d["state"] == "follower").await;

    tx.send(leader(Duration::from_secs(1))).unwrap();
    let doc = wait_for_doc(&path, "leader", |d| d["is_leader"] == true).await;
    assert_eq!(doc["fence"], 7);
    let doc = wait_for_doc(&path, "expired", |d| d["is_leader"] == false).await;
    assert_eq!(doc["state"], "stepping_down");
    assert!(doc["lease_valid_until_ms"].is_null());
    stop(tx, task).await;
}

#[tokio::test]
async fn leader_file_ends_stopped_when_the_sender_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leader.json");
    let (tx, task) = spawn_file(path.clone(), leader(Duration::from_secs(30)));
    wait_for_doc(&path, "leader", |d| d["is_leader"] == true).await;

    tx.send(with_phase(Phase::Stopped)).unwrap();
    drop(tx);
    timeout(Duration::from_secs(5), task)
        .await
        .expect("the task returns when the channel closes")
        .unwrap();
    let doc = read_doc(&path).unwrap();
    assert_eq!(doc["state"], "stopped");
    assert_eq!(doc["is_leader"], false);
}
