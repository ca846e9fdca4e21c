//! Owns `RedisServer` (a real, throwaway redis-server process per test) and a tiny blocking RESP client.

use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const START_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
const CMD_TIMEOUT: Duration = Duration::from_secs(5);

/// The server binary the tests run, chosen by `LEADERD_TEST_SERVER` (README, "Servers"):
/// `redis` (the default: `redis-server` on PATH), `valkey8` (`valkey-server` on PATH),
/// `valkey9` (`target/servers/valkey9/valkey-server`, which `scripts/ensure-servers`
/// installs), or the path of a server binary. Sentinel is the same binary with
/// `--sentinel`, a cluster its cluster mode.
pub fn server_bin() -> PathBuf {
    server_binary(&std::env::var("LEADERD_TEST_SERVER").unwrap_or_default())
}

/// The server binary of a matrix name (`redis`, `valkey8`, `valkey9`; empty: `redis`) or a
/// path, as [`server_bin`] reads `LEADERD_TEST_SERVER`. Panics, naming the fix, when missing.
pub fn server_binary(name: &str) -> PathBuf {
    let bin = match name {
        "" | "redis" => PathBuf::from("redis-server"),
        "valkey8" => PathBuf::from("valkey-server"),
        "valkey9" => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/servers/valkey9/valkey-server"),
        path if path.contains('/') => PathBuf::from(path),
        other => panic!(
            "LEADERD_TEST_SERVER={other}: allowed: redis, valkey8, valkey9 or the path of a server binary"
        ),
    };
    if bin.components().count() > 1 && !bin.exists() {
        panic!(
            "server {name}: {} does not exist (scripts/ensure-servers installs it)",
            bin.display()
        );
    }
    bin
}

/// A redis-server child process on 127.0.0.1 with no persistence, killed on drop.
pub struct RedisServer {
    port: u16,
    /// The cluster bus port of a `--cluster-enabled` server, picked like `port` (Redis's
    /// default, port + 10000, may lie in the kernel's ephemeral range).
    cluster_port: Option<u16>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    password: Option<String>,
    /// Set in the server's environment (e.g. a `ShiftedClock`'s preload).
    env: Vec<(String, String)>,
    /// The server binary (`redis-server` unless started with [`RedisServer::start_on`]).
    bin: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Start a fresh server on a free port and wait until it answers PING.
    pub fn start() -> RedisServer {
        Self::start_with_args(&[])
    }

    /// Like `start`, with extra redis-server arguments (e.g. `["--requirepass", "secret"]`).
    /// A `--requirepass X` among them makes `cmd` authenticate with X.
    pub fn start_with_args(extra: &[&str]) -> RedisServer {
        Self::start_with_env(extra, &[])
    }

    /// A fresh server of the matrix name `server` ([`server_binary`]).
    pub fn start_on(server: &str) -> RedisServer {
        Self::start_bin(server_binary(server), &[], &[])
    }

    /// Like `start_with_args`, with `env` set in the server's environment (every incarnation).
    pub fn start_with_env(extra: &[&str], env: &[(String, String)]) -> RedisServer {
        Self::start_bin(server_bin(), extra, env)
    }

    fn start_bin(bin: PathBuf, extra: &[&str], env: &[(String, String)]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("leaderd-redis-")
            .tempdir()
            .expect("create redis temp dir");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let password = extra
            .iter()
            .position(|a| a == "--requirepass")
            .and_then(|i| extra.get(i + 1).cloned());
        let cluster = extra.iter().any(|a| a == "--cluster-enabled");
        let mut server = RedisServer {
            port: super::free_port(),
            cluster_port: cluster.then(super::free_port),
            dir,
            extra,
            password,
            env: env.to_vec(),
            bin,
            child: None,
        };
        // A freshly picked port may be taken by someone else in between: pick another one.
        for attempt in 0..5 {
            match server.try_spawn_and_wait() {
                Ok(()) => return server,
                Err(e) if e.addr_in_use && attempt < 4 => {
                    server.port = super::free_port();
                    server.cluster_port = cluster.then(super::free_port);
                }
                Err(e) => panic!("{}", e.message),
            }
        }
        unreachable!()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The password `cmd` authenticates with, if the server was started with `--requirepass`.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Pid of the running server. Panics when it is stopped.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .expect("redis-server is not running")
            .id()
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Path of the redis-server log (stdout and stderr of every incarnation, appended).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// SIGKILL the server and reap it. No-op when already stopped.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }

    /// Start the server again on the same port (after `stop`). Data is gone (`--save ""`).
    pub fn start_again(&mut self) {
        assert!(
            self.child.is_none(),
            "start_again: redis-server is still running"
        );
        // redis-server sets SO_REUSEADDR, but retry a few times in case the port is busy briefly.
        for attempt in 0..10 {
            match self.try_spawn_and_wait() {
                Ok(()) => return,
                Err(e) if e.addr_in_use && attempt < 9 => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Err(e) => panic!("{}", e.message),
            }
        }
    }

    /// Kill the server and start an empty one on the same port.
    pub fn restart_empty(&mut self) {
        self.stop();
        self.start_again();
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid() as i32), sig).expect("signal redis-server");
    }

    /// Send one command and render its reply (see `Reply::render`). Panics on I/O errors.
    pub fn cmd(&self, args: &[&str]) -> String {
        self.try_cmd(args, CMD_TIMEOUT)
            .unwrap_or_else(|e| panic!("redis command {args:?} on port {} failed: {e}", self.port))
    }

    /// Like `cmd` with a read/write timeout, returning I/O errors (e.g. a timeout while paused).
    pub fn try_cmd(&self, args: &[&str], timeout: Duration) -> io::Result<String> {
        let mut conn = self.connect(timeout)?;
        Ok(conn.call(args)?.render())
    }

    /// A persistent connection to this server, authenticated when it has a password.
    pub fn connect(&self, timeout: Duration) -> io::Result<RespConn> {
        let mut conn = RespConn::connect(self.addr(), timeout)?;
        if let Some(pw) = &self.password {
            if let Reply::Error(e) = conn.call(&["AUTH", pw])? {
                return Err(io::Error::other(format!("AUTH failed: {e}")));
            }
        }
        Ok(conn)
    }

    fn try_spawn_and_wait(&mut self) -> Result<(), StartError> {
        let log_path = self.log_path();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("open redis log");
        let log2 = log.try_clone().expect("clone log handle");
        let port = self.port.to_string();
        let dir = self
            .dir
            .path()
            .to_str()
            .expect("utf-8 temp dir")
            .to_string();
        let mut child = Command::new(&self.bin)
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--dir", &dir, "--daemonize", "no"])
            .args(["--protected-mode", "no"])
            .args(
                self.cluster_port
                    .iter()
                    .flat_map(|p| ["--cluster-port".to_string(), p.to_string()]),
            )
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", self.bin.display()));
        let deadline = Instant::now() + START_TIMEOUT;
        let mut polls = START_TIMEOUT.as_millis() / POLL.as_millis() + 1;
        loop {
            if raw_ping(self.addr()) {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = self.log();
                return Err(StartError {
                    addr_in_use: log.contains("Address already in use"),
                    message: format!(
                        "redis-server on port {port} exited ({status}) before answering PING; log:\n{log}"
                    ),
                });
            }
            polls -= 1;
            if polls == 0 || Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(StartError {
                    addr_in_use: false,
                    message: format!(
                        "redis-server on port {port} did not answer PING within {START_TIMEOUT:?}; log:\n{}",
                        self.log()
                    ),
                });
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

struct StartError {
    addr_in_use: bool,
    message: String,
}

/// Inline `PING` over a raw socket; a server that wants AUTH (`-NOAUTH`) also counts as up.
fn raw_ping(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) if n > 0 => {
            let r = &buf[..n];
            r.starts_with(b"+PONG") || r.starts_with(b"-NOAUTH")
        }
        _ => false,
    }
}

/// A decoded RESP reply (RESP2, plus the common RESP3 types).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

/// The payload of a subscriber's `message` push.
pub fn payload(reply: Reply) -> Option<String> {
    match reply {
        Reply::Array(items) if items.len() == 3 => match &items[2] {
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

impl Reply {
    /// Simple strings and bulk strings as their content, integers in decimal, nil as `(nil)`,
    /// errors as `error: <message>`, arrays as their elements' renderings joined by `\n`.
    pub fn render(&self) -> String {
        match self {
            Reply::Simple(s) => s.clone(),
            Reply::Error(e) => format!("error: {e}"),
            Reply::Integer(i) => i.to_string(),
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Reply::Nil => "(nil)".to_string(),
            Reply::Array(items) => items
                .iter()
                .map(Reply::render)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A blocking RESP connection over std `TcpStream`.
pub struct RespConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RespConn {
    /// Connect with `timeout` as connect, read and write timeout.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<RespConn> {
        let s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        s.set_nodelay(true)?;
        Ok(RespConn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    pub fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.writer.set_read_timeout(Some(timeout))?;
        self.writer.set_write_timeout(Some(timeout))
    }

    /// Send one command and read one reply. Error replies are `Ok(Reply::Error)`.
    pub fn call(&mut self, args: &[&str]) -> io::Result<Reply> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out)?;
        self.read_reply()
    }

    /// Read one more reply without sending anything (a subscriber's next message).
    pub fn read_next(&mut self) -> io::Result<Reply> {
        self.read_reply()
    }

    fn read_line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        let n = self.reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        if !line.ends_with(b"\r\n") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "truncated RESP line",
            ));
        }
        line.truncate(line.len() - 2);
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    fn read_reply(&mut self) -> io::Result<Reply> {
        // Attributes (`|`) precede the reply they describe: skip them, a bounded number of times.
        for _ in 0..8 {
            let line = self.read_line()?;
            let (kind, rest) = line.split_at(line.len().min(1));
            let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("bad RESP: {line:?}"));
            let num = |r: &str| r.parse::<i64>().map_err(|_| bad());
            return Ok(match kind {
                "+" => Reply::Simple(rest.to_string()),
                "-" => Reply::Error(rest.to_string()),
                ":" => Reply::Integer(num(rest)?),
                "," | "(" => Reply::Simple(rest.to_string()),
                "#" => Reply::Simple(if rest == "t" { "true" } else { "false" }.into()),
                "_" => Reply::Nil,
                "$" | "=" | "!" => {
                    let n = num(rest)?;
                    if n < 0 {
                        return Ok(Reply::Nil);
                    }
                    let mut buf = vec![0u8; n as usize + 2];
                    self.reader.read_exact(&mut buf)?;
                    buf.truncate(n as usize);
                    match kind {
                        "!" => Reply::Error(String::from_utf8_lossy(&buf).into_owned()),
                        "=" if buf.len() >= 4 => Reply::Bulk(buf[4..].to_vec()),
                        _ => Reply::Bulk(buf),
                    }
                }
                "*" | "~" | ">" | "%" | "|" => {
                    let n = num(rest)?;
                    if n < 0 {
                        return Ok(Reply::Nil);
                    }
                    let count = if kind == "%" || kind == "|" { n * 2 } else { n };
                    let mut items = Vec::with_capacity(count as usize);
                    for _ in 0..count {
                        items.push(self.read_reply()?);
                    }
                    if kind == "|" {
                        continue;
                    }
                    Reply::Array(items)
                }
                _ => return Err(bad()),
            });
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many RESP attributes",
        ))
    }
}

/// One-shot: connect to `addr`, send `args`, return the rendered reply.
pub fn resp_cmd(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<String> {
    Ok(RespConn::connect(addr, timeout)?.call(args)?.render())
}
