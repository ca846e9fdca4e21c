//! Redis Cluster: the connector over its seed nodes, and the slot of a key.

use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{Client, ConnectionAddr, Value};

/// A Redis Cluster reached through its seed nodes.
pub(crate) struct ClusterConnector {
    pub(super) client: ClusterClient,
    pub(super) seeds: Vec<Client>,
    pub(super) next_seed: std::sync::atomic::AtomicUsize,
}

impl ClusterConnector {
    /// `client` for the cluster; `seeds` (the same nodes as plain clients) for pub/sub.
    pub(crate) fn new(client: ClusterClient, seeds: Vec<Client>) -> Self {
        ClusterConnector {
            client,
            seeds,
            next_seed: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

impl ClusterConnector {
    /// A client for the master that serves `slot`, as the first seed to answer
    /// `CLUSTER SLOTS` within `limit` tells (with the seed's credentials and TLS); `None`
    /// when no seed answers or the slot is not served.
    pub(crate) async fn slot_owner(&self, slot: u16, limit: Duration) -> Option<Client> {
        let start = self.next_seed.load(std::sync::atomic::Ordering::Relaxed);
        let n = self.seeds.len().max(1);
        for seed in self
            .seeds
            .iter()
            .cycle()
            .skip(start % n)
            .take(self.seeds.len())
        {
            let ask = async {
                let mut conn = seed.get_multiplexed_async_connection().await.ok()?;
                let slots: Value = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                owner_of(&slots, slot)
            };
            if let Ok(Some((host, port))) = tokio::time::timeout(limit, ask).await {
                let info = seed.get_connection_info().clone();
                let host = if host.is_empty() {
                    seed_host(&info)?
                } else {
                    host
                };
                let addr = match info.addr().clone() {
                    ConnectionAddr::TcpTls {
                        insecure,
                        tls_params,
                        ..
                    } => ConnectionAddr::TcpTls {
                        host,
                        port,
                        insecure,
                        tls_params,
                    },
                    _ => ConnectionAddr::Tcp(host, port),
                };
                return Client::open(info.set_addr(addr)).ok();
            }
        }
        None
    }
}

/// The host and port of the master serving `slot` in a `CLUSTER SLOTS` reply (`[start, end,
/// [host, port, id, ..], replicas..]` per range).
fn owner_of(reply: &Value, slot: u16) -> Option<(String, u16)> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(fields) = range else {
            return None;
        };
        let int = |v: &Value| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        };
        let (start, end) = (int(fields.first()?)?, int(fields.get(1)?)?);
        if !(start..=end).contains(&i64::from(slot)) {
            return None;
        }
        let Value::Array(master) = fields.get(2)? else {
            return None;
        };
        let host = match master.first()? {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        Some((host, u16::try_from(int(master.get(1)?)?).ok()?))
    })
}

/// The host of a seed's address (for a `CLUSTER SLOTS` entry without one: the seed's own).
fn seed_host(info: &redis::ConnectionInfo) -> Option<String> {
    match info.addr() {
        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => Some(host.clone()),
        _ => None,
    }
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (or of the whole key) mod 16384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
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
    fn the_owner_of_a_slot_is_the_master_of_its_range() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |start, end, master: Value, replica: Value| {
            Value::Array(vec![Value::Int(start), Value::Int(end), master, replica])
        };
        let reply = Value::Array(vec![
            range(0, 5460, node("127.0.0.1", 7000), node("127.0.0.1", 7003)),
            range(5461, 16383, node("", 7001), node("127.0.0.1", 7004)),
        ]);
        assert_eq!(owner_of(&reply, 0), Some(("127.0.0.1".into(), 7000)));
        assert_eq!(owner_of(&reply, 5461), Some((String::new(), 7001)));
        assert_eq!(owner_of(&reply, 16383), Some((String::new(), 7001)));
        assert_eq!(owner_of(&Value::Array(vec![]), 1), None);
    }

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
