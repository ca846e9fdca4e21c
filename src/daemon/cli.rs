//! The command line: `run`, `check-config`, `status` and `handover`, their flags, and their
//! exit codes.

mod handover;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::daemon::candidacy::Listed;
use crate::daemon::config::{self, Config, Overrides};
use crate::daemon::run as daemon;
use crate::lease::{Heartbeat, Lease, LeaseError, Observed};

mod watch;

/// Exit code of a bad configuration or bad usage.
pub(crate) const EXIT_USAGE: i32 = 2;
/// Exit code of a failure that cannot be recovered from.
pub(crate) const EXIT_FAILURE: i32 = 1;
/// Exit code of `status` when nobody holds the lease.
pub(crate) const EXIT_VACANT: i32 = 3;

/// Leader election over a Redis lease.
#[derive(Debug, Parser)]
#[command(name = "leaderd", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Contend for the lease and publish leadership until SIGTERM.
    Run {
        #[command(flatten)]
        common: Overrides,
        /// Run COMMAND only while this replica leads (exec mode).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Print the effective configuration (secrets redacted), or every problem in it.
    CheckConfig {
        #[command(flatten)]
        common: Overrides,
        /// Also connect to Redis and report each server's maxmemory-policy (exit 1 when
        /// Redis does not answer).
        #[arg(long)]
        probe: bool,
    },
    /// Ask Redis who holds the lease.
    Status {
        #[command(flatten)]
        common: Overrides,
        /// Print a JSON object instead of a line of text.
        #[arg(long)]
        json: bool,
        /// Keep the output on screen and redraw it at every change, until SIGINT/SIGTERM;
        /// with --json, one JSON document per change, one per line.
        #[arg(long)]
        watch: bool,
    },
    /// Ask the leader to hand its leadership over (to --to, or the best successor) and
    /// wait until the new term has begun.
    Handover {
        #[command(flatten)]
        common: Overrides,
        /// The candidate to hand over to [default: the best successor].
        #[arg(long, value_name = "IDENTITY")]
        to: Option<String>,
        /// How long to wait for the new term, e.g. 5s [default: election.lease_duration].
        #[arg(long, value_name = "DURATION")]
        timeout: Option<String>,
        /// Print a JSON object instead of a line of text.
        #[arg(long)]
        json: bool,
    },
    /// Copy this leaderd binary to DEST (an init container putting leaderd into another
    /// image for exec mode: the leaderd image has no shell and no cp).
    CopyBinary {
        /// Where to write the executable, e.g. /opt/leaderd/bin/leaderd.
        dest: PathBuf,
    },
    /// Internal: the keeper of an exec-mode child (started by `run`, not by users).
    #[command(name = "__keeper", hide = true)]
    Keeper(crate::daemon::keeper::KeeperArgs),
}

/// `check_programs`: the command runs or checks the hooks and exec (check-config, run).
fn overrides(common: Overrides, exec_command: Vec<String>, check_programs: bool) -> Overrides {
    Overrides {
        exec_command,
        check_programs,
        ..common
    }
}

fn load(overrides: &Overrides) -> Result<Config, i32> {
    match config::load(overrides, &|key| std::env::var(key)) {
        Ok(config) => {
            crate::daemon::exec::remember_secret_vars(&config);
            Ok(config)
        }
        Err(err) => Err(report(&err.problems)),
    }
}

fn report(problems: &[String]) -> i32 {
    for problem in problems {
        // One line each, whatever a value quoted in it holds.
        eprintln!("leaderd: {}", crate::daemon::escape::escape_text(problem));
    }
    EXIT_USAGE
}

/// Parses the command line and runs the command; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err)
            if err.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            let _ = err.print();
            return EXIT_USAGE;
        }
        Err(err) if err.use_stderr() => {
            eprintln!("leaderd: {}", usage_error(&err.to_string()));
            return EXIT_USAGE;
        }
        Err(help_or_version) => {
            let _ = help_or_version.print();
            return 0;
        }
    };
    match cli.command {
        Command::Run { common, command } => run(overrides(common, command, true)),
        Command::CheckConfig { common, probe } => {
            check_config(&overrides(common, Vec::new(), true), probe)
        }
        Command::Status {
            common,
            json,
            watch,
        } => status(&overrides(common, Vec::new(), false), json, watch),
        Command::Handover {
            common,
            to,
            timeout,
            json,
        } => handover::handover(&overrides(common, Vec::new(), false), to, timeout, json),
        Command::CopyBinary { dest } => copy_binary(&dest),
        Command::Keeper(args) => crate::daemon::keeper::main(args),
    }
}

/// A usage error in one line: what is wrong, and the usage of the command.
fn usage_error(text: &str) -> String {
    let what = text.lines().next().unwrap_or_default();
    let what = what.strip_prefix("error: ").unwrap_or(what);
    match text.lines().find_map(|l| l.strip_prefix("Usage: ")) {
        Some(usage) => format!("{what} (usage: {usage}; see --help)"),
        None => what.to_string(),
    }
}

fn copy_binary(dest: &std::path::Path) -> i32 {
    use std::os::unix::fs::PermissionsExt;
    let copied = std::env::current_exe()
        .and_then(|exe| std::fs::copy(exe, dest))
        .and_then(|_| std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755)));
    match copied {
        Ok(()) => 0,
        Err(err) => {
            eprintln!(
                "leaderd: cannot copy the binary to {}: {err}",
                dest.display()
            );
            EXIT_FAILURE
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn run(overrides: Overrides) -> i32 {
    let config = match load(&overrides) {
        Ok(config) => config,
        Err(code) => return code,
    };
    // `load` has made the Redis client once already (config/rules.rs): its settings are good.
    crate::daemon::logging::init(config.logging.format, &config.logging.level);
    crate::daemon::http::fds::raise_nofile_limit();
    for warning in secret_file_warnings(&config) {
        tracing::warn!("{warning}");
    }
    if overrides.redis_url.as_deref().is_some_and(has_password) {
        tracing::warn!("--redis-url carries a password, which every user can read in `ps`; use LEADERD_REDIS_PASSWORD or redis.password_file");
    }
    runtime().block_on(async move {
        let listener = match daemon::bind_http(&config).await {
            Ok(listener) => listener,
            Err(err) => return fail(&err),
        };
        let signals = match crate::daemon::shutdown::install() {
            Ok(signals) => signals,
            Err(err) => {
                eprintln!("leaderd: cannot install signal handlers: {err}");
                return EXIT_FAILURE;
            }
        };
        match daemon::run(config, listener, signals.shutdown, signals.yields).await {
            Ok(code) => code,
            Err(err) => fail(&err),
        }
    })
}

/// One line per secret file (`redis.password_file`, `redis.tls.key_file`) that users other
/// than its owner may read.
fn secret_file_warnings(config: &Config) -> Vec<String> {
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

/// True when a URL's userinfo holds a password (`scheme://user:pass@host`).
fn has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
}

/// Reports a fatal error in one line: a log line once logging is set up (with
/// `--log-format json`, every stderr line stays a JSON object), a plain one before.
fn fail(err: &daemon::DaemonError) -> i32 {
    if tracing::dispatcher::has_been_set() {
        tracing::error!(event = "fatal", error = %err, "{err}");
    } else {
        eprintln!("leaderd: {err}");
    }
    match err {
        daemon::DaemonError::Listen { .. } | daemon::DaemonError::ProxyListen(_) => EXIT_FAILURE,
        _ => EXIT_USAGE,
    }
}

fn check_config(overrides: &Overrides, probe: bool) -> i32 {
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

fn status(overrides: &Overrides, json: bool, watch: bool) -> i32 {
    let config = match load(overrides) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let lease = match daemon::backend(&config) {
        Ok(lease) => lease,
        Err(err) => {
            eprintln!("leaderd: {err}");
            return EXIT_USAGE;
        }
    };
    if watch {
        return watch::run(&config, lease, json);
    }
    let budget = one_shot_budget(&lease, &config);
    match runtime().block_on(read_status(&lease, budget)) {
        Ok((seen, candidates)) => print_status(&config.name, &seen, json, &candidates),
        Err(err) => {
            print_status_error(&config.name, &err, json);
            EXIT_FAILURE
        }
    }
}

/// The budget of a command's calls: a call's, plus what connecting may take, since a
/// one-shot command connects first (a cluster seed that hangs makes that slower than a call).
pub(crate) fn one_shot_budget<L: Lease>(lease: &L, config: &Config) -> std::time::Duration {
    let connects = match config.redis.mode {
        crate::daemon::config::RedisMode::Cluster { .. } => crate::connector::CLUSTER_CONNECTS,
        _ => 1,
    };
    lease.default_budget() + config.redis.connect_timeout * connects
}

/// What `status` shows: the lease, and the candidates in the order of docs/operating.md#candidates.
async fn read_status<L: Lease>(
    lease: &L,
    budget: std::time::Duration,
) -> Result<(Observed, Vec<Listed>), LeaseError> {
    let seen = lease.observe(budget).await?;
    let roster = lease
        .heartbeat(Heartbeat::Read, budget)
        .await
        .unwrap_or_default();
    let leader = seen.holder().map(|h| h.holder.clone());
    Ok((
        seen,
        crate::daemon::candidacy::listed(&roster, leader.as_deref()),
    ))
}

fn print_status(name: &str, seen: &Observed, json: bool, candidates: &[Listed]) -> i32 {
    if json {
        println!("{}", status_json(name, seen, candidates));
    } else {
        print!("{}", status_text(name, seen, candidates));
    }
    status_code(seen)
}

/// Exit code of `status`: 0 held, 3 otherwise.
fn status_code(seen: &Observed) -> i32 {
    match seen {
        Observed::Held(_) => 0,
        _ => EXIT_VACANT,
    }
}

/// Milliseconds until the lease may be free, as `status` shows them (none when vacant).
fn remaining_ms(seen: &Observed) -> Option<u64> {
    match seen {
        Observed::Vacant => None,
        other => other.remaining().map(|d| d.as_millis() as u64),
    }
}

/// The `status --json` document, on one line.
fn status_json(name: &str, seen: &Observed, candidates: &[Listed]) -> String {
    let state = match seen {
        Observed::Vacant => "vacant",
        Observed::Quarantined { .. } => "quarantined",
        Observed::Held(_) => "held",
        Observed::Reserved { .. } => "reserved",
    };
    let holder = seen.holder();
    let mut doc = serde_json::json!({
        "name": name,
        "state": state,
        "holder": holder.map(|h| bounded(&h.holder)),
        "fence": holder.map(|h| h.fence),
        "remaining_ms": remaining_ms(seen),
    });
    if let Observed::Reserved { for_identity, .. } = seen {
        doc["reserved_for"] = serde_json::json!(for_identity);
    }
    // The candidates keep the field order of docs/operating.md#candidates (a `Value` would sort
    // them).
    let mut text = doc.to_string();
    text.pop();
    let list = serde_json::to_string(candidates).unwrap_or_else(|_| "[]".into());
    format!("{text},\"candidates\":{list}}}")
}

/// The text of `status`: the first line, then one line per candidate (each line ends in a
/// newline).
fn status_text(name: &str, seen: &Observed, candidates: &[Listed]) -> String {
    let left = match remaining_ms(seen) {
        Some(ms) => format!("{ms}ms left"),
        None => "no TTL".to_string(),
    };
    let mut text = match seen {
        Observed::Vacant => format!("{name}: vacant (nobody holds the lease)\n"),
        Observed::Quarantined { .. } => {
            format!("{name}: quarantined after data loss or first start ({left})\n")
        }
        Observed::Held(h) => format!(
            "{name}: held by {} (fence {}, {left})\n",
            shown_identity(&h.holder),
            h.fence,
        ),
        Observed::Reserved { for_identity, .. } => format!(
            "{name}: reserved for {} ({left})\n",
            shown_identity(for_identity),
        ),
    };
    for c in candidates {
        text += &crate::daemon::candidacy::line(c);
        text.push('\n');
    }
    text
}

/// At most [`MAX_SHOWN`] bytes of a value from Redis (cut at a character boundary).
fn bounded(value: &str) -> &str {
    let mut end = value.len().min(MAX_SHOWN);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// A holder as printed in text: bounded, control characters escaped.
fn shown_identity(value: &str) -> String {
    crate::daemon::escape::escape_text(bounded(value))
}

/// The longest identity shown (the bound on identities, docs/protocol.md#messages).
const MAX_SHOWN: usize = 256;

fn print_status_error(name: &str, err: &LeaseError, json: bool) {
    if json {
        println!("{}", status_error_json(name, err));
    }
    eprintln!("{}", status_error_line(name, err));
}

/// The `status --json` document when Redis cannot be read.
fn status_error_json(name: &str, err: &LeaseError) -> String {
    serde_json::json!({"name": name, "error": err.to_string()}).to_string()
}

/// The line `status` prints when Redis cannot be read.
fn status_error_line(name: &str, err: &LeaseError) -> String {
    format!("leaderd: status of {name}: {err}")
}
