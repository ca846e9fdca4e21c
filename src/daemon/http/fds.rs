//! The file-descriptor limit: raised to the hard limit at start, read to size the HTTP
//! connection cap so that HTTP clients cannot starve the election of descriptors.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit in force after.
pub(crate) fn raise_nofile_limit() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Some(hard);
    }
    Some(soft)
}

/// The soft `RLIMIT_NOFILE` now (None when it cannot be read or is unlimited).
pub(crate) fn soft_limit() -> Option<u64> {
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft)
}
