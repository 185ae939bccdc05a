//! The committed CRD YAML must be exactly what the Rust types generate.

#[test]
fn committed_crds_match_the_types() {
    // Read at run time (cargo sets it for tests too), not baked in with env!: a test binary
    // cached from another checkout of the same sources (CI shares the cargo cache) would
    // otherwise look for the YAML in that checkout.
    let dir = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests"),
    );
    for (file, generated) in switchboard_crds::crd_manifests() {
        let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| {
            panic!("crds/{file} is missing ({e}): run `cargo run -p switchboard-crds --bin crdgen`")
        });
        assert!(
            committed == generated,
            "crds/{file} differs from the Rust types: run `cargo run -p switchboard-crds --bin crdgen` and commit the result"
        );
    }
}
