//! leaderd: leader election over a Redis lease, as a sidecar daemon and as a library.
//!
//! Library layer:
//! - [`lease`]: the lease primitive (acquire, renew, release, wait) and its fencing tokens.
//! - [`lock`]: a reentrant lock over a lease, with a watchdog that renews it in the
//!   background and reports its loss.
//! - [`conn`]: one Redis endpoint with timeouts and error kinds; [`connector`]: where its
//!   connections come from (one server, the Sentinel master, a cluster); [`release_watch`]:
//!   the release channel listener; [`acl`]: naming the ACL permission a Redis user lacks.
//! - [`election`]: the elector state machine, behind a small lease trait.
//! - [`redlock`]: the lease on a majority of independent Redis masters, with fences that
//!   keep increasing across majorities.
//! - [`state`]: the leadership state and the status document derived from it.
//!
//! Daemon layer:
//! - [`config`]: `config.yaml`, environment and flags, validated.
//! - [`daemon`]: `leaderd run`, wiring everything around one state channel.
//! - [`exec`]: exec mode, the command run only while leading; [`keeper`]: the process that
//!   starts and watches it, killing it on its own when the term's validity passes.
//! - [`health`]: the health check that gates contending and leading.
//! - `hooks`: commands run when leadership changes; `proxy`: the leader-aware TCP proxy.
//! - [`metrics`]: the Prometheus series of the contract in a private registry.
//! - [`http`]: the HTTP probes, status document, event stream and metrics endpoint.
//! - [`publish`]: the leader file, rewritten atomically at every change of the state.
//! - [`shutdown`]: signals; [`logging`]: log output; [`cli`]: the commands.
pub mod acl;
pub mod cli;
pub mod config;
pub mod conn;
pub mod connector;
pub mod daemon;
pub mod election;
pub mod exec;
pub mod health;
pub(crate) mod hooks;
pub mod http;
pub mod keeper;
pub mod lease;
pub mod lock;
pub mod logging;
pub mod metrics;
pub(crate) mod proxy;
pub mod publish;
pub mod redlock;
pub mod release_watch;
pub mod shutdown;
pub mod state;
