//! The controller's two reconcilers stay apart (docs/architecture.md, "The controller"): the
//! plain-flow reconciler (`controller/src/reconcile/`) names nothing of the bound-flow one
//! (`controller/src/bind/`) and the other way round; what both use (`controller/src/flow/`, and
//! the run driver `controller/src/drive/`) names neither, nor the dispatch above them (`controller/src/serve/`). An import loop between
//! them is where a change to one reconciler quietly changes the other; this test names each
//! offending line. Comments are skipped (a doc link may point anywhere).

use std::path::PathBuf;

mod common;

use common::{collect_rs, crate_dir};

/// The most lines `controller/src/reconcile/mod.rs` may have (issue #35).
const RECONCILE_MOD_LIMIT: usize = 250;

/// Each module of the controller and the modules it must not name.
const FORBIDDEN: [(&str, &[&str]); 4] = [
    ("reconcile", &["crate::bind", "crate::serve"]),
    ("bind", &["crate::reconcile", "crate::serve"]),
    ("flow", &["crate::reconcile", "crate::bind", "crate::serve"]),
    // The run driver both reconcilers' runs go through (docs/architecture.md, "One run driver").
    (
        "drive",
        &["crate::reconcile", "crate::bind", "crate::serve"],
    ),
];

#[test]
fn neither_reconciler_names_the_other_and_the_shared_module_names_neither() {
    let src = controller_src();
    let mut offending = Vec::new();
    let mut scanned = 0;
    for (module, forbidden) in FORBIDDEN {
        let mut files = Vec::new();
        collect_rs(&src.join(module), &mut files);
        assert!(!files.is_empty(), "no files under controller/src/{module}");
        for file in files {
            scanned += 1;
            let text = std::fs::read_to_string(&file).unwrap();
            for (line, name) in names_in_code(&text, forbidden) {
                let shown = file.strip_prefix(&src).unwrap_or(&file).display();
                offending.push(format!("controller/src/{shown}:{line} names {name}"));
            }
        }
    }
    assert!(scanned > 40, "the scan found only {scanned} files");
    assert!(
        offending.is_empty(),
        "a reconciler names the other, or the shared module names one of them:\n{}",
        offending.join("\n")
    );
}

#[test]
fn the_plain_flow_reconcilers_entry_module_stays_short() {
    let text = std::fs::read_to_string(controller_src().join("reconcile/mod.rs")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= RECONCILE_MOD_LIMIT,
        "controller/src/reconcile/mod.rs is {lines} lines (at most {RECONCILE_MOD_LIMIT})"
    );
}

#[test]
fn names_in_comments_do_not_count() {
    let text = "//! see [`crate::bind`]\nuse crate::flow::Error;\n    /// [`crate::bind::x`]\nlet c = crate::bind::released(f);\n";
    assert_eq!(
        names_in_code(text, &["crate::bind"]),
        vec![(4, "crate::bind")]
    );
}

fn controller_src() -> PathBuf {
    crate_dir("controller").join("src")
}

/// Each (line number, name) of `forbidden` named outside a `//` comment in `text`.
fn names_in_code<'f>(text: &str, forbidden: &[&'f str]) -> Vec<(usize, &'f str)> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for name in forbidden {
            if code.contains(name) {
                found.push((i + 1, *name));
            }
        }
    }
    found
}
