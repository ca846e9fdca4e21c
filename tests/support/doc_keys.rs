//! The keys of the status document, shared by the integration tests and the crate's own.

/// The keys of the status document (docs/outputs.md#the-status-document), in its order.
pub const DOC_KEYS: [&str; 15] = [
    "name",
    "identity",
    "state",
    "is_leader",
    "leader",
    "fence",
    "acquired_at",
    "acquired_at_ms",
    "lease_valid_until",
    "lease_valid_until_ms",
    "observed_at",
    "observed_at_ms",
    "healthy",
    "leader_address",
    "priority",
];
