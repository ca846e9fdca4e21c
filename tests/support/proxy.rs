//! Owns `Proxy`: a fault-injecting TCP proxy on 127.0.0.1 (latency, cut, blackhole of all or
//! of some connections) on its own std threads.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Idle sockets wake up this often to notice a closed connection or a stopped proxy.
const READ_TICK: Duration = Duration::from_millis(500);
const BLACKHOLE_TICK: Duration = Duration::from_millis(100);

/// A TCP proxy from `127.0.0.1:<port>` to a target address. Stopped on drop.
///
/// All controls take `&self`, so a proxy can be shared (`Arc<Proxy>`) across threads.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Mutex<Option<Acceptor>>,
}

struct Shared {
    target: SocketAddr,
    latency: Mutex<Duration>,
    /// true while blackholed; writers wait on `blackhole_cv` until it turns false.
    blackhole: Mutex<bool>,
    blackhole_cv: Condvar,
    cut: AtomicBool,
    /// Connections whose client sent this (ASCII, any case) are blackholed.
    hole_pattern: Mutex<Option<Vec<u8>>>,
    stopped: AtomicBool,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

struct Conn {
    client: TcpStream,
    upstream: TcpStream,
    closed: AtomicBool,
    /// The first bytes the client sent (to match `hole_pattern` against).
    sent: Mutex<Vec<u8>>,
    holed: AtomicBool,
}

/// How much of what a client sends is kept to match a blackhole pattern against.
const SENT_KEPT: usize = 4096;

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

impl Conn {
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Keeps the start of what the client sent; blackholes the connection once it matches.
    fn note_sent(&self, data: &[u8], shared: &Shared) {
        let mut sent = self.sent.lock().unwrap();
        if sent.len() < SENT_KEPT {
            let take = data.len().min(SENT_KEPT - sent.len());
            sent.extend_from_slice(&data[..take]);
        }
        if let Some(p) = shared.hole_pattern.lock().unwrap().as_deref() {
            if contains_ignore_case(&sent, p) {
                self.holed.store(true, Ordering::SeqCst);
            }
        }
    }
}

/// Held by the four pump threads of one connection; the last one out unregisters it.
struct ConnGuard {
    id: u64,
    conn: Arc<Conn>,
    shared: Arc<Shared>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.conn.close();
        self.shared.conns.lock().unwrap().remove(&self.id);
    }
}

struct Acceptor {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl Proxy {
    /// Start a proxy on a free port of 127.0.0.1 forwarding to `target`.
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy: bind 127.0.0.1:0");
        let port = listener.local_addr().expect("proxy: local_addr").port();
        let shared = Arc::new(Shared {
            target,
            latency: Mutex::new(Duration::ZERO),
            blackhole: Mutex::new(false),
            blackhole_cv: Condvar::new(),
            cut: AtomicBool::new(false),
            hole_pattern: Mutex::new(None),
            stopped: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
        });
        let acceptor = spawn_acceptor(listener, shared.clone());
        Proxy {
            port,
            shared,
            acceptor: Mutex::new(Some(acceptor)),
        }
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

    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// Delay every chunk forwarded, in each direction, by `latency` (order is kept; the delay
    /// counts from when the proxy read the chunk, so it is not cumulative).
    pub fn set_latency(&self, latency: Duration) {
        *self.shared.latency.lock().unwrap() = latency;
    }

    /// Close every open connection and refuse new ones (the listening socket is closed, so a
    /// connect gets ECONNREFUSED) until `restore`.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        if let Some(acc) = self.acceptor.lock().unwrap().take() {
            stop_acceptor(acc, self.port);
        }
        self.close_all();
    }

    /// Undo `cut`: listen again on the same port.
    pub fn restore(&self) {
        let mut acceptor = self.acceptor.lock().unwrap();
        self.shared.cut.store(false, Ordering::SeqCst);
        if acceptor.is_some() {
            return;
        }
        let mut last_err = None;
        for _ in 0..50 {
            match TcpListener::bind(self.addr()) {
                Ok(l) => {
                    *acceptor = Some(spawn_acceptor(l, self.shared.clone()));
                    return;
                }
                Err(e) => last_err = Some(e),
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "proxy: cannot listen again on {}: {:?}",
            self.addr(),
            last_err
        );
    }

    /// While on, connections stay open but nothing is forwarded (a hung server). Bytes read
    /// meanwhile are held and delivered in order once it is turned off, as a paused process
    /// would receive them, so a RESP stream never gets out of step.
    pub fn blackhole(&self, on: bool) {
        *self.shared.blackhole.lock().unwrap() = on;
        self.shared.blackhole_cv.notify_all();
    }

    /// Blackholes (as [`Proxy::blackhole`]) only the connections whose client has sent
    /// `pattern` (ASCII, any case; e.g. `SUBSCRIBE`: a subscriber connection), those open and
    /// those to come, until called with `None`. The others are untouched.
    pub fn blackhole_sending(&self, pattern: Option<&str>) {
        let pattern = pattern.map(|p| p.as_bytes().to_vec());
        *self.shared.hole_pattern.lock().unwrap() = pattern.clone();
        for c in self.shared.conns.lock().unwrap().values() {
            let hit = pattern
                .as_deref()
                .is_some_and(|p| contains_ignore_case(&c.sent.lock().unwrap(), p));
            c.holed.store(hit, Ordering::SeqCst);
        }
        self.shared.blackhole_cv.notify_all();
    }

    /// Number of open connections blackholed by [`Proxy::blackhole_sending`].
    pub fn holed_connections(&self) -> usize {
        let conns = self.shared.conns.lock().unwrap();
        conns
            .values()
            .filter(|c| c.holed.load(Ordering::SeqCst))
            .count()
    }

    /// Number of currently open proxied connections.
    pub fn connections(&self) -> usize {
        self.shared.conns.lock().unwrap().len()
    }

    /// Close every open connection now (without refusing new ones).
    pub fn close_all(&self) {
        let conns: Vec<Arc<Conn>> = self
            .shared
            .conns
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect();
        for c in conns {
            c.close();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.cut.store(true, Ordering::SeqCst);
        if let Some(acc) = self.acceptor.lock().unwrap().take() {
            stop_acceptor(acc, self.port);
        }
        self.close_all();
        self.blackhole(false);
    }
}

fn spawn_acceptor(listener: TcpListener, shared: Arc<Shared>) -> Acceptor {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = thread::Builder::new()
        .name("proxy-accept".into())
        .spawn(move || {
            // Blocks in accept; `stop_acceptor` wakes it with a connection of its own.
            for incoming in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                match incoming {
                    Ok(client) => {
                        if shared.cut.load(Ordering::SeqCst) {
                            continue;
                        }
                        let shared = shared.clone();
                        let _ = thread::Builder::new()
                            .name("proxy-conn".into())
                            .spawn(move || open_conn(client, shared));
                    }
                    // e.g. EMFILE: do not spin.
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        })
        .expect("spawn proxy acceptor");
    Acceptor { stop, handle }
}

fn stop_acceptor(acc: Acceptor, port: u16) {
    acc.stop.store(true, Ordering::SeqCst);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    if TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
        let _ = acc.handle.join();
    }
    // If the wake-up connect failed the thread is detached; it exits at its next accept.
}

fn open_conn(client: TcpStream, shared: Arc<Shared>) {
    let Ok(upstream) = TcpStream::connect_timeout(&shared.target, UPSTREAM_CONNECT_TIMEOUT) else {
        return; // dropping `client` closes it
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let clones = (
        client.try_clone(),
        client.try_clone(),
        upstream.try_clone(),
        upstream.try_clone(),
    );
    let (Ok(c_read), Ok(c_write), Ok(u_read), Ok(u_write)) = clones else {
        return;
    };
    let conn = Arc::new(Conn {
        client,
        upstream,
        closed: AtomicBool::new(false),
        sent: Mutex::new(Vec::new()),
        holed: AtomicBool::new(false),
    });
    let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
    {
        // Checked under the same lock `cut` closes connections under, so none slips through.
        let mut conns = shared.conns.lock().unwrap();
        if shared.cut.load(Ordering::SeqCst) {
            conn.close();
            return;
        }
        conns.insert(id, conn.clone());
    }
    let guard = Arc::new(ConnGuard {
        id,
        conn,
        shared: shared.clone(),
    });
    pump(c_read, u_write, guard.clone(), "up");
    pump(u_read, c_write, guard, "down");
}

/// Forward `src` to `dst`: a reader thread stamps each chunk with its delivery time, a writer
/// thread delivers chunks in order once that time has come and no blackhole is on.
fn pump(mut src: TcpStream, mut dst: TcpStream, guard: Arc<ConnGuard>, dir: &str) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let upstream_bound = dir == "up";
    let g = guard.clone();
    let _ = src.set_read_timeout(Some(READ_TICK));
    let reader = thread::Builder::new()
        .name(format!("proxy-read-{dir}"))
        .spawn(move || {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                if g.conn.is_closed() || g.shared.stopped.load(Ordering::SeqCst) {
                    break;
                }
                match src.read(&mut buf) {
                    Ok(0) => {
                        // A blackholed connection's client gave up: tear it down.
                        if g.conn.holed.load(Ordering::SeqCst) {
                            g.conn.close();
                        }
                        break;
                    }
                    Ok(n) => {
                        if upstream_bound {
                            g.conn.note_sent(&buf[..n], &g.shared);
                        }
                        let at = Instant::now() + *g.shared.latency.lock().unwrap();
                        if tx.send((at, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                    Err(e) if is_retryable(&e) => continue,
                    Err(_) => {
                        g.conn.close();
                        break;
                    }
                }
            }
            // Dropping `tx` tells the writer to half-close once it has delivered the rest.
        });
    if reader.is_err() {
        guard.conn.close();
        return;
    }
    let _ = thread::Builder::new()
        .name(format!("proxy-write-{dir}"))
        .spawn(move || {
            let g = guard;
            while let Ok((at, data)) = rx.recv() {
                let now = Instant::now();
                if at > now {
                    thread::sleep(at - now);
                }
                let mut hole = g.shared.blackhole.lock().unwrap();
                while (*hole || g.conn.holed.load(Ordering::SeqCst))
                    && !g.conn.is_closed()
                    && !g.shared.stopped.load(Ordering::SeqCst)
                {
                    hole = g
                        .shared
                        .blackhole_cv
                        .wait_timeout(hole, BLACKHOLE_TICK)
                        .unwrap()
                        .0;
                }
                drop(hole);
                if g.conn.is_closed() || dst.write_all(&data).is_err() {
                    g.conn.close();
                    return;
                }
            }
            let _ = dst.shutdown(Shutdown::Write);
        });
}

fn is_retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}
