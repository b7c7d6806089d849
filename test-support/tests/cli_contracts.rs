//! The CLI shares its contracts with the controller instead of copying them (issue #45 item 1):
//! every annotation, label or finalizer of ours that `kubectl pf` reads or writes is a constant
//! of `crd` (or of the compiler), imported, so a rename there reaches the CLI at compile time.
//! A string literal naming one of our keys in the CLI's sources is a second truth that drifts.

mod common;

use common::{collect_rs, crate_dir};

/// Our API group: every annotation, label and finalizer of ours starts with it.
const OURS: &str = "\"ops.example.com/";

#[test]
fn the_cli_names_no_annotation_label_or_finalizer_of_its_own() {
    let dir = crate_dir("cli").join("src");
    let mut files = Vec::new();
    collect_rs(&dir, &mut files);
    assert!(
        files.len() > 10,
        "the scan found only {} files",
        files.len()
    );
    let mut copied = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests may spell a key out to check the constant they use.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, line) in code.lines().enumerate() {
            let doc = line.trim_start().starts_with("//");
            if !doc && line.contains(OURS) {
                let shown = file.strip_prefix(&dir).unwrap().display();
                copied.push(format!("cli/src/{shown}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        copied.is_empty(),
        "keys of ours spelled out in the CLI (import crd's constant instead):\n{}",
        copied.join("\n")
    );
}
