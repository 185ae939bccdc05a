//! Standalone mode: the snapshot comes from a file. The file is re-read when its contents
//! change (polled, so it also works on mounted ConfigMaps/Secrets whose symlinks flip) and on
//! SIGHUP (which also picks up changed `env`/`file` secrets). A broken edit is logged with the
//! field it concerns and the previous snapshot keeps serving (docs/architecture.md, invariant 9).
//!
//! A file rewritten in place (`generate > config.yaml`: truncate, then write) is empty or half
//! written for a moment, and an empty file parses as a valid empty config that refuses every
//! caller. So a change is applied only once two polls in a row read the same content, and a
//! file with nothing in it is never applied (an empty config is written as `{}`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use switchboard_snapshot::{SecretLookup, SnapshotError, SystemLookup, load};

use switchboard_core::live::SnapshotSink;
use switchboard_core::table::RoutingTable;

/// How often the file is checked for changes.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Resolves, validates and indexes a file's content: a table ready to swap in.
pub fn load_table(content: &[u8]) -> Result<RoutingTable, SnapshotError> {
    load_table_with(content, &SystemLookup)
}

fn load_table_with(
    content: &[u8],
    lookup: &dyn SecretLookup,
) -> Result<RoutingTable, SnapshotError> {
    let whole = |message: &str| SnapshotError {
        errors: vec![switchboard_snapshot::FieldError {
            path: String::new(),
            message: message.into(),
        }],
    };
    let text = std::str::from_utf8(content).map_err(|_| whole("the file is not UTF-8"))?;
    if text.trim().is_empty() {
        return Err(whole(
            "the file is empty (being rewritten?); an empty config is written as {}",
        ));
    }
    let snapshot = load(text, lookup)?;
    RoutingTable::build(&snapshot)
}

/// What a load read: the config's content, and the files its `{file: ...}` secrets name
/// (keys, tokens, CA bundles, client certificates), so the watcher can see a rotated one: what
/// the gateway serves is the config and these files together.
#[derive(Debug)]
pub struct Applied {
    pub content: Vec<u8>,
    pub secret_files: Vec<PathBuf>,
}

/// The system's environment and files, noting which files were read.
#[derive(Default)]
struct Recording(std::cell::RefCell<Vec<PathBuf>>);

impl SecretLookup for Recording {
    fn env(&self, name: &str) -> Option<String> {
        SystemLookup.env(name)
    }
    fn file(&self, path: &str) -> std::io::Result<String> {
        self.0.borrow_mut().push(PathBuf::from(path));
        SystemLookup.file(path)
    }
}

/// What the watcher compares between polls: the config's bytes and those of its secret files.
fn read_state(path: &Path, files: &[PathBuf]) -> Option<Vec<u8>> {
    std::fs::read(path)
        .ok()
        .map(|config| with_files(config, files))
}

fn with_files(mut state: Vec<u8>, files: &[PathBuf]) -> Vec<u8> {
    for file in files {
        // A file that cannot be read is a state too (the reload will say what is wrong).
        state.extend_from_slice(b"\0");
        state.extend_from_slice(&std::fs::read(file).unwrap_or_default());
    }
    state
}

/// Reads the file and applies it; on error, logs it and keeps what is served.
pub fn reload(sink: &dyn SnapshotSink, path: &Path) -> Result<Applied, SnapshotError> {
    apply_content(sink, path, std::fs::read(path))
}

/// Applies content read from `path`; on error, logs it and keeps what is served.
fn apply_content(
    sink: &dyn SnapshotSink,
    path: &Path,
    content: std::io::Result<Vec<u8>>,
) -> Result<Applied, SnapshotError> {
    let content = content.map_err(|e| SnapshotError {
        errors: vec![switchboard_snapshot::FieldError {
            path: String::new(),
            message: format!("cannot read {}: {e}", path.display()),
        }],
    });
    let recording = Recording::default();
    let result = content.and_then(|c| load_table_with(&c, &recording).map(|t| (t, c)));
    match result {
        Ok((table, content)) => {
            if table.settings.session_key.is_none() {
                tracing::warn!(
                    "gateway.sessionKey is not set: legacy sessions and hidden tool results are \
                     sealed with a key this process made; they survive a reload of this file but \
                     end when the process restarts, and no other replica can open them"
                );
            }
            tracing::info!(
                file = %path.display(),
                servers = table.servers.len(),
                keys = table.key_count(),
                "config applied"
            );
            sink.apply(table);
            Ok(Applied {
                content,
                secret_files: recording.0.into_inner(),
            })
        }
        Err(e) => {
            sink.rejected();
            tracing::error!(file = %path.display(), error = %e, "config rejected; the previous config keeps serving");
            Err(e)
        }
    }
}

/// How long the first load waits for a file that is being written to hold still.
const STARTUP_SETTLE: Duration = Duration::from_secs(5);

/// The first load, by the same rule as later ones: content written in the last poll interval
/// is applied only once two reads a poll apart agree, so a gateway started while the file is
/// rewritten in place waits for the write to end instead of exiting on an empty or half
/// written file. A file that has not changed for a poll interval loads at once. After
/// `STARTUP_SETTLE` the content is judged as it is (an invalid file still stops the gateway).
pub async fn initial_load(sink: &dyn SnapshotSink, path: &Path) -> Result<Applied, SnapshotError> {
    let deadline = tokio::time::Instant::now() + STARTUP_SETTLE;
    let mut content = std::fs::read(path);
    while tokio::time::Instant::now() < deadline {
        let written_lately = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age < POLL_INTERVAL);
        // (empty: truncated a moment ago and not written yet, or a writer that stalls)
        let empty = content
            .as_ref()
            .is_ok_and(|c| c.iter().all(u8::is_ascii_whitespace));
        if !written_lately && !empty {
            break;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
        let again = std::fs::read(path);
        let settled = match (&content, &again) {
            (Ok(before), Ok(after)) => before == after,
            (Err(_), Err(_)) => true,
            _ => false,
        };
        content = again;
        if settled && !empty {
            break;
        }
    }
    apply_content(sink, path, content)
}

/// Watches the file for the life of the process. `applied` is the content the gateway serves
/// now (read once by the caller, so an edit right after start is never missed) and `hangup`
/// the SIGHUP stream, registered before the gateway announced itself.
pub async fn watch(
    sink: Arc<dyn SnapshotSink>,
    path: PathBuf,
    applied: Option<Applied>,
    mut hangup: Option<tokio::signal::unix::Signal>,
) {
    let (mut files, mut last) = match applied {
        Some(a) => {
            let state = with_files(a.content, &a.secret_files);
            (a.secret_files, Some(state))
        }
        None => (Vec::new(), None),
    };
    // A changed content seen once; applied when the next poll reads it again.
    let mut settling: Option<Vec<u8>> = None;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            _ = tick.tick() => false,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => true,
        };
        let current = read_state(&path, &files);
        if forced {
            tracing::info!("SIGHUP: reloading config");
        } else if current == last {
            settling = None;
            continue;
        } else if current != settling {
            // Changed since the last poll: maybe mid-write. Wait for it to hold still.
            settling = current;
            continue;
        }
        settling = None;
        last = current;
        // A rejected edit was logged by reload; the previous table keeps serving. A config
        // that names other files is watched with those from now on (the state then differs
        // once more, which costs one more reload of the same content).
        if let Ok(applied) = reload(&*sink, &path) {
            files = applied.secret_files;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gateway started while its config is rewritten in place (truncated, then written a
    /// moment later) waits for the write instead of failing on the empty file.
    #[tokio::test]
    async fn the_first_load_waits_for_a_file_being_rewritten() {
        let path = std::env::temp_dir().join(format!(
            "switchboard-first-load-{}.yaml",
            std::process::id()
        ));
        std::fs::write(&path, "").unwrap();
        // Removed when the test ends, passed or failed.
        struct Removed(std::path::PathBuf);
        impl Drop for Removed {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let _removed = Removed(path.clone());
        let writer = {
            let path = path.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(600)).await;
                std::fs::write(&path, "servers:\n- {name: a, url: 'http://x/mcp'}\n").unwrap();
            })
        };
        let sink = switchboard_core::live::LiveTable::empty();
        let loaded = initial_load(&sink, &path).await;
        writer.await.unwrap();
        assert!(loaded.is_ok(), "{loaded:?}");
        assert!(sink.current().server_by_id("a").is_some());
    }

    #[test]
    fn an_empty_file_is_refused_but_an_explicit_empty_config_loads() {
        for empty in [&b""[..], b"\n", b"  \n\t\n"] {
            let Err(err) = load_table(empty) else {
                panic!("an empty file must not load");
            };
            assert!(err.to_string().contains("the file is empty"), "{err}");
        }
        let table = load_table(b"{}").expect("{} is an empty config");
        assert_eq!(table.servers.len(), 0);
    }
}
