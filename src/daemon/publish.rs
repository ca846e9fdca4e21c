//! The leader file: the status document written atomically at every change of the state, and
//! once more when a term's validity passes, so the file stops claiming on its own.

use std::io::Write;
use std::path::{Path, PathBuf};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::daemon::state::Snapshot;

/// Writes the status document to `path` at every change of the state channel, atomically
/// (write a temp file beside it, rename). Also rewrites once when the current term's
/// validity passes without a new state (so the file stops claiming). Returns when the channel
/// closes, after writing the last state it saw (the daemon sends `Phase::Stopped` last, then
/// drops the sender). Write errors are logged, rate-limited, and never stop the task.
///
/// The writes run on a thread of their own (`leader-file`) in Linux's `SCHED_IDLE` policy: on
/// a host with many replicas, their file writes at a handover wait for Redis and the
/// successor instead of delaying them.
pub(crate) async fn run_leader_file(
    path: PathBuf,
    name: String,
    identity: String,
    state: watch::Receiver<Snapshot>,
) {
    let runtime = tokio::runtime::Handle::current();
    let (done, finished) = tokio::sync::oneshot::channel::<()>();
    let job = (path.clone(), name.clone(), identity.clone(), state.clone());
    let spawned = std::thread::Builder::new()
        .name("leader-file".into())
        .spawn(move || {
            crate::daemon::priority::lower_this_thread();
            let (path, name, identity, state) = job;
            runtime.block_on(write_each(path, name, identity, state));
            drop(done);
        });
    match spawned {
        Ok(_) => {
            let _ = finished.await;
        }
        // No thread to be had: write from this task (each write blocks it briefly).
        Err(_) => write_each(path, name, identity, state).await,
    }
}

async fn write_each(
    path: PathBuf,
    name: String,
    identity: String,
    mut state: watch::Receiver<Snapshot>,
) {
    let mut file = LeaderFile {
        path,
        name,
        identity,
        last_error: None,
    };
    let mut snapshot = state.borrow_and_update().clone();
    loop {
        file.write(&snapshot);
        match next_update(&mut state, &snapshot).await {
            Some(next) => snapshot = next,
            None => return,
        }
    }
}

/// Waits until the published document may differ from the one made from `last`: a new state
/// on the channel, or the end of `last`'s valid term (then `last` again, which now documents
/// as not leader). `None` once the channel has closed and every state has been seen.
pub(crate) async fn next_update(
    state: &mut watch::Receiver<Snapshot>,
    last: &Snapshot,
) -> Option<Snapshot> {
    if let Some(term) = last.valid_term(Instant::now()) {
        tokio::select! {
            changed = state.changed() => return changed.ok().map(|()| state.borrow_and_update().clone()),
            () = tokio::time::sleep_until(term.valid_until) => return Some(last.clone()),
        }
    }
    state.changed().await.ok()?;
    Some(state.borrow_and_update().clone())
}

/// Replaces `path` with `bytes` so a reader sees the old or the new content, never a mix:
/// writes a new temp file of a random name beside it (created, never opened if it exists,
/// never through a symlink; mode 0644) and renames it over `path`. Creates the parent
/// directories (mode 0755) when missing. No fsync: the document carries its own validity, so
/// a file that a host crash leaves old or empty never claims leadership, and the daemon
/// rewrites it when it starts; 400 fsyncs at a handover of 200 replicas on one host cost more.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let tmp = tmp_path(path)?;
    let dir = parent_dir(path);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)?;
    // 0644 whatever the umask: readers of the status need not be leaderd's user.
    let written = file
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

fn tmp_path(path: &Path) -> std::io::Result<PathBuf> {
    let Some(file_name) = path.file_name() else {
        let msg = format!("{} is not a file path", path.display());
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, msg));
    };
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(file_name);
    tmp.push(format!(".{:016x}.tmp", rand::random::<u64>()));
    Ok(path.with_file_name(tmp))
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The file being published and the last write error, so a persistent failure is logged once.
struct LeaderFile {
    path: PathBuf,
    name: String,
    identity: String,
    last_error: Option<String>,
}

impl LeaderFile {
    /// Blocks: runs on the writer's own thread.
    fn write(&mut self, snapshot: &Snapshot) {
        let doc = snapshot.document(&self.name, &self.identity, Instant::now());
        let mut bytes = serde_json::to_vec(&doc).expect("the status document serializes");
        bytes.push(b'\n');
        match write_atomically(&self.path, &bytes) {
            Ok(()) => self.succeeded(),
            Err(e) => self.failed(e.to_string()),
        }
    }

    fn succeeded(&mut self) {
        if self.last_error.take().is_some() {
            tracing::info!(path = %self.path.display(), "leader file written again");
        }
    }

    fn failed(&mut self, error: String) {
        if self.last_error.as_deref() != Some(error.as_str()) {
            tracing::warn!(path = %self.path.display(), %error, "cannot write the leader file");
            self.last_error = Some(error);
        }
    }
}

#[cfg(test)]
mod tests;
