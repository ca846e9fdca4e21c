//! Steps of the wall clock against the monotonic one during a run: the children stamp their
//! lines with `date` and leaderd logs validities in wall time, so a step between the two
//! readings moves a stamp against the validity it is checked with.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A step smaller than this is sampling noise.
const NOISE_MS: i64 = 3;
/// How long before a term's validity its last renew read the wall clock (the chaos lease).
pub const VALIDITY_SPAN_MS: u64 = 1000;

/// One step: at `at_ms` (wall) the wall clock moved `delta_ms` against the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub at_ms: u64,
    pub delta_ms: i64,
}

/// Samples the wall clock's offset from the monotonic one every 5 ms until stopped.
pub struct ClockWatch {
    stop: Arc<AtomicBool>,
    steps: Arc<Mutex<Vec<Step>>>,
    thread: Option<JoinHandle<()>>,
}

impl ClockWatch {
    pub fn start() -> ClockWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let steps = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), steps.clone());
        let thread = std::thread::spawn(move || {
            let base = Instant::now();
            let mut last = offset(base);
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                let Some(now) = offset(base) else { continue };
                let Some(before) = last.replace(now) else {
                    continue;
                };
                if (now - before).abs() >= NOISE_MS {
                    out.lock().unwrap().push(Step {
                        at_ms: wall_ms(),
                        delta_ms: now - before,
                    });
                } else {
                    last = Some(before); // small moves add up until they count
                }
            }
        });
        ClockWatch {
            stop,
            steps,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the steps seen.
    pub fn finish(mut self) -> Vec<Step> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.steps.lock().unwrap())
    }
}

/// How far the wall clock moved in `(from_ms, to_ms]`.
pub fn moved_between(steps: &[Step], from_ms: u64, to_ms: u64) -> i64 {
    steps
        .iter()
        .filter(|s| s.at_ms > from_ms && s.at_ms <= to_ms)
        .map(|s| s.delta_ms)
        .sum()
}

/// Wall minus monotonic (since `base`), in ms; `None` when this thread was held up between
/// the readings (the two wall readings around the monotonic one differ by over 1 ms).
fn offset(base: Instant) -> Option<i64> {
    let before = wall_ms();
    let mono = base.elapsed().as_millis() as i64;
    let after = wall_ms();
    (after - before <= 1).then_some(before as i64 - mono)
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
