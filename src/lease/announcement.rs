//! The messages on a lease's release channel (contract, "Announcements"): a release, and the
//! start of a term, as JSON.

/// One announcement on the release channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    /// `{"event":"released","holder","fence","reserved_for"}`: a leader let go, possibly
    /// reserving the lease for a successor.
    Released {
        /// The identity that released.
        holder: String,
        /// The released term's fence.
        fence: u64,
        /// The successor the lease is reserved for, if any.
        reserved_for: Option<String>,
    },
    /// `{"event":"acquired","holder","fence","address"}`: a term really began (granted, and
    /// confirmed by WAIT or a Redlock majority where asked for).
    Acquired {
        /// The new leader.
        holder: String,
        /// Its fence.
        fence: u64,
        /// The address the new leader advertises (`LeaseSpec::address`), if any: so that a
        /// follower's proxy can route to it without asking Redis.
        address: Option<String>,
    },
}

impl Announcement {
    /// Parses one message; `None` for anything else (e.g. the plain-text release of an
    /// older leaderd, which only wakes the waiting candidates).
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
        let holder = v.get("holder")?.as_str()?.to_string();
        let fence = v.get("fence")?.as_u64()?;
        match v.get("event")?.as_str()? {
            "released" => Some(Announcement::Released {
                holder,
                fence,
                reserved_for: v
                    .get("reserved_for")
                    .and_then(|r| r.as_str())
                    .map(str::to_string),
            }),
            "acquired" => Some(Announcement::Acquired {
                holder,
                fence,
                address: v
                    .get("address")
                    .and_then(|a| a.as_str())
                    .map(str::to_string),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Announcement;

    #[test]
    fn parses_both_events_and_ignores_plain_text() {
        let r =
            br#"{"event":"released","holder":"a","fence":1764600000000001,"reserved_for":null}"#;
        assert_eq!(
            Announcement::parse(r),
            Some(Announcement::Released {
                holder: "a".into(),
                fence: 1764600000000001,
                reserved_for: None
            })
        );
        let a = br#"{"event":"acquired","holder":"b","fence":7}"#;
        assert_eq!(
            Announcement::parse(a),
            Some(Announcement::Acquired {
                holder: "b".into(),
                fence: 7,
                address: None
            })
        );
        assert_eq!(Announcement::parse(b"pod-a"), None);
    }
}
