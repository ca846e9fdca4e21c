//! The series of the hooks and of the leader-aware proxy, each label value created at 0.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The `hook` values of `leaderd_hook_runs_total`.
pub(super) const HOOKS: [&str; 3] = ["on_acquired", "on_stepped_down", "on_leader_changed"];
/// The `result` values of `leaderd_hook_runs_total`.
pub(super) const HOOK_RESULTS: [&str; 4] = ["ok", "failed", "timeout", "dropped"];
/// The `target` values of `leaderd_proxy_connections_total`.
pub(super) const PROXY_TARGETS: [&str; 3] = ["local", "remote", "refused"];

/// Hook runs and proxied connections.
pub(crate) struct OutputMetrics {
    hook_runs: IntCounterVec,
    proxy_connections: IntCounterVec,
    /// `leaderd_proxy_active_connections`.
    pub proxy_active: IntGauge,
    /// `leaderd_proxy_bytes_total{direction="in"}`: bytes read from clients.
    pub proxy_bytes_in: IntCounter,
    /// `leaderd_proxy_bytes_total{direction="out"}`: bytes written to clients.
    pub proxy_bytes_out: IntCounter,
}

impl OutputMetrics {
    pub(super) fn new(r: &Registry) -> Self {
        let hook_runs = IntCounterVec::new(
            Opts::new("leaderd_hook_runs_total", "Hook runs, by hook and result."),
            &["hook", "result"],
        )
        .expect("valid counter");
        for hook in HOOKS {
            for result in HOOK_RESULTS {
                hook_runs.with_label_values(&[hook, result]);
            }
        }
        let proxy_connections = super::counters(
            r,
            "leaderd_proxy_connections_total",
            "Connections accepted by the proxy, by where they went.",
            "target",
            &PROXY_TARGETS,
        );
        let bytes = IntCounterVec::new(
            Opts::new(
                "leaderd_proxy_bytes_total",
                "Bytes the proxy passed, in: from clients, out: to clients.",
            ),
            &["direction"],
        )
        .expect("valid counter");
        let active = IntGauge::new(
            "leaderd_proxy_active_connections",
            "Connections the proxy is forwarding now.",
        )
        .expect("valid gauge");
        OutputMetrics {
            hook_runs: super::register(r, hook_runs),
            proxy_connections,
            proxy_active: super::register(r, active),
            proxy_bytes_in: bytes.with_label_values(&["in"]),
            proxy_bytes_out: {
                let out = bytes.with_label_values(&["out"]);
                super::register(r, bytes);
                out
            },
        }
    }

    /// Counts a hook run (or drop): `hook` of [`HOOKS`], `result` of [`HOOK_RESULTS`].
    pub(crate) fn hook_run(&self, hook: &str, result: &str) {
        debug_assert!(HOOK_RESULTS.contains(&result), "unknown result {result}");
        self.hook_runs.with_label_values(&[hook, result]).inc();
    }

    /// Counts a connection: `local`, `remote` or `refused`.
    pub(crate) fn proxy_connection(&self, target: &str) {
        self.proxy_connections.with_label_values(&[target]).inc();
    }
}
