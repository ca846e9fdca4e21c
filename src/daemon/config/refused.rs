//! Why one configuration value was refused ([`ValueError`]), and why a duration could not be
//! read ([`DurationError`]): the text after `key: ` in the one line a user reads.

use std::borrow::Cow;
use std::fmt;

/// Why the text of one value was refused. Each says what the value is not and what is
/// allowed; the reader prefixes the key or flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValueError {
    /// Not of the key's kind at all: `"x" is not a Redis URL (unknown scheme; allowed: ...)`.
    #[error("{value} is not {kind} ({allowed})")]
    NotA {
        /// The value as shown (quoted, secrets scrubbed).
        value: String,
        /// What the key takes: "a Redis URL", "a signal", ...
        kind: &'static str,
        /// Why, and what is allowed.
        allowed: Cow<'static, str>,
    },
    /// Of the key's kind, but not a value it allows: `"0s" is not allowed (must be greater
    /// than 0)`.
    #[error("{value} is not allowed ({allowed})")]
    NotAllowed {
        /// The value as shown (quoted, or described: "an identity of 300 bytes").
        value: String,
        /// What is allowed instead.
        allowed: Cow<'static, str>,
    },
    /// A number outside its range: `1001 is out of range (allowed: 0..1000)`.
    #[error("{value} is out of range (allowed: {allowed})")]
    OutOfRange {
        /// The number given.
        value: i64,
        /// The range allowed.
        allowed: &'static str,
    },
    /// An integer too large for any integer type: `"-99999999999999999999" is out of range
    /// (allowed: 0..1000)`.
    #[error("{value} is out of range (allowed: {allowed})")]
    TooLarge {
        /// The number as written (quoted).
        value: String,
        /// The range allowed.
        allowed: &'static str,
    },
    /// Not a duration.
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// An HTTP URL carrying `user:password@`, which leaderd never sends.
    #[error(
        "the URL carries user information (user:password@), which leaderd never sends; \
         remove it (allowed: http://host[:port][/path])"
    )]
    UserInfo,
}

/// Why a text is not a duration; shown with the text and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration ({problem}): {ALLOWED_DURATIONS}")]
pub(crate) struct DurationError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub problem: DurationProblem,
}

/// What [`crate::daemon::config::parse_duration`] accepts, quoted in every error so the fix is obvious.
pub(crate) const ALLOWED_DURATIONS: &str =
    "write a number and a unit (ns, us, ms, s, m, h), e.g. 250ms, 2s, 1.5s, 1m30s";

/// What is wrong with a text that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationProblem {
    /// Nothing was written.
    Empty,
    /// A minus sign.
    Negative,
    /// A unit without a number before it.
    NoNumber(String),
    /// A number without a unit after it.
    NoUnit(String),
    /// A unit that is not one of ns, us, ms, s, m, h.
    UnknownUnit(String),
    /// Digits and dots that are not a number (`1.2.3`).
    NotANumber(String),
    /// More than `u64::MAX` nanoseconds.
    TooLarge,
}

impl fmt::Display for DurationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationProblem::Empty => write!(f, "empty"),
            DurationProblem::Negative => write!(f, "negative"),
            DurationProblem::NoNumber(unit) => write!(f, "expected a number before {unit:?}"),
            DurationProblem::NoUnit(number) => write!(f, "missing unit after {number}"),
            DurationProblem::UnknownUnit(unit) => write!(f, "unknown unit {unit:?}"),
            DurationProblem::NotANumber(number) => write!(f, "{number:?} is not a number"),
            DurationProblem::TooLarge => write!(f, "too large"),
        }
    }
}

impl ValueError {
    /// `value` (quoted) is not of `kind`; `allowed` says why and what is.
    pub(crate) fn not_a(
        value: &str,
        kind: &'static str,
        allowed: impl Into<Cow<'static, str>>,
    ) -> ValueError {
        ValueError::NotA {
            value: format!("{value:?}"),
            kind,
            allowed: allowed.into(),
        }
    }

    /// `value` (quoted) is not allowed; `allowed` says what is.
    pub(crate) fn not_allowed(value: &str, allowed: impl Into<Cow<'static, str>>) -> ValueError {
        ValueError::NotAllowed {
            value: format!("{value:?}"),
            allowed: allowed.into(),
        }
    }
}
