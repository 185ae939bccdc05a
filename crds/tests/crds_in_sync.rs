//! The committed CRD YAML must be exactly what the Rust types generate.

#[test]
fn committed_crds_match_the_types() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
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
