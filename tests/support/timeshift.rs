//! Owns `ShiftedClock`: moves the wall clock of chosen child processes (redis-server, leaderd)
//! through `timeshift.c`, an LD_PRELOAD built here with `cc` on first use.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The built preload: `target/tmp/timeshift-<pid>.so` (one per test binary, renamed into
/// place so concurrent test binaries never load a half-written file).
pub fn preload_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/timeshift.c");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(dir).expect("create target/tmp");
        let lib = dir.join(format!("timeshift-{}.so", std::process::id()));
        let partial = dir.join(format!("timeshift-{}.so.partial", std::process::id()));
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
            .arg(&partial)
            .arg(&src)
            .output()
            .expect("run cc (needed to build the time-shifting preload)");
        assert!(
            out.status.success(),
            "cc {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&partial, &lib).expect("move the preload into place");
        lib
    })
    .clone()
}

/// One movable wall clock: every process started with `env()` sees `CLOCK_REALTIME` (and
/// `gettimeofday`, `time`) shifted by the offset last set, within about 1 ms of `set`.
/// Monotonic clocks are not touched.
pub struct ShiftedClock {
    dir: tempfile::TempDir,
}

impl ShiftedClock {
    /// A clock at offset 0.
    pub fn new() -> ShiftedClock {
        let dir = tempfile::Builder::new()
            .prefix("leaderd-clock-")
            .tempdir()
            .expect("create clock temp dir");
        let clock = ShiftedClock { dir };
        clock.set_offset_ms(0);
        clock
    }

    fn file(&self) -> PathBuf {
        self.dir.path().join("offset_ms")
    }

    /// Move the clock to `offset_ms` from the real one (written whole, then renamed).
    pub fn set_offset_ms(&self, offset_ms: i64) {
        let tmp = self.dir.path().join("offset_ms.new");
        std::fs::write(&tmp, format!("{offset_ms}\n")).expect("write clock offset");
        std::fs::rename(&tmp, self.file()).expect("rename clock offset");
    }

    /// The environment that puts a child process on this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), preload_lib().display().to_string()),
            ("TIMESHIFT_FILE".into(), self.file().display().to_string()),
        ]
    }
}

impl Default for ShiftedClock {
    fn default() -> Self {
        ShiftedClock::new()
    }
}
