//! The embedded store: a map in this process (one replica, the standalone default, the demo).
//! With a file, what it holds is written there at most twice a second (values sealed as in
//! Redis, atomically by rename, mode 0600) and read back at start, so a restart does not
//! disconnect every account.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::backend::{Backend, Decision, Rate, RateDecision, Slots, gcra};

/// How often a dirty store is written to its file.
const WRITE_EVERY: Duration = Duration::from_millis(500);
/// Expired entries are swept on a write once the map has grown by this many since the last sweep.
const SWEEP_AFTER: usize = 1024;

pub(crate) struct Memory {
    shared: Arc<Shared>,
}

struct Shared {
    entries: Mutex<Entries>,
    dirty: AtomicBool,
    file: Option<PathBuf>,
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    swept_at: usize,
    /// Concurrency slots: lease id -> when it lapses (unix ms), by key. Never written to the
    /// file (a restart forgives what was in flight).
    slots: HashMap<String, HashMap<Vec<u8>, u64>>,
}

#[derive(Clone, Serialize, Deserialize)]
struct Entry {
    #[serde(rename = "v", with = "as_base64")]
    value: Vec<u8>,
    /// Unix milliseconds (a wall clock, so the file means the same after a restart).
    #[serde(rename = "e")]
    expires: u64,
}

#[derive(Serialize, Deserialize)]
struct FileContent {
    version: u32,
    entries: HashMap<String, Entry>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn expiry(ttl: Duration) -> u64 {
    now_ms().saturating_add(ttl.as_millis().max(1) as u64)
}

impl Memory {
    /// An empty store, or the one `file` holds (read now; written from now on).
    pub(crate) fn new(file: Option<PathBuf>) -> Result<Memory, StoreError> {
        let mut entries = Entries::default();
        if let Some(path) = &file {
            entries.map = read_file(path)?;
        }
        let shared = Arc::new(Shared {
            entries: Mutex::new(entries),
            dirty: AtomicBool::new(false),
            file,
        });
        if shared.file.is_some() {
            let weak = Arc::downgrade(&shared);
            std::thread::Builder::new()
                .name("store-writer".into())
                .spawn(move || write_while_alive(weak))
                .map_err(|e| StoreError::File {
                    path: String::new(),
                    reason: format!("cannot start its writer: {e}"),
                })?;
        }
        Ok(Memory { shared })
    }

    /// An empty store with no file.
    pub(crate) fn empty() -> Memory {
        Memory {
            shared: Arc::new(Shared {
                entries: Mutex::new(Entries::default()),
                dirty: AtomicBool::new(false),
                file: None,
            }),
        }
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        // A panic while holding the lock leaves a map that is still whole: every change is one
        // insert or remove.
        self.shared
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn changed(&self) {
        if self.shared.file.is_some() {
            self.shared.dirty.store(true, Ordering::Release);
        }
    }

    fn live<'a>(entries: &'a mut Entries, key: &str) -> Option<&'a mut Entry> {
        let now = now_ms();
        if entries.map.get(key).is_some_and(|e| e.expires <= now) {
            entries.map.remove(key);
        }
        entries.map.get_mut(key)
    }

    fn insert(&self, entries: &mut Entries, key: &str, entry: Entry) {
        entries.map.insert(key.to_string(), entry);
        if entries.map.len() > entries.swept_at + SWEEP_AFTER {
            let now = now_ms();
            entries.map.retain(|_, e| e.expires > now);
            entries.swept_at = entries.map.len();
        }
        self.changed();
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if self.shared.dirty.swap(false, Ordering::AcqRel) {
            write_now(&self.shared);
        }
    }
}

impl Backend for Memory {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut entries = self.entries();
        Ok(Memory::live(&mut entries, key).map(|e| e.value.clone()))
    }

    async fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), StoreError> {
        let mut entries = self.entries();
        let entry = Entry {
            value: value.to_vec(),
            expires: expiry(ttl),
        };
        self.insert(&mut entries, key, entry);
        Ok(())
    }

    async fn put_new(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, StoreError> {
        let mut entries = self.entries();
        if Memory::live(&mut entries, key).is_some() {
            return Ok(false);
        }
        let entry = Entry {
            value: value.to_vec(),
            expires: expiry(ttl),
        };
        self.insert(&mut entries, key, entry);
        Ok(true)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        if self.entries().map.remove(key).is_some() {
            self.changed();
        }
        Ok(())
    }

    async fn take(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut entries = self.entries();
        let live = Memory::live(&mut entries, key).is_some();
        let taken = if live { entries.map.remove(key) } else { None };
        if taken.is_some() {
            self.changed();
        }
        Ok(taken.map(|e| e.value))
    }

    async fn delete_if(&self, key: &str, value: &[u8]) -> Result<bool, StoreError> {
        let mut entries = self.entries();
        let holds = Memory::live(&mut entries, key).is_some_and(|e| e.value == value);
        if holds {
            entries.map.remove(key);
            self.changed();
        }
        Ok(holds)
    }

    async fn admit(
        &self,
        rate: Option<(&str, Rate)>,
        slots: Option<Slots<'_>>,
    ) -> Result<Decision, StoreError> {
        let mut entries = self.entries();
        let now = now_ms();
        if let Some(slots) = slots {
            let held = entries.slots.entry(slots.key.to_string()).or_default();
            held.retain(|_, lapses| *lapses > now);
            if held.len() >= slots.limit as usize {
                return Ok(Decision::Busy);
            }
        }
        if let Some((key, rate)) = rate {
            let tat = Memory::live(&mut entries, key)
                .and_then(|e| e.value.as_slice().try_into().ok())
                .map(f64::from_le_bytes);
            let (decision, next) = gcra(tat, now as f64, rate);
            if let RateDecision::Refused { retry_after } = decision {
                return Ok(Decision::Limited { retry_after });
            }
            let next = next.unwrap_or(now as f64);
            let entry = Entry {
                value: next.to_le_bytes().to_vec(),
                expires: (next.ceil() as u64).max(now + 1),
            };
            // Counters are not worth a write to the file: a restart forgives a rate.
            entries.map.insert(key.to_string(), entry);
        }
        if let Some(slots) = slots {
            let lapses = now.saturating_add(slots.lease.as_millis() as u64);
            entries
                .slots
                .entry(slots.key.to_string())
                .or_default()
                .insert(slots.id.to_vec(), lapses);
        }
        Ok(Decision::Admitted)
    }

    async fn renew(&self, key: &str, id: &[u8], lease: Duration) -> Result<bool, StoreError> {
        let mut entries = self.entries();
        let now = now_ms();
        let Some(lapses) = entries.slots.get_mut(key).and_then(|held| held.get_mut(id)) else {
            return Ok(false);
        };
        if *lapses <= now {
            return Ok(false);
        }
        *lapses = now.saturating_add(lease.as_millis() as u64);
        Ok(true)
    }

    async fn release(&self, key: &str, id: &[u8]) -> Result<(), StoreError> {
        let mut entries = self.entries();
        if let Some(held) = entries.slots.get_mut(key) {
            held.remove(id);
            if held.is_empty() {
                entries.slots.remove(key);
            }
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<HashMap<String, Entry>, StoreError> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(file_error(path, e.to_string())),
    };
    let content: FileContent =
        serde_json::from_slice(&text).map_err(|e| file_error(path, format!("not a store: {e}")))?;
    if content.version != 1 {
        return Err(file_error(
            path,
            format!("version {} is not 1", content.version),
        ));
    }
    let now = now_ms();
    Ok(content
        .entries
        .into_iter()
        .filter(|(_, e)| e.expires > now)
        .collect())
}

fn file_error(path: &Path, reason: String) -> StoreError {
    StoreError::File {
        path: path.display().to_string(),
        reason,
    }
}

fn write_while_alive(shared: Weak<Shared>) {
    loop {
        std::thread::sleep(WRITE_EVERY);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.dirty.swap(false, Ordering::AcqRel) {
            write_now(&shared);
        }
    }
}

fn write_now(shared: &Shared) {
    let Some(path) = &shared.file else {
        return;
    };
    let entries = {
        let entries = shared
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = now_ms();
        entries
            .map
            .iter()
            .filter(|(_, e)| e.expires > now)
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    };
    let content = FileContent {
        version: 1,
        entries,
    };
    if let Err(e) = write_atomically(path, &content) {
        // Kept dirty: the next round tries again.
        shared.dirty.store(true, Ordering::Release);
        tracing::warn!(file = %path.display(), error = %e, "cannot write the store's file");
    }
}

fn write_atomically(path: &Path, content: &FileContent) -> std::io::Result<()> {
    let text = serde_json::to_vec(content).map_err(std::io::Error::other)?;
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&temp)?;
    std::io::Write::write_all(&mut file, &text)?;
    file.sync_all()?;
    std::fs::rename(&temp, path)
}

mod as_base64 {
    use super::*;

    pub(super) fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}
