//! Exec mode in a sharded election (README, "Shards"): one child per owned shard, each with
//! `LEADERD_SHARD` and that shard's `LEADERD_FENCE`, each through a keeper of its own that
//! kills it before that shard's validity; started when the shard's term begins, stopped when
//! it ends. One task per shard applies its term's changes in order. A child that exits by
//! itself is told to the elector (which steps its shard down, reason `child_exit`) and, with
//! `on_exit: exit`, stops leaderd with the child's code.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::ExecWork;
use crate::daemon::config::Config;
use crate::daemon::state::TermView;
use crate::election::LeaderWork;
use crate::shard::OwnedShard;

/// What one shard's task does next.
enum Op {
    Extend(TermView),
    /// Stop the child; then say so.
    Stop(oneshot::Sender<()>),
}

/// Where a child that exits by itself is told.
#[derive(Clone)]
pub(crate) struct ChildExits {
    /// To the elector: (shard, fence).
    pub(crate) elector: mpsc::Sender<(u32, u64)>,
    /// With `on_exit: exit`: the first such child's code, and leaderd's shutdown.
    pub(crate) exit: Option<(Arc<OnceLock<i32>>, CancellationToken)>,
}

impl ChildExits {
    /// Shard `shard`'s child of the term `fence` exited with `code` by itself.
    async fn exited(&self, shard: u32, fence: u64, code: i32) {
        let _ = self.elector.send((shard, fence)).await;
        if let Some((first, shutdown)) = &self.exit {
            let _ = first.set(code);
            shutdown.cancel();
        }
    }
}

/// The children of the owned shards.
pub(crate) struct ShardWork {
    config: Config,
    exits: ChildExits,
    /// Each owned shard's task, by shard.
    tasks: Mutex<HashMap<u32, mpsc::UnboundedSender<Op>>>,
    /// The stop of each shard stepped down, until someone waits for it.
    stopping: Mutex<HashMap<u32, oneshot::Receiver<()>>>,
}

fn view(o: &OwnedShard) -> TermView {
    TermView {
        fence: o.fence,
        acquired_at: o.acquired_at,
        valid_until: o.valid_until,
        valid_until_wall: o.valid_until_wall,
    }
}

impl ShardWork {
    /// The children of `config.exec`, one per shard (the command must not be empty), each
    /// exiting by itself told to `exits`.
    pub(crate) fn new(config: &Config, exits: ChildExits) -> Arc<ShardWork> {
        Arc::new(ShardWork {
            config: config.clone(),
            exits,
            tasks: Mutex::default(),
            stopping: Mutex::default(),
        })
    }

    /// Shard `o`'s term began: its child starts.
    pub(crate) fn start(&self, o: &OwnedShard) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut work = ExecWork::for_shard(&self.config, o.shard);
        let (term, shard, exits) = (view(o), o.shard, self.exits.clone());
        tokio::spawn(async move {
            work.start(&term).await;
            // The keeper's reports are read (and logged: child_started, child_ended) as they
            // come; a child that ends by itself ends its shard's term (`ChildExits`).
            let mut running = true;
            loop {
                let op = tokio::select! {
                    op = rx.recv() => op,
                    code = work.exited(), if running => {
                        running = false;
                        exits.exited(shard, term.fence, code).await;
                        continue;
                    }
                };
                match op {
                    Some(Op::Extend(term)) => work.extend(&term).await,
                    Some(Op::Stop(done)) => {
                        work.stop().await;
                        let _ = done.send(());
                        return;
                    }
                    None => return work.stop().await, // nobody can stop it any more
                }
            }
        });
        let old = self.tasks.lock().expect("shard work").insert(o.shard, tx);
        if let Some(old) = old {
            let _ = old.send(Op::Stop(oneshot::channel().0));
        }
    }

    /// Shard `o`'s validity moved forward: so does its keeper's deadline.
    pub(crate) fn extend(&self, o: &OwnedShard) {
        if let Some(task) = self.tasks.lock().expect("shard work").get(&o.shard) {
            let _ = task.send(Op::Extend(view(o)));
        }
    }

    /// Shard `o`'s term ended: its child is stopped ([`Self::stopped`] waits for that).
    pub(crate) fn stop(&self, o: &OwnedShard) {
        let Some(task) = self.tasks.lock().expect("shard work").remove(&o.shard) else {
            return;
        };
        let (done, stopped) = oneshot::channel();
        let _ = task.send(Op::Stop(done));
        self.stopping
            .lock()
            .expect("shard work")
            .insert(o.shard, stopped);
    }

    /// Resolves once shard `o`'s child, stopped by [`Self::stop`], has ended.
    pub(crate) fn stopped(&self, o: &OwnedShard) -> BoxFuture<'static, ()> {
        let stopped = self.stopping.lock().expect("shard work").remove(&o.shard);
        Box::pin(async move {
            if let Some(stopped) = stopped {
                let _ = stopped.await;
            }
        })
    }
}
