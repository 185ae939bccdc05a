//! The shared backend: Redis 7 or Valkey, which every replica reaches. One connection per
//! replica, multiplexed (redis's `ConnectionManager`, which reconnects by itself); every
//! operation is one command or one script, bounded by `gateway.store.redis.timeout`. Rates and
//! leases are counted on Redis's clock (`TIME` inside the scripts), so replicas' clocks need not
//! agree.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, IntoConnectionInfo, RedisError, Script};
use tokio::sync::OnceCell;

use crate::StoreError;
use crate::backend::{Backend, Decision, Rate, Slots};

/// What every script here begins with: the server's clock (`now`, ms), and the GCRA of
/// `backend::gcra` (`gcra(key, interval_ms, burst)`: `nil` when admitted, the new arrival time
/// kept; else the wait in ms).
macro_rules! lua_prelude {
    () => {
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local function gcra(key, interval, burst)
  local tolerance = interval * (burst - 1)
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  if tat - now > tolerance then
    return math.ceil(tat - now - tolerance)
  end
  local next = tat + interval
  redis.call('SET', key, tostring(next), 'PX', math.ceil(next - now))
  return nil
end
"
    };
}

/// A key's rate alone (the common case: one key, two arguments, a smaller call than
/// `ADMIT_SCRIPT`'s). Returns `{1, 0}` admitted, `{0, wait_ms}` refused.
const RATE_SCRIPT: &str = concat!(
    lua_prelude!(),
    r"
local wait = gcra(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
if wait then
  return {0, wait}
end
return {1, 0}
"
);

/// A key's limits with concurrency slots, in one round trip. `KEYS[1]`: the slots (a sorted
/// set of lease ids scored by when each lapses), `KEYS[2]`: the rate's theoretical arrival
/// time; ARGV: uses slots (0/1), uses the rate (0/1), the slots' limit, the lease (ms), the
/// lease id, the rate's interval (ms) and burst. Returns `{1, 0}` admitted, `{2, 0}` every slot
/// held, `{0, wait_ms}` over the rate.
const ADMIT_SCRIPT: &str = concat!(
    lua_prelude!(),
    r"
local slots, rate = ARGV[1] == '1', ARGV[2] == '1'
if slots then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
    return {2, 0}
  end
end
if rate then
  local wait = gcra(KEYS[2], tonumber(ARGV[6]), tonumber(ARGV[7]))
  if wait then
    return {0, wait}
  end
end
if slots then
  local lease = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[1], now + lease, ARGV[5])
  -- No live lease lapses later than this one: the set goes when its last lease does.
  redis.call('PEXPIRE', KEYS[1], math.ceil(lease))
end
return {1, 0}
"
);

/// Extends a slot still held (`KEYS[1]` the slots, `ARGV[1]` the lease id, `ARGV[2]` the lease
/// in ms).
const RENEW_SCRIPT: &str = concat!(
    lua_prelude!(),
    r"
local lapses = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not lapses or tonumber(lapses) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
return 1
"
);

/// Deletes a key only while it still holds the caller's value.
const DELETE_IF_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

pub(crate) struct Redis {
    info: ConnectionInfo,
    /// PEM of the CA a `rediss://` server's certificate is checked against (else the public
    /// web roots compiled in).
    ca_bundle: Option<Vec<u8>>,
    timeout: Duration,
    /// Made on first use, inside the runtime; reconnects by itself from then on.
    connection: OnceCell<ConnectionManager>,
    rate: Script,
    admit: Script,
    renew: Script,
    delete_if: Script,
}

impl Redis {
    /// A client for `url` (checked now; connected on first use, so a gateway starts while its
    /// store is down).
    pub(crate) fn new(
        url: &str,
        username: Option<&str>,
        password: Option<&str>,
        ca_bundle: Option<&str>,
        timeout: Duration,
    ) -> Result<Redis, StoreError> {
        let info = url
            .into_connection_info()
            .map_err(|e| StoreError::Settings(format!("gateway.store.redis.url: {e}")))?;
        let mut settings = info.redis_settings().clone();
        if let Some(username) = username {
            settings = settings.set_username(username);
        }
        if let Some(password) = password {
            settings = settings.set_password(password);
        }
        Ok(Redis {
            info: info.set_redis_settings(settings),
            ca_bundle: ca_bundle.map(|pem| pem.as_bytes().to_vec()),
            timeout,
            connection: OnceCell::new(),
            rate: Script::new(RATE_SCRIPT),
            admit: Script::new(ADMIT_SCRIPT),
            renew: Script::new(RENEW_SCRIPT),
            delete_if: Script::new(DELETE_IF_SCRIPT),
        })
    }

    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let connection = self
            .connection
            .get_or_try_init(|| async {
                // redis-rs builds its TLS configuration on the process's default rustls
                // provider; the gateway's TLS is ring everywhere else (each client names it),
                // and another crate's features may compile aws-lc-rs in too, so the process
                // default is said once here (a default already set stays).
                if matches!(self.info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
                    let _ = rustls::crypto::ring::default_provider().install_default();
                }
                let client = match &self.ca_bundle {
                    Some(pem) => redis::Client::build_with_tls(
                        self.info.clone(),
                        redis::TlsCertificates {
                            client_tls: None,
                            root_cert: Some(pem.clone()),
                        },
                    ),
                    None => redis::Client::open(self.info.clone()),
                }
                .map_err(unavailable)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout))
                    // A call must not wait out a long reconnection: it fails, the manager keeps
                    // reconnecting, and the next call finds it back.
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(1));
                ConnectionManager::new_lazy_with_config(client, config).map_err(unavailable)
            })
            .await?;
        Ok(connection.clone())
    }

    /// Runs one command or script with the store's bound on it.
    async fn run<T: redis::FromRedisValue>(
        &self,
        command: impl AsyncFnOnce(&mut ConnectionManager) -> Result<T, RedisError>,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection().await?;
        match tokio::time::timeout(self.timeout, command(&mut connection)).await {
            Ok(result) => result.map_err(unavailable),
            Err(_) => Err(StoreError::Unavailable {
                reason: format!("no answer within {:?}", self.timeout),
            }),
        }
    }
}

impl Redis {
    /// `ADMIT_SCRIPT`: slots (and the rate, when asked) at once.
    async fn admit_with_slots(
        &self,
        rate: Option<(&str, Rate)>,
        slots: Option<Slots<'_>>,
        interval_ms: f64,
        burst: u32,
    ) -> Result<(i64, i64), StoreError> {
        self.run(async |c| {
            self.admit
                .key(slots.map_or("", |s| s.key))
                .key(rate.map_or("", |(key, _)| key))
                .arg(u8::from(slots.is_some()))
                .arg(u8::from(rate.is_some()))
                .arg(slots.map_or(0, |s| s.limit))
                .arg(slots.map_or(1, |s| px(s.lease)))
                .arg(slots.map_or(&b""[..], |s| s.id))
                .arg(interval_ms)
                .arg(burst)
                .invoke_async(c)
                .await
        })
        .await
    }
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable {
        reason: e.to_string(),
    }
}

fn px(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}

impl Backend for Redis {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.run(async |c| redis::cmd("GET").arg(key).query_async(c).await)
            .await
    }

    async fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), StoreError> {
        self.run(async |c| {
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(px(ttl))
                .query_async(c)
                .await
        })
        .await
    }

    async fn put_new(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, StoreError> {
        let written: Option<String> = self
            .run(async |c| {
                redis::cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(px(ttl))
                    .query_async(c)
                    .await
            })
            .await?;
        Ok(written.is_some())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.run(async |c| redis::cmd("DEL").arg(key).query_async::<i64>(c).await)
            .await
            .map(drop)
    }

    async fn take(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.run(async |c| redis::cmd("GETDEL").arg(key).query_async(c).await)
            .await
    }

    async fn delete_if(&self, key: &str, value: &[u8]) -> Result<bool, StoreError> {
        let deleted: i64 = self
            .run(async |c| self.delete_if.key(key).arg(value).invoke_async(c).await)
            .await?;
        Ok(deleted == 1)
    }

    async fn admit(
        &self,
        rate: Option<(&str, Rate)>,
        slots: Option<Slots<'_>>,
    ) -> Result<Decision, StoreError> {
        let (interval_ms, burst) = rate.map_or((0.0, 1), |(_, r)| {
            (r.interval.as_secs_f64() * 1000.0, r.burst.max(1))
        });
        let (decision, wait): (i64, i64) = match (rate, slots) {
            (Some((key, _)), None) => {
                self.run(async |c| {
                    self.rate
                        .key(key)
                        .arg(interval_ms)
                        .arg(burst)
                        .invoke_async(c)
                        .await
                })
                .await?
            }
            _ => {
                self.admit_with_slots(rate, slots, interval_ms, burst)
                    .await?
            }
        };
        Ok(match decision {
            1 => Decision::Admitted,
            2 => Decision::Busy,
            _ => Decision::Limited {
                retry_after: Duration::from_millis(wait.max(1) as u64),
            },
        })
    }

    async fn renew(&self, key: &str, id: &[u8], lease: Duration) -> Result<bool, StoreError> {
        let renewed: i64 = self
            .run(async |c| {
                self.renew
                    .key(key)
                    .arg(id)
                    .arg(px(lease))
                    .invoke_async(c)
                    .await
            })
            .await?;
        Ok(renewed == 1)
    }

    async fn release(&self, key: &str, id: &[u8]) -> Result<(), StoreError> {
        self.run(async |c| {
            redis::cmd("ZREM")
                .arg(key)
                .arg(id)
                .query_async::<i64>(c)
                .await
        })
        .await
        .map(drop)
    }
}
