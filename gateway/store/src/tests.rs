//! One suite, both backends: the embedded store and a real Redis (Debian's `redis-server`,
//! started here on a Unix socket in a directory of its own, removed after).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use switchboard_snapshot::{MemoryStoreSettings, RedisStoreSettings, SecretSource, StoreSettings};

use super::*;
use crate::backend::{Backend, Decision, Slots};

const SESSION_KEY: &str = "a session key of the tests";

/// Everything a backend must do the same way.
async fn suite(store: &Store) {
    let key = StoreKey::new("test", &[b"person", b"server"]);
    let ttl = Duration::from_secs(60);

    assert_eq!(store.get(&key).await.expect("get"), None);
    store.put(&key, b"token one", ttl).await.expect("put");
    assert_eq!(
        store.get(&key).await.expect("get").as_deref(),
        Some(&b"token one"[..])
    );
    store.put(&key, b"token two", ttl).await.expect("overwrite");
    assert_eq!(
        store.take(&key).await.expect("take").as_deref(),
        Some(&b"token two"[..])
    );
    assert_eq!(
        store.take(&key).await.expect("take again"),
        None,
        "taken once"
    );
    store.put(&key, b"x", ttl).await.expect("put");
    store.delete(&key).await.expect("delete");
    assert_eq!(store.get(&key).await.expect("get"), None);

    // Expiry.
    let short = StoreKey::new("test", &[b"short"]);
    store
        .put(&short, b"v", Duration::from_millis(50))
        .await
        .expect("put");
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(store.get(&short).await.expect("get"), None, "expired");

    // Single use.
    let code = StoreKey::new("test-used", &[b"code"]);
    assert!(store.first_use(&code, ttl).await.expect("first"));
    assert!(!store.first_use(&code, ttl).await.expect("second"));

    // Locks: one holder; a release by a holder whose lock expired frees nothing of the next's.
    let lock_key = StoreKey::new("test-lock", &[b"refresh"]);
    let held = store
        .lock(&lock_key, Duration::from_millis(100))
        .await
        .expect("lock")
        .expect("free");
    assert!(
        store.lock(&lock_key, ttl).await.expect("lock").is_none(),
        "held"
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let next = store
        .lock(&lock_key, ttl)
        .await
        .expect("lock")
        .expect("the first holder's lock expired");
    store.unlock(held).await.expect("late unlock");
    assert!(
        store.lock(&lock_key, ttl).await.expect("lock").is_none(),
        "the late release left the next holder's lock alone"
    );
    store.unlock(next).await.expect("unlock");
    let again = store.lock(&lock_key, ttl).await.expect("lock");
    assert!(again.is_some(), "released");

    // Rate: the burst, then refused with a wait; both sides of many concurrent requests.
    let rate_key = StoreKey::new("test-rate", &[b"key"]);
    let rate = Rate {
        interval: Duration::from_secs(6),
        burst: 10,
    };
    let decisions =
        futures_util::future::join_all((0..25).map(|_| store.admit(Some((&rate_key, rate)), None)))
            .await;
    let admitted = decisions
        .iter()
        .filter(|d| matches!(d, Ok(Admission::Admitted(None))))
        .count();
    assert_eq!(admitted, 10, "exactly the burst: {decisions:?}");
    let Ok(Admission::Limited { retry_after }) = store.admit(Some((&rate_key, rate)), None).await
    else {
        panic!("over the rate");
    };
    assert!(
        retry_after > Duration::ZERO && retry_after <= Duration::from_secs(6),
        "{retry_after:?}"
    );

    // Concurrency: exactly the limit of many concurrent requests hold a slot; a slot given
    // back is taken again; a request the rate refuses takes no slot, one refused for a slot
    // spends no rate.
    let slots_key = StoreKey::new("test-slots", &[b"key"]);
    let decisions =
        futures_util::future::join_all((0..12).map(|_| store.admit(None, Some((&slots_key, 5)))))
            .await;
    let mut held: Vec<Slot> = Vec::new();
    for decision in decisions {
        match decision.expect("admit") {
            Admission::Admitted(Some(slot)) => held.push(slot),
            Admission::Busy => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(held.len(), 5, "exactly the limit");
    assert!(
        store.renew(&held[0]).await.expect("renew"),
        "a held slot renews"
    );
    store
        .release(held.pop().expect("a slot"))
        .await
        .expect("release");
    let Ok(Admission::Admitted(Some(again))) = store.admit(None, Some((&slots_key, 5))).await
    else {
        panic!("a released slot is free again");
    };
    held.push(again);
    assert!(matches!(
        store.admit(None, Some((&slots_key, 5))).await,
        Ok(Admission::Busy)
    ));
    let both_rate = StoreKey::new("test-both-rate", &[b"key"]);
    let both_slots = StoreKey::new("test-both-slots", &[b"key"]);
    let one_per_minute = Rate {
        interval: Duration::from_secs(60),
        burst: 1,
    };
    let first = store
        .admit(Some((&both_rate, one_per_minute)), Some((&both_slots, 1)))
        .await;
    let Ok(Admission::Admitted(Some(first))) = first else {
        panic!("{first:?}");
    };
    // Every slot held: refused for it, the rate untouched.
    assert!(matches!(
        store
            .admit(Some((&both_rate, one_per_minute)), Some((&both_slots, 1)))
            .await,
        Ok(Admission::Busy)
    ));
    store.release(first).await.expect("release");
    // The slot free, the rate spent by the first alone: refused by the rate, no slot taken.
    assert!(matches!(
        store
            .admit(Some((&both_rate, one_per_minute)), Some((&both_slots, 1)))
            .await,
        Ok(Admission::Limited { .. })
    ));
    assert!(matches!(
        store.admit(None, Some((&both_slots, 1))).await,
        Ok(Admission::Admitted(Some(_)))
    ));
    for slot in held {
        store.release(slot).await.expect("release");
    }

    // What another kind of key holds does not open as this one.
    let other = StoreKey::new("other", &[b"person", b"server"]);
    assert_ne!(other, key);
    assert!(key.as_str().starts_with("sb:test:"));
    assert!(!key.as_str().contains("person"));
}

/// A slot its holder never renews nor releases (a replica that died) lapses after its lease;
/// one that lapsed does not renew.
async fn slots_lapse(backend: &impl Backend) {
    let lease = Duration::from_millis(300);
    let slots = |id: &'static [u8]| Slots {
        key: "sb:test-lapse:k",
        limit: 1,
        lease,
        id,
    };
    assert_eq!(
        backend
            .admit(None, Some(slots(b"dead")))
            .await
            .expect("admit"),
        Decision::Admitted
    );
    assert_eq!(
        backend
            .admit(None, Some(slots(b"next")))
            .await
            .expect("admit"),
        Decision::Busy
    );
    assert!(
        backend
            .renew("sb:test-lapse:k", b"dead", lease)
            .await
            .expect("renew")
    );
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    assert!(
        !backend
            .renew("sb:test-lapse:k", b"dead", lease)
            .await
            .expect("renew"),
        "lapsed"
    );
    assert_eq!(
        backend
            .admit(None, Some(slots(b"next")))
            .await
            .expect("admit"),
        Decision::Admitted
    );
    backend
        .release("sb:test-lapse:k", b"next")
        .await
        .expect("release");
}

#[tokio::test]
async fn the_embedded_store_passes_the_suite() {
    suite(&Store::in_memory()).await;
    assert!(!Store::in_memory().is_shared());
    slots_lapse(&memory::Memory::empty()).await;
}

#[tokio::test]
async fn redis_passes_the_same_suite_and_holds_only_sealed_values() {
    let server = RedisServer::start(None);
    let store = server.store(None);
    assert!(store.is_shared());
    suite(&store).await;
    let Backends::Redis(redis) = &store.backend else {
        panic!("a Redis store");
    };
    slots_lapse(redis.as_ref()).await;

    let key = StoreKey::new("account", &[b"alice", b"github"]);
    let token = b"gho_the-upstream-refresh-token-of-alice";
    store
        .put(&key, token, Duration::from_secs(60))
        .await
        .expect("put");
    let raw = server.raw_get(key.as_str());
    assert!(!raw.is_empty(), "stored");
    assert!(
        !raw.windows(token.len()).any(|w| w == token),
        "the value in Redis is not the token"
    );
    assert_eq!(raw.len(), token.len() + 4 + 12 + 16, "key id, nonce, tag");
    let keys = server.raw_keys();
    assert!(
        keys.iter()
            .all(|k| !k.contains("alice") && !k.contains("github")),
        "{keys:?}"
    );

    // Another gateway with another key reads nothing it could use.
    let other = server.store(Some("a different store key"));
    assert!(matches!(other.get(&key).await, Err(StoreError::Sealed)));
}

#[tokio::test]
async fn redis_with_a_password_refuses_a_client_without_it() {
    let server = RedisServer::start(Some("the redis password"));
    let with = server.store_with_password(Some("the redis password"));
    suite(&with).await;
    let without = server.store_with_password(None);
    let key = StoreKey::new("test", &[b"x"]);
    let refused = without.get(&key).await.expect_err("no AUTH");
    assert!(
        matches!(refused, StoreError::Unavailable { .. }),
        "{refused}"
    );
    assert!(!without.is_up());
    assert!(
        !refused.to_string().contains("the redis password"),
        "{refused}"
    );
}

/// `rediss://` to a Redis whose certificate a private CA signed: the CA given as `caBundle`
/// is trusted (and the suite passes); another CA's bundle, or none (the public roots), is not.
#[tokio::test]
async fn redis_over_tls_trusts_the_configured_ca_alone() {
    let pki = Pki::new("127.0.0.1");
    let server = RedisServer::start_tls(&pki);
    let trusted = server.tls_store(Some(&pki.ca_pem));
    suite(&trusted).await;
    let key = StoreKey::new("test", &[b"tls"]);
    for (what, bundle) in [
        ("another CA", Some(Pki::new("127.0.0.1").ca_pem)),
        ("the public roots", None),
    ] {
        let refused = server.tls_store(bundle.as_deref()).get(&key).await;
        assert!(
            matches!(refused, Err(StoreError::Unavailable { .. })),
            "{what}: {refused:?}"
        );
    }
}

/// A private CA and Redis's certificate under it, as PEM files in a directory of their own.
struct Pki {
    dir: TempDir,
    ca_pem: String,
}

impl Pki {
    fn new(host: &str) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let dir = TempDir::new("pki");
        let ca_key = KeyPair::generate().expect("key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("store test CA {}", hex::encode(rand::random::<[u8; 4]>())),
        );
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let issuer = Issuer::new(ca, ca_key);
        let leaf_key = KeyPair::generate().expect("key");
        let leaf = CertificateParams::new(vec![host.to_string()])
            .expect("params")
            .signed_by(&leaf_key, &issuer)
            .expect("leaf");
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).expect("write");
        std::fs::write(dir.path().join("redis.pem"), leaf.pem()).expect("write");
        std::fs::write(dir.path().join("redis.key"), leaf_key.serialize_pem()).expect("write");
        Pki {
            ca_pem: ca_cert.pem(),
            dir,
        }
    }
}

#[tokio::test]
async fn redis_down_fails_fast_and_the_store_recovers_by_itself() {
    let mut server = RedisServer::start(None);
    let observer = Arc::new(Seen::default());
    let store = server.store(None).observed_by(observer.clone());
    let key = StoreKey::new("test", &[b"k"]);
    store
        .put(&key, b"v", Duration::from_secs(60))
        .await
        .expect("put");

    server.stop();
    let started = Instant::now();
    let down = store.get(&key).await.expect_err("down");
    assert!(matches!(down, StoreError::Unavailable { .. }), "{down}");
    assert!(!store.is_up());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the timeout: {:?}",
        started.elapsed()
    );

    server.restart();
    let mut recovered = false;
    for _ in 0..50 {
        if store.put(&key, b"w", Duration::from_secs(60)).await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "the store came back within 5 s");
    assert!(store.is_up());
    let seen = observer.0.lock().expect("observer");
    assert!(
        seen.contains(&("get", false)) && seen.contains(&("put", true)),
        "{seen:?}"
    );
}

#[tokio::test]
async fn the_embedded_store_keeps_what_it_held_across_a_restart_in_its_file() {
    let dir = TempDir::new("store-file");
    let file = dir.path().join("store.json");
    let settings = StoreSettings {
        memory: Some(MemoryStoreSettings {
            file: Some(file.display().to_string()),
        }),
        ..StoreSettings::default()
    };
    let key = StoreKey::new("account", &[b"alice", b"github"]);
    {
        let store = Store::from_settings(&settings, Some(SESSION_KEY)).expect("store");
        store
            .put(&key, b"refresh-token-of-alice", Duration::from_secs(60))
            .await
            .expect("put");
        store
            .put(
                &StoreKey::new("t", &[b"gone"]),
                b"v",
                Duration::from_millis(1),
            )
            .await
            .expect("put");
    }
    let text = std::fs::read(&file).expect("written on drop");
    assert!(
        !text.windows(6).any(|w| w == b"refres"),
        "sealed in the file too"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let store = Store::from_settings(&settings, Some(SESSION_KEY)).expect("reopened");
    assert_eq!(
        store.get(&key).await.expect("get").as_deref(),
        Some(&b"refresh-token-of-alice"[..])
    );
    // Written within a second while running, not only at the end.
    store
        .put(&key, b"rotated", Duration::from_secs(60))
        .await
        .expect("put");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let reread = Store::from_settings(&settings, Some(SESSION_KEY)).expect("third");
    assert_eq!(
        reread.get(&key).await.expect("get").as_deref(),
        Some(&b"rotated"[..])
    );
    drop((store, reread));

    std::fs::write(&file, b"not json").expect("write");
    let broken = Store::from_settings(&settings, Some(SESSION_KEY)).expect_err("refused");
    assert!(broken.to_string().contains("store.json"), "{broken}");
}

/// What operations the store said it did, and whether each succeeded.
#[derive(Default)]
struct Seen(std::sync::Mutex<Vec<(&'static str, bool)>>);

impl StoreObserver for Seen {
    fn operation(
        &self,
        backend: &'static str,
        operation: &'static str,
        error: Option<&StoreError>,
    ) {
        assert_eq!(backend, "redis");
        if let Ok(mut seen) = self.0.lock() {
            seen.push((operation, error.is_none()));
        }
    }
}

/// A temporary directory removed on drop (tests leave nothing behind).
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "switchboard-{label}-{}-{}",
            std::process::id(),
            hex::encode(rand::random::<[u8; 6]>())
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Debian's `redis-server` on a Unix socket of its own (no port to race for), no persistence.
struct RedisServer {
    dir: TempDir,
    password: Option<String>,
    child: Option<Child>,
    /// The TLS port, for a server started with [`RedisServer::start_tls`].
    tls_port: Option<u16>,
}

impl RedisServer {
    fn start(password: Option<&str>) -> RedisServer {
        let mut server = RedisServer {
            dir: TempDir::new("redis"),
            password: password.map(str::to_owned),
            child: None,
            tls_port: None,
        };
        server.restart();
        server
    }

    /// Redis serving TLS on a loopback port (TLS has no Unix socket) with `pki`'s certificate.
    /// The port is picked free and released first: another process may take it meanwhile, so
    /// a start that does not come up is tried again on another port.
    fn start_tls(pki: &Pki) -> RedisServer {
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free port");
            let mut server = RedisServer {
                dir: TempDir::new("redis-tls"),
                password: None,
                child: None,
                tls_port: Some(port),
            };
            let file = |name: &str| pki.dir.path().join(name);
            let child = Command::new("redis-server")
                .args(["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--tls-cert-file")
                .arg(file("redis.pem"))
                .arg("--tls-key-file")
                .arg(file("redis.key"))
                .arg("--tls-ca-cert-file")
                .arg(file("ca.pem"))
                .args(["--tls-auth-clients", "no", "--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(server.dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start redis-server ({e}): install it with `tests/install-packages.sh redis-server=redis-server`")
                });
            server.child = Some(child);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return server;
                }
                if server
                    .child
                    .as_mut()
                    .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-server did not serve TLS (is it built with TLS? Debian's is)");
    }

    fn tls_store(&self, ca_bundle: Option<&str>) -> Store {
        let port = self.tls_port.expect("a TLS server");
        let settings = StoreSettings {
            redis: Some(RedisStoreSettings {
                url: format!("rediss://127.0.0.1:{port}/0"),
                username: None,
                password: None,
                ca_bundle: ca_bundle.map(|pem| SecretSource::Value { value: pem.into() }),
                timeout: Duration::from_millis(1000),
            }),
            ..StoreSettings::default()
        };
        Store::from_settings(&settings, Some(SESSION_KEY)).expect("store")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    fn restart(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let mut command = Command::new("redis-server");
        command
            .args(["--port", "0", "--unixsocket"])
            .arg(self.socket())
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(password) = &self.password {
            command.args(["--requirepass", password]);
        }
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start redis-server ({e}): install it with \
                 `tests/install-packages.sh redis-server=redis-server` (Debian's redis-server 7)"
            )
        });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.socket().exists() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not open its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    fn store(&self, key: Option<&str>) -> Store {
        self.store_with(key, self.password.as_deref())
    }

    fn store_with_password(&self, password: Option<&str>) -> Store {
        self.store_with(None, password)
    }

    fn store_with(&self, key: Option<&str>, password: Option<&str>) -> Store {
        let settings = StoreSettings {
            redis: Some(RedisStoreSettings {
                url: self.url(),
                username: None,
                password: password.map(|p| SecretSource::Value { value: p.into() }),
                ca_bundle: None,
                timeout: Duration::from_millis(500),
            }),
            key: key.map(|k| SecretSource::Value { value: k.into() }),
            ..StoreSettings::default()
        };
        Store::from_settings(&settings, Some(SESSION_KEY)).expect("store")
    }

    /// What Redis holds under `key`, read past the store with `redis-cli`.
    fn raw_get(&self, key: &str) -> Vec<u8> {
        self.cli(&["GET", key])
    }

    fn raw_keys(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.cli(&["KEYS", "*"]))
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn cli(&self, args: &[&str]) -> Vec<u8> {
        let mut command = Command::new("redis-cli");
        command.arg("-s").arg(self.socket());
        if let Some(password) = &self.password {
            command.env("REDISCLI_AUTH", password);
        }
        let out = command.args(args).output().expect("redis-cli");
        let mut stdout = out.stdout;
        if stdout.last() == Some(&b'\n') {
            stdout.pop();
        }
        stdout
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
