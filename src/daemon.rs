//! The daemon's wing (cargo feature `daemon`): everything `leaderd run` and the other
//! commands add above the library. Nothing in the library imports from here.
//!
//! - `run`: the elector over the lease, with what runs beside it (`run/beside`: the outputs,
//!   the health checks and the candidacy, started around one state channel and stopped in
//!   one order); `report` turns elector events into state, logs and metrics; `candidacy`
//!   keeps this replica in the candidate registry; `eviction` watches the server's eviction
//!   policy; `shards` reads a sharded election's shards (`run/sharded` runs one).
//! - `config`: the configuration file, flags and environment, validated in one pass.
//! - `cli`: the command line: the dispatch, with `status` (and its `--watch`), `handover` and
//!   `check-config` in files of their own.
//! - `state`: the daemon's state vocabulary (`Snapshot`, `Phase`) and the status document.
//! - Outputs: `http` (probes, status, events), `metrics`, `publish` (the leader file),
//!   `hooks` (commands run on changes), `proxy` (the leader-aware TCP proxy).
//! - Work: `exec` (the command run only while leading) and `keeper` (which kills it in time
//!   even when leaderd cannot), `health` (the health command).
//! - Plumbing: `logging`, `escape` (text kept on one line), `priority` (lower CPU priority
//!   for threads whose work can wait), `shutdown` (signals).

pub(crate) mod candidacy;
pub(crate) mod cli;
pub(crate) mod config;
pub(crate) mod escape;
mod eviction;
pub(crate) mod exec;
pub(crate) mod health;
pub(crate) mod hooks;
pub(crate) mod http;
pub(crate) mod keeper;
pub(crate) mod logging;
pub(crate) mod metrics;
pub(crate) mod priority;
pub(crate) mod proxy;
pub(crate) mod publish;
mod report;
pub(crate) mod run;
pub(crate) mod shards;
pub(crate) mod shutdown;
pub(crate) mod state;
