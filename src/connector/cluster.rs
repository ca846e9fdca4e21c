//! Redis Cluster: the connector over its seed nodes, and the slot of a key.

use redis::cluster::ClusterClient;
use redis::Client;

/// A Redis Cluster reached through its seed nodes.
pub struct ClusterConnector {
    pub(super) client: ClusterClient,
    pub(super) seeds: Vec<Client>,
    pub(super) next_seed: std::sync::atomic::AtomicUsize,
}

impl ClusterConnector {
    /// `client` for the cluster; `seeds` (the same nodes as plain clients) for pub/sub.
    pub fn new(client: ClusterClient, seeds: Vec<Client>) -> Self {
        ClusterConnector {
            client,
            seeds,
            next_seed: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (or of the whole key) mod 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(
            key_slot(b"leaderd:{orders}:lock"),
            key_slot(b"leaderd:{orders}:fence")
        );
        assert_eq!(key_slot(b"x{orders}y"), key_slot(b"orders"));
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(key_slot(b"a{}b"), crc16(b"a{}b") % 16384);
    }
}
