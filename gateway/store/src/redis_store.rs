//! The shared backend: Redis 7 or Valkey, which every replica reaches. One connection per
//! replica, multiplexed (redis's `ConnectionManager`, which reconnects by itself); every
//! operation is one command or one script, bounded by `gateway.store.redis.timeout`. Rates are
//! counted on Redis's clock (`TIME` inside the script), so replicas' clocks need not agree.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, IntoConnectionInfo, RedisError, Script};
use tokio::sync::OnceCell;

use crate::StoreError;
use crate::backend::{Backend, Rate, RateDecision};

/// GCRA in one round trip: the arithmetic of `backend::gcra` on the server's clock. Returns
/// `{1, 0}` admitted, `{0, wait_ms}` refused.
const RATE_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local tolerance = interval * (tonumber(ARGV[2]) - 1)
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
if tat - now > tolerance then
  return {0, math.ceil(tat - now - tolerance)}
end
local next = tat + interval
redis.call('SET', KEYS[1], tostring(next), 'PX', math.ceil(next - now))
return {1, 0}
";

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

    async fn rate(&self, key: &str, rate: Rate) -> Result<RateDecision, StoreError> {
        let interval_ms = rate.interval.as_secs_f64() * 1000.0;
        let (admitted, wait): (i64, i64) = self
            .run(async |c| {
                self.rate
                    .key(key)
                    .arg(interval_ms)
                    .arg(rate.burst.max(1))
                    .invoke_async(c)
                    .await
            })
            .await?;
        Ok(if admitted == 1 {
            RateDecision::Admitted
        } else {
            RateDecision::Refused {
                retry_after: Duration::from_millis(wait.max(1) as u64),
            }
        })
    }
}
