//! What the source-scanning tests of this folder share: which crates they read and every `.rs`
//! file below a folder. One list, so a new crate is scanned by all of them or by none. Every
//! binary here uses all of it (no `allow(dead_code)`).

use std::path::{Path, PathBuf};

/// The workspace's crates, scanned by their `src/` directories.
pub const CRATES: &[&str] = &[
    "crd",
    "expr",
    "compiler",
    "walk",
    "runtime-image",
    "controller",
    "cli",
    "testenv",
    "test-support",
    "demo",
];

/// The folder of crate `krate`, one of [`CRATES`], from this crate's manifest.
pub fn crate_dir(krate: &str) -> PathBuf {
    assert!(CRATES.contains(&krate), "{krate} is not in CRATES");
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(krate)
}

/// Every `.rs` file below `dir`, at any depth, pushed onto `out`.
pub fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
