//! Reading the scripts' replies: grants, holders, and writes too few replicas acknowledged.

use super::{LeaseError, Observed};
use crate::conn::{FailureKind, RedisFailure};

/// True when the acquire script granted the lease (`{1, fence}`).
pub(super) fn is_granted(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::Array(items) if items.first() == Some(&redis::Value::Int(1)))
}

/// The error of a write that fewer than `redis.min_replicas_ack` replicas acknowledged in
/// time: counted as a Redis error of kind `timeout`.
/// `got` < 0: `WAIT` gave no answer in time.
pub(super) fn not_replicated(wanted: u32, got: i64, outcome: &str) -> LeaseError {
    let answer = if got < 0 {
        "WAIT did not answer in time".to_string()
    } else {
        format!("WAIT answered {got}")
    };
    LeaseError::Unavailable(RedisFailure {
        kind: FailureKind::Timeout,
        cause: format!(
            "not acknowledged by redis.min_replicas_ack = {wanted} replicas in time ({answer}): {outcome}"
        ),
        code: None,
        source: None,
    })
}

pub(super) enum AcquireReply {
    /// The fence, and whether the grant took a reserved release whose announcement is
    /// still pending (the caller announces both).
    Granted(u64, bool),
    Denied(Observed),
}

pub(super) fn parse_acquire(reply: redis::Value) -> Result<AcquireReply, LeaseError> {
    use redis::Value;
    let bad = |v: &Value| LeaseError::Protocol(format!("acquire script answered {v:?}"));
    let Value::Array(items) = &reply else {
        return Err(bad(&reply));
    };
    let int = |v: &Value| match v {
        Value::Int(i) => Some(*i),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    };
    match (items.first().and_then(int), items.len()) {
        (Some(1), 2 | 3) => {
            let fence = int(&items[1]).ok_or_else(|| bad(&reply))?;
            let pending = items.get(2).and_then(int) == Some(1);
            Ok(AcquireReply::Granted(fence as u64, pending))
        }
        (Some(0), 6) => {
            let fence = int(&items[2]).ok_or_else(|| bad(&reply))?;
            let ttl = int(&items[3]).ok_or_else(|| bad(&reply))?;
            Ok(AcquireReply::Denied(Observed::from_fields(
                text(&items[1]),
                fence as u64,
                text(&items[4]),
                text(&items[5]),
                ttl,
            )))
        }
        _ => Err(bad(&reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn acquire_replies_of_any_other_shape_are_protocol_errors() {
        let s = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let odd = [
            Value::Nil,
            Value::Int(1),
            s("OK"),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Int(1), s("fence")]),
            Value::Array(vec![Value::Int(0), s("h"), Value::Int(1)]),
            Value::Array(vec![
                Value::Int(0),
                s("h"),
                s("x"),
                Value::Int(5),
                s(""),
                s(""),
            ]),
            Value::Array(vec![Value::Int(2), Value::Int(7)]),
            Value::Array(vec![s("1"), Value::Int(7)]),
        ];
        for reply in odd {
            let got = parse_acquire(reply.clone());
            assert!(
                matches!(got, Err(LeaseError::Protocol(_))),
                "{reply:?} gave {:?}",
                got.as_ref().err()
            );
        }
        // Odd values in the right shape are read, never a panic.
        let denied = Value::Array(vec![
            Value::Int(0),
            s("h"),
            Value::Int(-3),
            Value::Int(-1),
            s(""),
            s(""),
        ]);
        assert!(matches!(parse_acquire(denied), Ok(AcquireReply::Denied(_))));
        let granted = Value::Array(vec![Value::Int(1), Value::Int(i64::MIN)]);
        assert!(matches!(
            parse_acquire(granted),
            Ok(AcquireReply::Granted(..))
        ));
    }
}
