//! A new step type touches at most four files of code (issue #45 item 1). A file must change
//! for a new type when it names every [`StepKind`] variant (an exhaustive match with no `_`, as
//! the executor's `work` keeps so that a new type is a compile error until someone decides where
//! it runs, issue #45 item 4). The rest are the type's own files and its line in the registry.
//! So: a leaf type run in a Job touches `crd/src/steps/<type>.rs`, `crd/src/steps/mod.rs`,
//! `runtime-image/src/steps/<type>.rs` and every exhaustive file; a controller-local type its
//! arm in `walk/src/local.rs` instead of an executor module. This test finds the exhaustive
//! files and holds their count, and `docs/architecture.md` ("Adding a step type") to the list.
//!
//! [`StepKind`]: pseudoflow_crd::StepKind

use std::collections::BTreeSet;
use std::path::Path;

use pseudoflow_crd::steps::registry::STEP_TYPES;

mod common;

use common::{collect_rs, crate_dir, CRATES};

/// The files that name every step type, with why each must: one per side that decides.
const EXHAUSTIVE: &[(&str, &str)] = &[(
    "runtime-image/src/steps/mod.rs",
    "the executor's `work`: each type's work, or an arm saying the executor does not run it",
)];

/// The most files of code a new step type may touch (issue #45 item 1).
const MOST: usize = 4;

/// The `StepKind` variant of `type:` name `tag` (`setLabel` is `SetLabel`), as the registry
/// list in `crd/src/steps/mod.rs` spells it.
fn variant(tag: &str) -> String {
    let mut chars = tag.chars();
    let first = chars.next().unwrap().to_ascii_uppercase();
    std::iter::once(first).chain(chars).collect()
}

/// The `StepKind` variants `text` names as `StepKind::Variant`.
fn named(text: &str) -> BTreeSet<&str> {
    text.split("StepKind::")
        .skip(1)
        .map(|rest| {
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// Every file of the workspace's crates (`src/`, `tests/`, `benches/`) that names every
/// variant in `variants`, as `krate/part/...`.
fn exhaustive_files(variants: &[String]) -> (Vec<String>, usize) {
    let mut found = Vec::new();
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
                let text = std::fs::read_to_string(&file).unwrap();
                let names = named(&text);
                if variants.iter().all(|v| names.contains(v.as_str())) {
                    let rel = file.strip_prefix(&dir).unwrap().display();
                    found.push(format!("{krate}/{part}/{rel}"));
                }
            }
        }
    }
    found.sort();
    (found, scanned)
}

/// The files of code a new type touches: its own, its registry line, and every exhaustive file.
fn touched(own: &[&str], exhaustive: &[String]) -> BTreeSet<String> {
    own.iter()
        .map(|f| f.to_string())
        .chain(["crd/src/steps/mod.rs".to_string()])
        .chain(exhaustive.iter().cloned())
        .collect()
}

#[test]
fn a_new_step_type_touches_at_most_four_files() {
    let variants: Vec<String> = STEP_TYPES.iter().map(|t| variant(t)).collect();
    let registry = std::fs::read_to_string(crate_dir("crd").join("src/steps/mod.rs")).unwrap();
    for v in &variants {
        assert!(
            registry.contains(&format!("    {v} => ")),
            "{v}: not how the registry list in crd/src/steps/mod.rs spells the variant"
        );
    }
    let (exhaustive, scanned) = exhaustive_files(&variants);
    assert!(scanned > 200, "the scan found only {scanned} files");
    let expected: Vec<&str> = EXHAUSTIVE.iter().map(|(f, _)| *f).collect();
    assert_eq!(
        exhaustive, expected,
        "the files that name every step type (each is one more file a new type touches; \
         decide from `StepParams` hooks or `placement` instead, or list it in EXHAUSTIVE if it \
         must)"
    );

    let job_leaf = touched(
        &[
            "crd/src/steps/<type>.rs",
            "runtime-image/src/steps/<type>.rs",
        ],
        &exhaustive,
    );
    let controller_local = touched(
        &["crd/src/steps/<type>.rs", "walk/src/local.rs"],
        &exhaustive,
    );
    for (what, files) in [
        ("a leaf type run in a Job", &job_leaf),
        ("a controller-local type", &controller_local),
    ] {
        assert!(
            files.len() <= MOST,
            "{what} touches {} files: {files:?}",
            files.len()
        );
    }

    // The docs list exactly these files, and say how many.
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let doc = std::fs::read_to_string(doc).unwrap();
    let section = doc
        .split("### Adding a step type")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/architecture.md has the section \"Adding a step type\"");
    let list = section
        .split("\n\n")
        .find(|p| p.trim_start().starts_with("1. "))
        .expect("the section lists the files");
    assert!(
        section.contains(&format!("touches **{}** files", words(job_leaf.len()))),
        "the section does not say a Job leaf type touches {} files",
        job_leaf.len()
    );
    for file in &job_leaf {
        assert!(
            list.contains(&format!("`{file}`")),
            "the section's list does not name `{file}`:\n{list}"
        );
    }
    for file in controller_local.difference(&job_leaf) {
        assert!(
            section.contains(&format!("`{file}")),
            "the section does not name `{file}` for a controller-local type"
        );
    }
}

/// `n` as the docs write it.
fn words(n: usize) -> &'static str {
    ["zero", "one", "two", "three", "four", "five", "six"][n]
}

#[test]
fn the_scan_sees_a_listing_of_every_variant_and_nothing_less() {
    let variants = ["Log".to_string(), "SetLabel".to_string()];
    let both = "match k { StepKind::Log(_) => 1, StepKind::SetLabel(s) => 2 }";
    let one = "match k { StepKind::Log(_) => 1, StepKind::SetLabelled(_) | _ => 2 }";
    assert!(variants.iter().all(|v| named(both).contains(v.as_str())));
    assert!(!variants.iter().all(|v| named(one).contains(v.as_str())));
    assert_eq!(variant("includeFlow"), "IncludeFlow");
    assert_eq!(variant("loop"), "Loop");
}
