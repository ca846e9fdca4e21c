//! What a server offers: its name and version and the native commands leaderd may send
//! instead of a script (README, "Servers"). Read at every new connection from `INFO
//! server`, which the minimal ACL already allows.

use redis::aio::ConnectionLike;
use redis::Value;

/// A server's name, version and native compare-and-set commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    /// `redis` or `valkey` (Valkey's `server_name`).
    pub name: String,
    /// The server's own version (Valkey's `valkey_version`, else `redis_version`).
    pub version: String,
    /// `SET key value IFEQ old` (Valkey 8.1+, Redis 8.4+).
    pub set_ifeq: bool,
    /// `DELIFEQ key value` (Valkey 9.0+).
    pub delifeq: bool,
    /// `DELEX key IFEQ value` (Redis 8.4+).
    pub delex: bool,
    /// `HPEXPIRE key ms FIELDS n field..`: hash fields that expire (Redis 7.4+, Valkey 9.0+).
    pub hpexpire: bool,
}

impl ServerInfo {
    /// The server an `INFO server` reply describes; `None` when it names no version.
    pub(crate) fn from_info(info: &str) -> Option<ServerInfo> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let name = field("server_name").unwrap_or_else(|| "redis".to_owned());
        let version = match name.as_str() {
            "valkey" => field("valkey_version").or_else(|| field("redis_version"))?,
            _ => field("redis_version")?,
        };
        let at_least = |major: u32, minor: u32| parse_version(&version) >= (major, minor);
        let valkey = name == "valkey";
        Some(ServerInfo {
            set_ifeq: if valkey {
                at_least(8, 1)
            } else {
                at_least(8, 4)
            },
            delifeq: valkey && at_least(9, 0),
            delex: !valkey && at_least(8, 4),
            hpexpire: if valkey {
                at_least(9, 0)
            } else {
                at_least(7, 4)
            },
            name,
            version,
        })
    }

    /// The native commands this server has, space-separated (`none` when it has none).
    pub(crate) fn commands(&self) -> String {
        let has = [
            (self.set_ifeq, "SET-IFEQ"),
            (self.delifeq, "DELIFEQ"),
            (self.delex, "DELEX"),
            (self.hpexpire, "HPEXPIRE"),
        ];
        let names: Vec<&str> = has.iter().filter(|(h, _)| *h).map(|(_, n)| *n).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(" ")
        }
    }
}

impl std::fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (name, version) = (&self.name, &self.version);
        write!(f, "{name} {version} (native: {})", self.commands())
    }
}

/// Where an endpoint publishes its [`ServerInfo`] (`None` until read).
#[cfg_attr(not(feature = "daemon"), allow(dead_code))]
pub(crate) type ServerInfoWatch = tokio::sync::watch::Receiver<Option<ServerInfo>>;

/// `(major, minor)` of `8.0.1`; `(0, 0)` for what does not parse.
fn parse_version(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The server `conn` talks to, from `INFO server`; `None` when it does not answer (an ACL
/// without `+info`) or names no version. A cluster connection asks every node: then the name
/// and version are the first node's and the commands those every node has.
pub(crate) async fn read<C: ConnectionLike + Send>(conn: &mut C) -> Option<ServerInfo> {
    let reply: Value = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .ok()?;
    let mut texts = Vec::new();
    info_texts(&reply, &mut texts);
    let mut infos = texts.iter().filter_map(|t| ServerInfo::from_info(t));
    let first = infos.next()?;
    Some(infos.fold(first, |all, one| ServerInfo {
        set_ifeq: all.set_ifeq && one.set_ifeq,
        delifeq: all.delifeq && one.delifeq,
        delex: all.delex && one.delex,
        hpexpire: all.hpexpire && one.hpexpire,
        ..all
    }))
}

/// Every `INFO` text in `reply`: one for a server, one per node (a map) for a cluster.
fn info_texts(reply: &Value, out: &mut Vec<String>) {
    match reply {
        Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => out.push(s.clone()),
        Value::VerbatimString { text, .. } => out.push(text.clone()),
        Value::Map(pairs) => pairs.iter().for_each(|(_, v)| info_texts(v, out)),
        Value::Array(items) => items.iter().for_each(|v| info_texts(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(lines: &[&str]) -> ServerInfo {
        ServerInfo::from_info(&format!("# Server\r\n{}\r\n", lines.join("\r\n"))).unwrap()
    }

    #[test]
    fn capabilities_follow_each_servers_own_version() {
        let redis70 = info(&["redis_version:7.0.15", "redis_mode:standalone"]);
        assert_eq!(
            (redis70.name.as_str(), redis70.version.as_str()),
            ("redis", "7.0.15")
        );
        assert_eq!(redis70.commands(), "none");
        assert_eq!(info(&["redis_version:7.4.1"]).commands(), "HPEXPIRE");
        assert_eq!(
            info(&["redis_version:8.4.0"]).commands(),
            "SET-IFEQ DELEX HPEXPIRE"
        );
        // Valkey reports a Redis compatibility version too: its own decides.
        let valkey = |v: &str| {
            info(&[
                "redis_version:7.2.4",
                "server_name:valkey",
                &format!("valkey_version:{v}"),
            ])
        };
        assert_eq!(valkey("8.0.1").commands(), "none");
        assert_eq!(valkey("8.1.0").commands(), "SET-IFEQ");
        assert_eq!(valkey("9.1.2").commands(), "SET-IFEQ DELIFEQ HPEXPIRE");
        assert_eq!(
            valkey("9.1.2").to_string(),
            "valkey 9.1.2 (native: SET-IFEQ DELIFEQ HPEXPIRE)"
        );
        assert_eq!(ServerInfo::from_info("# Server\r\n"), None);
    }

    #[test]
    fn a_cluster_offers_what_every_node_has() {
        let node = |v: &str| {
            let text = format!("# Server\r\nserver_name:valkey\r\nvalkey_version:{v}\r\n");
            Value::BulkString(text.into_bytes())
        };
        let addr = |a: &str| Value::SimpleString(a.into());
        let reply = Value::Map(vec![
            (addr("a:1"), node("9.1.2")),
            (addr("b:1"), node("8.1.0")),
        ]);
        let mut texts = Vec::new();
        info_texts(&reply, &mut texts);
        assert_eq!(texts.len(), 2);
        let infos: Vec<_> = texts
            .iter()
            .filter_map(|t| ServerInfo::from_info(t))
            .collect();
        assert_eq!(infos[0].commands(), "SET-IFEQ DELIFEQ HPEXPIRE");
        assert_eq!(infos[1].commands(), "SET-IFEQ");
    }
}
