//! Running a script of `lua/` by SHA: loaded when Redis answers `NOSCRIPT`, and loaded again
//! while the node that runs it still has not got it (docs/protocol.md#scripts).

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ScriptInvocation};

/// How many times one call loads its script at most. Right after a Cluster failover the
/// client's map of a slot can change between the load and the run (the nodes disagree for a
/// moment), so the load went to the node before; the run by SHA then answers `NOSCRIPT`
/// again. A `NOSCRIPT` means the script did not run, so running it again is safe.
const LOADS: u32 = 3;

fn no_script(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// `call` ([`ScriptInvocation::invoke_async`]: by SHA, loaded at `NOSCRIPT`), made again
/// while Redis still answers `NOSCRIPT` after the load, up to [`LOADS`] loads in all.
pub(crate) async fn invoke<C, T>(c: &mut C, call: &ScriptInvocation<'_>) -> RedisResult<T>
where
    C: ConnectionLike,
    T: FromRedisValue,
{
    let mut loads = 1;
    loop {
        match call.invoke_async(c).await {
            Err(e) if no_script(&e) && loads < LOADS => loads += 1,
            reply => return reply,
        }
    }
}

/// `call`, an `EVALSHA` of `script` built by the caller (written once: a
/// [`ScriptInvocation`] copies its arguments again), with `script` loaded at each
/// `NOSCRIPT`, up to [`LOADS`] loads.
pub(crate) async fn run<C, T>(c: &mut C, script: &Script, call: &Cmd) -> RedisResult<T>
where
    C: ConnectionLike,
    T: FromRedisValue,
{
    let mut loads = 0;
    loop {
        match call.query_async(c).await {
            Err(e) if no_script(&e) && loads < LOADS => {
                script.load_async(c).await?;
                loads += 1;
            }
            reply => return reply,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{RedisFuture, Value};

    /// Answers `NOSCRIPT` to the first `misses` runs by SHA, as a node answers after the
    /// load went to another one; records what it was sent.
    struct Moving {
        misses: u32,
        sent: Vec<String>,
    }

    impl ConnectionLike for Moving {
        fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
            let name = match cmd.args_iter().next() {
                Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).to_uppercase(),
                _ => String::new(),
            };
            self.sent.push(name.clone());
            let reply = match name.as_str() {
                "EVALSHA" if self.misses > 0 => {
                    self.misses -= 1;
                    redis::parse_redis_value(b"-NOSCRIPT No matching script.\r\n")
                        .expect("an error reply")
                }
                "EVALSHA" => Value::Int(7),
                _ => Value::BulkString(Script::new("return 7").get_hash().into()),
            };
            Box::pin(async move { Ok(reply) })
        }

        fn req_packed_commands<'a>(
            &'a mut self,
            _: &'a redis::Pipeline,
            _: usize,
            _: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    fn moving(misses: u32) -> Moving {
        Moving {
            misses,
            sent: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_script_is_loaded_again_while_the_node_that_runs_it_has_not_got_it() {
        let script = Script::new("return 7");
        let mut c = moving(3);
        let n: i64 = invoke(&mut c, &script.prepare_invoke()).await.unwrap();
        assert_eq!(n, 7);
        assert_eq!(
            c.sent,
            ["EVALSHA", "SCRIPT", "EVALSHA", "EVALSHA", "SCRIPT", "EVALSHA"]
        );
        let mut c = moving(2);
        let call = redis::cmd("EVALSHA").arg(script.get_hash()).arg(0).clone();
        let n: i64 = run(&mut c, &script, &call).await.unwrap();
        assert_eq!(n, 7);
        assert_eq!(
            c.sent,
            ["EVALSHA", "SCRIPT", "EVALSHA", "SCRIPT", "EVALSHA"]
        );
    }

    #[tokio::test]
    async fn loads_are_bounded() {
        let script = Script::new("return 7");
        let mut c = moving(u32::MAX);
        let err = invoke::<_, i64>(&mut c, &script.prepare_invoke())
            .await
            .unwrap_err();
        assert!(no_script(&err));
        assert_eq!(c.sent.iter().filter(|s| *s == "SCRIPT").count(), 3);
        let mut c = moving(u32::MAX);
        let call = redis::cmd("EVALSHA").arg(script.get_hash()).arg(0).clone();
        let err = run::<_, i64>(&mut c, &script, &call).await.unwrap_err();
        assert!(no_script(&err));
        assert_eq!(c.sent.iter().filter(|s| *s == "SCRIPT").count(), 3);
    }
}
