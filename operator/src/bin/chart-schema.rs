//! `chart-schema [FILE]`: writes the typed parts of the chart's values schema (Kubernetes types
//! and the gateway settings, see `switchboard_operator::chart_schema`) to FILE (default:
//! `charts/values-schema-types.json`). `chart-schema --check [FILE]` fails when FILE differs.
//! Then `python3 charts/values-schema.py` makes `charts/switchboard/values.schema.json`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.first().is_some_and(|a| a == "--check");
    if check {
        args.remove(0);
    }
    let path = args.first().map(PathBuf::from).unwrap_or_else(|| {
        // `cargo run` sets it at run time; the compile-time value may name another checkout
        // whose build the shared cargo cache reused.
        std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
            .join("../charts/values-schema-types.json")
    });
    let want = switchboard_operator::chart_schema::document();
    if check {
        if std::fs::read_to_string(&path).ok().as_deref() == Some(want.as_str()) {
            return ExitCode::SUCCESS;
        }
        eprintln!(
            "{} differs from the Rust types: run `cargo run -p switchboard-operator --bin chart-schema`, then `python3 charts/values-schema.py`",
            path.display()
        );
        return ExitCode::FAILURE;
    }
    match std::fs::write(&path, want) {
        Ok(()) => {
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot write {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}
