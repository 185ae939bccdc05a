//! `crdgen [DIR]`: writes the CRD manifests generated from the Rust types into DIR (default:
//! the `crds/` folder). `crdgen --check [DIR]` fails when the files there differ.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.first().is_some_and(|a| a == "--check");
    if check {
        args.remove(0);
    }
    let dir = args
        .first()
        .map(PathBuf::from)
        // `cargo run` sets it at run time; the compile-time value may name another checkout
        // whose build the shared cargo cache reused.
        .or_else(|| std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let mut stale = false;
    for (file, yaml) in switchboard_crds::crd_manifests() {
        let path = dir.join(file);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
                eprintln!(
                    "{} differs from the Rust types: run `cargo run -p switchboard-crds --bin crdgen`",
                    path.display()
                );
                stale = true;
            }
        } else if let Err(e) = std::fs::write(&path, yaml) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        } else {
            println!("wrote {}", path.display());
        }
    }
    if stale {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
