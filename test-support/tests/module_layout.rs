//! One module layout across the workspace (issue #45 item 5): a module with submodules is a
//! folder holding its `mod.rs` (`bind/mod.rs`, `bind/claim.rs`), never a `foo.rs` beside a
//! `foo/` folder. Two layouts side by side make a reader look in two places for a module's
//! root; `mod.rs` is the one most of the workspace used when this test was written (16 to 6).
//! A test binary's folder holds its `main.rs` (`controller/tests/lifecycle/main.rs`), and a
//! module's unit tests, when long, its `tests.rs` (`walk/src/retry/tests.rs`).

use std::path::Path;

mod common;

use common::{collect_rs, crate_dir, CRATES};

/// `foo.rs` + `foo/` pairs not moved yet, each with why. None: the last two
/// (`bind/in_object.rs`, `bind/parent.rs`) became `mod.rs` with the split of `bind/parent/`.
const KNOWN: &[&str] = &[];

#[test]
fn no_module_is_both_a_file_and_a_folder() {
    let mut pairs = Vec::new();
    let mut scanned = 0;
    for krate in CRATES {
        for part in ["src", "tests", "benches"] {
            let dir = crate_dir(krate).join(part);
            if !dir.is_dir() {
                continue;
            }
            let mut files = Vec::new();
            collect_rs(&dir, &mut files);
            scanned += files.len();
            for file in files {
                if file.with_extension("").is_dir() {
                    pairs.push(shown(krate, &dir, part, &file));
                }
            }
        }
    }
    assert!(scanned > 200, "the scan found only {scanned} files");
    let new: Vec<&String> = pairs
        .iter()
        .filter(|p| !KNOWN.contains(&p.as_str()))
        .collect();
    assert!(
        new.is_empty(),
        "modules both a file and a folder (move `foo.rs` to `foo/mod.rs`): {new:#?}"
    );
    let gone: Vec<&&str> = KNOWN
        .iter()
        .filter(|k| !pairs.iter().any(|p| p == *k))
        .collect();
    assert!(
        gone.is_empty(),
        "no longer a file beside a folder: take them off KNOWN: {gone:?}"
    );
}

/// `krate/part/...` of `file`, found below `dir` (`krate/part`).
fn shown(krate: &str, dir: &Path, part: &str, file: &Path) -> String {
    let rel = file.strip_prefix(dir).unwrap().display();
    format!("{krate}/{part}/{rel}")
}
