//! The command line: `run`, `check-config` and `status`, their flags, and their exit codes.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, Config, Overrides};
use crate::daemon;
use crate::daemon::candidacy::Listed;
use crate::lease::{Heartbeat, Lease, LeaseError, Observed};

/// Exit code of a bad configuration or bad usage.
pub const EXIT_USAGE: i32 = 2;
/// Exit code of a failure that cannot be recovered from.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code of `status` when nobody holds the lease.
pub const EXIT_VACANT: i32 = 3;

/// Leader election over a Redis lease.
#[derive(Debug, Parser)]
#[command(name = "leaderd", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Contend for the lease and publish leadership until SIGTERM.
    Run {
        #[command(flatten)]
        common: CommonFlags,
        /// Run COMMAND only while this replica leads (exec mode).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Print the effective configuration (secrets redacted), or every problem in it.
    CheckConfig {
        #[command(flatten)]
        common: CommonFlags,
    },
    /// Ask Redis who holds the lease.
    Status {
        #[command(flatten)]
        common: CommonFlags,
        /// Print a JSON object instead of a line of text.
        #[arg(long)]
        json: bool,
    },
    /// Internal: the keeper of an exec-mode child (started by `run`, not by users).
    #[command(name = "__keeper", hide = true)]
    Keeper(crate::keeper::KeeperArgs),
}

#[derive(Debug, Args)]
struct CommonFlags {
    /// Configuration file [default: $LEADERD_CONFIG, else ./config.yaml]
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Election name.
    #[arg(long)]
    name: Option<String>,
    /// This replica's identity.
    #[arg(long)]
    identity: Option<String>,
    /// Redis URL (mode single).
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// Lease TTL, e.g. 15s.
    #[arg(long, value_name = "DURATION")]
    lease_duration: Option<String>,
    /// Step down without a renew for this long, e.g. 10s.
    #[arg(long, value_name = "DURATION")]
    renew_deadline: Option<String>,
    /// Renew and poll interval, e.g. 2s.
    #[arg(long, value_name = "DURATION")]
    retry_period: Option<String>,
    /// HTTP address, e.g. 0.0.0.0:9090; empty for none.
    #[arg(long, value_name = "ADDR")]
    http_addr: Option<String>,
    /// Leader file path; empty for none.
    #[arg(long, value_name = "PATH")]
    leader_file: Option<String>,
    /// text or json.
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// trace, debug, info, warn or error.
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
}

impl CommonFlags {
    fn overrides(self, exec_command: Vec<String>) -> Overrides {
        Overrides {
            config_path: self.config,
            name: self.name,
            identity: self.identity,
            redis_url: self.redis_url,
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            http_addr: self.http_addr,
            leader_file: self.leader_file,
            log_format: self.log_format,
            log_level: self.log_level,
            exec_command,
        }
    }
}

fn load(overrides: &Overrides) -> Result<Config, i32> {
    config::load(overrides, &|key| std::env::var(key).ok()).map_err(|err| {
        for problem in &err.problems {
            eprintln!("leaderd: {problem}");
        }
        EXIT_USAGE
    })
}

/// Parses the command line and runs the command; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() { EXIT_USAGE } else { 0 };
        }
    };
    match cli.command {
        Command::Run { common, command } => run(common.overrides(command)),
        Command::CheckConfig { common } => check_config(&common.overrides(Vec::new())),
        Command::Status { common, json } => status(&common.overrides(Vec::new()), json),
        Command::Keeper(args) => crate::keeper::main(args),
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
    if let Err(problem) = daemon::backend(&config) {
        eprintln!("leaderd: {problem}");
        return EXIT_USAGE;
    }
    crate::logging::init(config.logging.format, &config.logging.level);
    runtime().block_on(async move {
        let listener = match daemon::bind_http(&config).await {
            Ok(listener) => listener,
            Err(err) => return fail(&err),
        };
        let signals = match crate::shutdown::install() {
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

fn fail(err: &daemon::DaemonError) -> i32 {
    tracing::error!(event = "fatal", error = %err, "{err}");
    eprintln!("leaderd: {err}");
    match err {
        daemon::DaemonError::Listen { .. } => EXIT_FAILURE,
        _ => EXIT_USAGE,
    }
}

fn check_config(overrides: &Overrides) -> i32 {
    let config = match load(overrides) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Err(problem) = daemon::backend(&config) {
        eprintln!("leaderd: {problem}");
        return EXIT_USAGE;
    }
    print!("{}", config.to_redacted_yaml());
    0
}

fn status(overrides: &Overrides, json: bool) -> i32 {
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
    let read = async {
        let seen = lease.observe(lease.default_budget()).await?;
        let roster = lease
            .heartbeat(Heartbeat::Read, lease.default_budget())
            .await
            .unwrap_or_default();
        Ok::<_, LeaseError>((seen, roster))
    };
    match runtime().block_on(read) {
        Ok((seen, roster)) => {
            let leader = seen.holder().map(|h| h.holder.clone());
            let candidates = daemon::candidacy::listed(&roster, leader.as_deref());
            print_status(&config.name, &seen, json, &candidates)
        }
        Err(err) => {
            print_status_error(&config.name, &err, json);
            EXIT_FAILURE
        }
    }
}

fn print_status(name: &str, seen: &Observed, json: bool, candidates: &[Listed]) -> i32 {
    let state = match seen {
        Observed::Vacant => "vacant",
        Observed::Quarantined { .. } => "quarantined",
        Observed::Held(_) => "held",
        Observed::Reserved { .. } => "reserved",
    };
    let remaining_ms = match seen {
        Observed::Vacant => None,
        other => other.remaining().map(|d| d.as_millis() as u64),
    };
    let holder = seen.holder();
    if json {
        let mut doc = serde_json::json!({
            "name": name,
            "state": state,
            "holder": holder.map(|h| h.holder.clone()),
            "fence": holder.map(|h| h.fence),
            "remaining_ms": remaining_ms,
        });
        if let Observed::Reserved { for_identity, .. } = seen {
            doc["reserved_for"] = serde_json::json!(for_identity);
        }
        // The candidates keep the contract's field order (a `Value` would sort them).
        let mut text = doc.to_string();
        text.pop();
        let list = serde_json::to_string(candidates).unwrap_or_else(|_| "[]".into());
        println!("{text},\"candidates\":{list}}}");
    } else {
        match seen {
            Observed::Vacant => println!("{name}: vacant (nobody holds the lease)"),
            Observed::Quarantined { .. } => println!(
                "{name}: quarantined after data loss or first start ({}ms left)",
                remaining_ms.unwrap_or(0)
            ),
            Observed::Held(h) => println!(
                "{name}: held by {} (fence {}, {}ms left)",
                h.holder,
                h.fence,
                remaining_ms.map_or("no TTL".to_string(), |ms| ms.to_string())
            ),
            Observed::Reserved { for_identity, .. } => println!(
                "{name}: reserved for {for_identity} ({}ms left)",
                remaining_ms.unwrap_or(0)
            ),
        }
        for c in candidates {
            println!("{}", daemon::candidacy::line(c));
        }
    }
    if state == "held" {
        0
    } else {
        EXIT_VACANT
    }
}

fn print_status_error(name: &str, err: &LeaseError, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({"name": name, "error": err.to_string()})
        );
    }
    eprintln!("leaderd: status of {name}: {err}");
}
