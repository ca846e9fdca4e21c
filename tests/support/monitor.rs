//! Owns `Monitor`: Redis's MONITOR stream read on its own thread, so a test can count what each
//! client connection sent (scripts' inner commands left out), and `clients` to tell which
//! connection belongs to whom (`CLIENT LIST`: user, subscriber or not).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// One command as MONITOR printed it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Redis server time, seconds.
    pub ts: f64,
    /// The client's address (`ip:port`), or `lua` for a script's own commands.
    pub addr: String,
    /// The command and its arguments.
    pub args: Vec<String>,
}

impl Seen {
    /// The command name, upper case.
    pub fn cmd(&self) -> String {
        self.args
            .first()
            .map(|c| c.to_uppercase())
            .unwrap_or_default()
    }
}

/// MONITOR on a connection of its own; stopped on drop.
pub struct Monitor {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    stream: TcpStream,
    handle: Option<JoinHandle<()>>,
}

impl Monitor {
    pub fn start(addr: SocketAddr) -> Monitor {
        let mut stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("monitor: connect");
        stream.write_all(b"MONITOR\r\n").expect("monitor: send");
        let mut reader = BufReader::new(stream.try_clone().expect("monitor: clone"));
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("monitor: +OK");
        assert!(ok.starts_with("+OK"), "MONITOR answered {ok:?}");
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let handle = thread::spawn(move || {
            let mut line = String::new();
            while !stop2.load(Ordering::SeqCst) {
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) if line.ends_with('\n') => {
                        if let Some(s) = parse(line.trim_end()) {
                            seen2.lock().unwrap().push(s);
                        }
                        line.clear();
                    }
                    Ok(_) => {}
                    Err(_) => {} // timeout: check `stop`, keep the partial line
                }
            }
        });
        Monitor {
            seen,
            stop,
            stream,
            handle: Some(handle),
        }
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// `+1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" "abc" "2"`.
fn parse(line: &str) -> Option<Seen> {
    let rest = line.strip_prefix('+')?;
    let (ts, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix('[')?;
    let (client, rest) = rest.split_once(']')?;
    let addr = client.split_whitespace().nth(1)?.to_string();
    Some(Seen {
        ts: ts.parse().ok()?,
        addr,
        args: quoted(rest),
    })
}

/// The double-quoted, backslash-escaped tokens of MONITOR's output.
fn quoted(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut tok = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        tok.push(n);
                    }
                }
                '"' => break,
                other => tok.push(other),
            }
        }
        out.push(tok);
    }
    out
}

/// One line of `CLIENT LIST`, by field.
pub type Client = HashMap<String, String>;

/// The clients connected now (`CLIENT LIST`), each with its fields (`addr`, `user`, `sub`...).
pub fn clients(list: &str) -> Vec<Client> {
    list.lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}
