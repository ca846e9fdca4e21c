//! Owns `Daemon`: runs the real built `leaderd` binary with a generated config, plus a blocking HTTP client and CLI runner.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, SigHandler, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const HTTP_TIMEOUT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);

/// Path of the `leaderd` binary cargo built for this integration test.
pub fn leaderd_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_leaderd"))
}

/// What to run. `DaemonOpts::new(name, identity, redis_url)` fills in the fast test timings.
#[derive(Debug, Clone)]
pub struct DaemonOpts {
    pub name: String,
    /// Empty: no `identity` key in the config (the daemon's default applies).
    pub identity: String,
    /// Empty: no `redis.url` key in the config.
    pub redis_url: String,
    pub lease: String,
    pub renew_deadline: String,
    pub retry: String,
    pub command_timeout: String,
    /// YAML merged into the generated config: when it parses as a mapping it is deep-merged
    /// (its values win, e.g. `"election:\n  on_lost: exit\n"`); otherwise appended verbatim.
    pub extra_yaml: String,
    /// Appended after `--`.
    pub exec: Vec<String>,
    /// Placed after `run --config <path>`, before `--`.
    pub extra_args: Vec<String>,
    /// Set in the daemon's environment (inherited `LEADERD_*` variables are removed first).
    pub env: Vec<(String, String)>,
    /// Started as the leader of a process group of its own, with SIGINT and SIGQUIT at their
    /// default dispositions, as a shell starts a foreground job (see [`Daemon::signal_group`]).
    pub own_group: bool,
}

impl Default for DaemonOpts {
    fn default() -> Self {
        DaemonOpts {
            name: "test-election".into(),
            identity: "replica-a".into(),
            redis_url: String::new(),
            lease: "2s".into(),
            renew_deadline: "1400ms".into(),
            retry: "300ms".into(),
            command_timeout: "200ms".into(),
            extra_yaml: String::new(),
            exec: Vec::new(),
            extra_args: Vec::new(),
            env: Vec::new(),
            own_group: false,
        }
    }
}

impl DaemonOpts {
    pub fn new(name: &str, identity: &str, redis_url: &str) -> DaemonOpts {
        DaemonOpts {
            name: name.into(),
            identity: identity.into(),
            redis_url: redis_url.into(),
            ..DaemonOpts::default()
        }
    }
}

/// A running `leaderd run`, with its own temp dir (config, leader file, log). Killed on drop.
pub struct Daemon {
    opts: DaemonOpts,
    dir: tempfile::TempDir,
    http_port: u16,
    child: Child,
    status: Option<ExitStatus>,
}

impl Daemon {
    /// `status --json` through this replica's config, with the identities it lists as
    /// candidates, in its order; `None` when it does not answer a document.
    pub fn listed(&self) -> Option<(Value, Vec<String>)> {
        let out = self.cli(&["status", "--json"]);
        let doc: Value = serde_json::from_str(out.stdout.trim()).ok()?;
        let ids = doc["candidates"]
            .as_array()?
            .iter()
            .map(|c| c["identity"].as_str().unwrap_or("").to_string())
            .collect();
        Some((doc, ids))
    }

    pub fn spawn(opts: &DaemonOpts) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("leaderd-daemon-")
            .tempdir()
            .expect("create daemon temp dir");
        let http_port = super::free_port();
        let config = render_config(opts, http_port, &dir.path().join("leader.json"));
        std::fs::write(dir.path().join("config.yaml"), config).expect("write config.yaml");
        let child = spawn_child(opts, dir.path());
        Daemon {
            opts: opts.clone(),
            dir,
            http_port,
            child,
            status: None,
        }
    }

    /// Spawn again with the same config, HTTP port, leader file and log (appended).
    /// A still-running previous process is SIGKILLed first.
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn_child(&self.opts, self.dir.path());
        self.status = None;
    }

    /// Spawn again like [`Self::restart`], with `extra_yaml` replaced (e.g. a new priority).
    pub fn restart_with_yaml(&mut self, extra_yaml: &str) {
        self.kill();
        self.opts.extra_yaml = extra_yaml.to_string();
        let config = render_config(&self.opts, self.http_port, &self.leader_file());
        std::fs::write(self.config_path(), config).expect("write config.yaml");
        self.child = spawn_child(&self.opts, self.dir.path());
        self.status = None;
    }

    pub fn opts(&self) -> &DaemonOpts {
        &self.opts
    }

    pub fn identity(&self) -> &str {
        &self.opts.identity
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    pub fn http_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.http_port))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    pub fn leader_file(&self) -> PathBuf {
        self.dir.path().join("leader.json")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("leaderd.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Blocking `GET path`; status 0 when the connection or the response fails.
    pub fn get(&self, path: &str) -> (u16, String) {
        http_request(self.http_addr(), "GET", path, HTTP_TIMEOUT)
    }

    /// Any method; status 0 when the connection or the response fails.
    pub fn request(&self, method: &str, path: &str) -> (u16, String) {
        http_request(self.http_addr(), method, path, HTTP_TIMEOUT)
    }

    /// `GET /leader`, parsed, when it answers 200 with JSON.
    pub fn status_doc(&self) -> Option<Value> {
        match self.get("/leader") {
            (200, body) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }

    /// The leader file, parsed, when it exists and is JSON.
    pub fn file_doc(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.leader_file()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Send a signal; errors (e.g. already reaped) are ignored.
    pub fn signal(&self, sig: Signal) {
        if self.status.is_none() {
            let _ = kill(Pid::from_raw(self.child.id() as i32), sig);
        }
    }

    /// Send a signal to its process group (spawned with `own_group`: its group alone).
    pub fn signal_group(&self, sig: Signal) {
        assert!(self.opts.own_group, "not in a process group of its own");
        if self.status.is_none() {
            let _ = killpg(Pid::from_raw(self.child.id() as i32), sig);
        }
    }

    /// The exit code if it has exited (128 + signal number for a signal death), else `None`.
    pub fn try_exit_code(&mut self) -> Option<i32> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.map(exit_code)
    }

    /// Wait up to `timeout` for it to exit; its exit code (signal death: 128 + signal).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let max_polls = timeout.as_millis() / POLL.as_millis() + 2;
        for _ in 0..max_polls {
            if let Some(code) = self.try_exit_code() {
                return Some(code);
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            std::thread::sleep(POLL.min(deadline - now));
        }
        self.try_exit_code()
    }

    pub fn is_running(&mut self) -> bool {
        self.try_exit_code().is_none()
    }

    /// SIGKILL and reap (no-op when it has already exited).
    pub fn kill(&mut self) {
        if self.try_exit_code().is_none() {
            let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
            self.status = self.child.wait().ok();
        }
    }

    /// Every log line that parses as a JSON object.
    pub fn log_events(&self) -> Vec<Value> {
        parse_json_lines(&self.log())
    }

    /// Log events whose `event` field equals `name`.
    pub fn events_named(&self, name: &str) -> Vec<Value> {
        self.log_events()
            .into_iter()
            .filter(|e| super::safety::event_name(e) == Some(name))
            .collect()
    }

    /// `(identity, log events)`, the input `safety::terms_from_logs` takes.
    pub fn safety_log(&self) -> (String, Vec<Value>) {
        (self.opts.identity.clone(), self.log_events())
    }

    /// Run another `leaderd` command (`status`, `check-config`, ...) against this daemon's
    /// config: `leaderd <args[0]> --config <path> <args[1..]>`, with the daemon's environment.
    pub fn cli(&self, args: &[&str]) -> CliOutput {
        let config = self.config_path();
        let mut full: Vec<&str> = Vec::new();
        if let Some((first, rest)) = args.split_first() {
            full.push(first);
            full.push("--config");
            full.push(config.to_str().expect("utf-8 path"));
            full.extend_from_slice(rest);
        }
        let env: Vec<(&str, &str)> = self
            .opts
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        run_cli(&full, &env, Duration::from_secs(10))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!(
                "---- leaderd {} log (last {} lines of {}) ----\n{}",
                self.opts.identity,
                tail.len(),
                self.log_path().display(),
                tail.join("\n")
            );
        }
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

fn yaml_str(s: &str) -> String {
    // A JSON string literal is a valid YAML double-quoted scalar.
    serde_json::to_string(s).expect("json string")
}

pub fn render_config(opts: &DaemonOpts, http_port: u16, leader_file: &Path) -> String {
    let mut y = format!("name: {}\n", yaml_str(&opts.name));
    if !opts.identity.is_empty() {
        y += &format!("identity: {}\n", yaml_str(&opts.identity));
    }
    y += "redis:\n";
    if !opts.redis_url.is_empty() {
        y += &format!("  url: {}\n", yaml_str(&opts.redis_url));
    }
    y += &format!(
        "  connect_timeout: 500ms\n  command_timeout: {}\n",
        yaml_str(&opts.command_timeout)
    );
    y += &format!(
        "election:\n  lease_duration: {}\n  renew_deadline: {}\n  retry_period: {}\n  jitter: 0.2\n",
        yaml_str(&opts.lease),
        yaml_str(&opts.renew_deadline),
        yaml_str(&opts.retry)
    );
    y += &format!(
        "publish:\n  http_addr: \"127.0.0.1:{http_port}\"\n  leader_file: {}\n",
        yaml_str(leader_file.to_str().expect("utf-8 path"))
    );
    y += "logging:\n  format: json\n  level: debug\n";
    if opts.extra_yaml.trim().is_empty() {
        return y;
    }
    match serde_yaml::from_str::<serde_yaml::Value>(&opts.extra_yaml) {
        Ok(extra @ serde_yaml::Value::Mapping(_)) => {
            let mut base: serde_yaml::Value = serde_yaml::from_str(&y).expect("base config yaml");
            merge_yaml(&mut base, extra);
            serde_yaml::to_string(&base).expect("serialize config")
        }
        _ => {
            if !y.ends_with('\n') {
                y.push('\n');
            }
            y + &opts.extra_yaml
        }
    }
}

fn merge_yaml(base: &mut serde_yaml::Value, extra: serde_yaml::Value) {
    match (base, extra) {
        (serde_yaml::Value::Mapping(b), serde_yaml::Value::Mapping(e)) => {
            for (k, v) in e {
                match b.get_mut(&k) {
                    Some(slot) => merge_yaml(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn spawn_child(opts: &DaemonOpts, dir: &Path) -> Child {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("leaderd.log"))
        .expect("open leaderd.log");
    let log2 = log.try_clone().expect("clone log handle");
    let mut cmd = Command::new(leaderd_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .args(&opts.extra_args);
    if !opts.exec.is_empty() {
        cmd.arg("--").args(&opts.exec);
    }
    scrub_env(&mut cmd);
    if opts.own_group {
        cmd.process_group(0);
        // SAFETY: only async-signal-safe calls (sigaction) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [Signal::SIGINT, Signal::SIGQUIT] {
                    nix::sys::signal::signal(sig, SigHandler::SigDfl)?;
                }
                Ok(())
            });
        }
    }
    cmd.envs(opts.env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2));
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", leaderd_bin().display()))
}

fn scrub_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LEADERD_") {
            cmd.env_remove(k);
        }
    }
}

/// Every line of `text` that parses as a JSON object.
pub fn parse_json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter(Value::is_object)
        .collect()
}

/// Output of one finished (or timed-out and killed) `leaderd` invocation.
#[derive(Debug, Clone)]
pub struct CliOutput {
    /// Exit code (signal death: 128 + signal); `None` if it was killed after the timeout.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Run `leaderd <args>` to completion (killed after `timeout`), in a temp dir as working
/// directory, with inherited `LEADERD_*` variables removed and `env` set.
pub fn run_cli(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> CliOutput {
    let dir = tempfile::Builder::new()
        .prefix("leaderd-cli-")
        .tempdir()
        .expect("create cli temp dir");
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let out = std::fs::File::create(&out_path).expect("create stdout file");
    let err = std::fs::File::create(&err_path).expect("create stderr file");
    let mut cmd = Command::new(leaderd_bin());
    cmd.args(args);
    scrub_env(&mut cmd);
    cmd.envs(env.iter().copied())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", leaderd_bin().display()));
    let deadline = Instant::now() + timeout;
    let max_polls = timeout.as_millis() / POLL.as_millis() + 2;
    let mut status = None;
    for _ in 0..max_polls {
        if let Ok(Some(s)) = child.try_wait() {
            status = Some(s);
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(POLL);
    }
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    CliOutput {
        code: status.map(exit_code),
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// A minimal blocking HTTP/1.1 client (`Connection: close`). Returns `(status, body)`, with
/// status 0 when connecting or reading the status line fails. A body still streaming at the
/// timeout (e.g. `/events`) is returned as read so far. Chunked bodies are decoded.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    timeout: Duration,
) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: */*\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    let deadline = Instant::now() + timeout;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    // Bounded by the deadline: each read blocks at most `timeout`.
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    parse_http_response(&raw)
}

pub fn parse_http_response(raw: &[u8]) -> (u16, String) {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return (0, String::new());
    };
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(0);
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        decode_chunked(body)
    } else {
        body.to_vec()
    };
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn decode_chunked(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            break;
        };
        data = &data[eol + 2..];
        if size == 0 {
            break;
        }
        let take = size.min(data.len());
        out.extend_from_slice(&data[..take]);
        if take < size || data.len() < size + 2 {
            break; // truncated (still streaming at the timeout)
        }
        data = &data[size + 2..];
    }
    out
}
