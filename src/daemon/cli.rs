//! The command line: its commands and flags, their dispatch and exit codes, and the small
//! commands (`run`, which hands over to `daemon::run`, and `copy-binary`); `status`, its
//! `--watch`, `check-config` and `handover` each have a file of their own.

mod check_config;
mod handover;
mod status;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::daemon::config::{self, Config, Overrides};
use crate::daemon::run as daemon;
use crate::lease::Lease;

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
    let keeps_writing = matches!(
        cli.command,
        Command::Run { .. } | Command::Keeper(_) | Command::Status { watch: true, .. }
    );
    if !keeps_writing {
        end_at_a_closed_pipe();
    }
    match cli.command {
        Command::Run { common, command } => run(overrides(common, command, true)),
        Command::CheckConfig { common, probe } => {
            check_config::check_config(&overrides(common, Vec::new(), true), probe)
        }
        Command::Status {
            common,
            json,
            watch,
        } => status::status(&overrides(common, Vec::new(), false), json, watch),
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

/// A command that prints and ends (`status | head -1`) ends quietly, by SIGPIPE, when its
/// reader has gone, as other Unix tools do: the Rust runtime ignores SIGPIPE, and a print
/// would panic with a backtrace. `run` and `status --watch` keep ignoring it: a closed peer
/// is an error they handle (README "Commands").
fn end_at_a_closed_pipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // Safe: the default action is no handler code, and no other thread runs yet.
    #[allow(unsafe_code)]
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
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

/// Catches the stop signals from now on (`shutdown::catch_early`), or says why it cannot.
fn catch_signals_early() -> Result<crate::daemon::shutdown::Early, i32> {
    crate::daemon::shutdown::catch_early().map_err(|err| {
        eprintln!("leaderd: cannot install signal handlers: {err}");
        EXIT_FAILURE
    })
}

fn run(overrides: Overrides) -> i32 {
    let early = match catch_signals_early() {
        Ok(early) => early,
        Err(code) => return code,
    };
    let config = match load(&overrides) {
        Ok(config) => config,
        Err(code) => return code,
    };
    // `load` has made the Redis client once already (config/rules.rs): its settings are good.
    crate::daemon::logging::init(config.logging.format, &config.logging.level);
    crate::daemon::http::fds::raise_nofile_limit();
    for warning in check_config::secret_file_warnings(&config) {
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
        let signals = match crate::daemon::shutdown::install(early) {
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

/// The budget of a command's calls: a call's, plus what connecting may take, since a
/// one-shot command connects first (a cluster seed that hangs makes that slower than a call).
pub(crate) fn one_shot_budget<L: Lease>(lease: &L, config: &Config) -> std::time::Duration {
    let connects = match config.redis.mode {
        crate::daemon::config::ModeName::Cluster => crate::connector::CLUSTER_CONNECTS,
        _ => 1,
    };
    lease.default_budget() + config.redis.connect_timeout * connects
}
