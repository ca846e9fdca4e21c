//! `leaderd check-config [--probe]`: the effective configuration printed (secrets redacted)
//! with its warnings, or every problem in it; with `--probe`, what each Redis server says
//! about itself.

use super::{load, one_shot_budget, runtime, EXIT_FAILURE, EXIT_USAGE};
use crate::daemon::config::{Config, Overrides};
use crate::daemon::run as daemon;
use crate::lease::Lease;

/// Runs the command; returns its exit code.
pub(super) fn check_config(overrides: &Overrides, probe: bool) -> i32 {
    let config = match load(overrides) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let lease = match daemon::backend(&config) {
        Ok(lease) => lease,
        Err(problem) => {
            eprintln!("leaderd: {problem}");
            return EXIT_USAGE;
        }
    };
    let warnings = secret_file_warnings(&config).into_iter();
    for warning in warnings.chain(daemon::warnings(&config)) {
        eprintln!("leaderd: warning: {warning}");
    }
    print!("{}", config.to_redacted_yaml());
    if probe {
        let budget = one_shot_budget(&lease, &config);
        return runtime().block_on(probe_redis(&lease, budget));
    }
    0
}

/// Connects (one `observe`) and reports each server's `maxmemory-policy`, and what it is
/// and offers (README, "Servers"), on stderr.
async fn probe_redis(lease: &crate::Backend, budget: std::time::Duration) -> i32 {
    if let Err(err) = lease.observe(budget).await {
        eprintln!("leaderd: probe: Redis does not answer: {err}");
        return EXIT_FAILURE;
    }
    for mut policy in lease.eviction_policies() {
        let read = tokio::time::timeout(budget, policy.wait_for(Option::is_some)).await;
        match read.ok().and_then(|r| r.ok()).and_then(|p| p.clone()) {
            Some(p) if p.at_risk() => eprintln!(
                "leaderd: probe: warning: Redis {} has maxmemory-policy {}: it can evict {}",
                p.server,
                p.policy,
                p.can_lose()
            ),
            Some(p) => eprintln!(
                "leaderd: probe: Redis {} has maxmemory-policy noeviction",
                p.server
            ),
            None => eprintln!("leaderd: probe: a server's maxmemory-policy could not be read"),
        }
    }
    for mut info in lease.server_infos() {
        let read = tokio::time::timeout(budget, info.wait_for(Option::is_some)).await;
        match read.ok().and_then(|r| r.ok()).and_then(|i| i.clone()) {
            Some(info) => eprintln!("leaderd: probe: server {info}"),
            None => eprintln!(
                "leaderd: probe: a server's name and version could not be read (INFO server)"
            ),
        }
    }
    0
}

/// One line per secret file (`redis.password_file`, `redis.tls.key_file`) that users other
/// than its owner may read.
pub(super) fn secret_file_warnings(config: &Config) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let key_file = config.redis.tls.as_ref().and_then(|t| t.key_file.as_ref());
    [
        ("redis.password_file", config.redis.password_file.as_ref()),
        ("redis.tls.key_file", key_file),
    ]
    .into_iter()
    .filter_map(|(key, path)| {
        let path = path?;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        (mode & 0o044 != 0).then(|| {
            format!(
                "{key}: {} is readable by group or others (mode {:o}); chmod 600 it",
                path.display(),
                mode & 0o777
            )
        })
    })
    .collect()
}
