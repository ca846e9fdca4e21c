//! Keeping secrets out of output: passwords in URLs, and the effective configuration as
//! `check-config` prints it (the config structs derive `Serialize`; the fields that need
//! care name one of these printers with `serialize_with`).

use std::time::Duration;

use serde::ser::Serializer;
use serde::Serialize;

use super::duration::format_duration;
use super::scrub::{scrub, REDACTED};
use super::{Config, Secret};

impl Config {
    /// The effective configuration as YAML, for `check-config`: every key present
    /// (defaults included), durations written as in the file, the password and any
    /// password inside a URL shown as `<redacted>`.
    pub(crate) fn to_redacted_yaml(&self) -> String {
        super::yaml::to_text(self)
            .unwrap_or_else(|e| format!("# the configuration cannot be shown: {e}\n"))
    }
}

type Out<S> = Result<<S as Serializer>::Ok, <S as Serializer>::Error>;

/// A password: `<redacted>` when set.
pub(super) fn secret<S: Serializer>(p: &Option<Secret>, s: S) -> Out<S> {
    p.as_ref().map(|_| REDACTED).serialize(s)
}

/// URLs that may hold passwords.
pub(super) fn urls<S: Serializer>(list: &[String], s: S) -> Out<S> {
    s.collect_seq(list.iter().map(|u| scrub(u)))
}

/// A URL that may hold a password.
pub(super) fn url<S: Serializer>(u: &Option<String>, s: S) -> Out<S> {
    u.as_deref().map(scrub).serialize(s)
}

/// A duration as written in the file (`1m30s`).
pub(super) fn duration<S: Serializer>(d: &Duration, s: S) -> Out<S> {
    s.serialize_str(&format_duration(*d))
}

/// A value, or the empty string that turns it off.
pub(super) fn or_off<S: Serializer, T: Serialize>(v: &Option<T>, s: S) -> Out<S> {
    match v {
        Some(v) => v.serialize(s),
        None => s.serialize_str(""),
    }
}

/// A signal by its name (`SIGTERM`).
pub(super) fn signal<S: Serializer>(sig: &nix::sys::signal::Signal, s: S) -> Out<S> {
    s.serialize_str(sig.as_str())
}
