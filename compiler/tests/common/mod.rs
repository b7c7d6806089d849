//! Shared helpers for the compiler's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pseudoflow_compiler::lower::FlowRef;
use pseudoflow_compiler::source::{load, FlowDocument};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every YAML file directly in `dir` (relative to the repo) but CRDs (`*-crd.yaml`), sorted.
pub fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        // The CRD of a kind that a bound flow serves sits beside it; it is not a flow.
        .filter(|p| !p.to_string_lossy().ends_with("-crd.yaml"))
        .collect();
    files.sort();
    files
}

/// The example flows: the seed's scenarios and one per step type.
pub fn examples() -> Vec<PathBuf> {
    let mut all = yaml_files("examples");
    all.extend(yaml_files("examples/steps"));
    all
}

/// The one flow in a file.
pub fn load_one(path: &Path) -> FlowDocument {
    let text = std::fs::read_to_string(path).unwrap();
    load(&text).unwrap().remove(0)
}

/// A stable snapshot name for a file: `steps-apply` for `examples/steps/apply.yaml`.
pub fn snapshot_name(path: &Path) -> String {
    let rel = path.strip_prefix(repo()).unwrap().with_extension("");
    let parts: Vec<String> = rel
        .iter()
        .skip(1)
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    parts.join("-")
}

/// The flow identity used for lowering in tests (fixed uid so output is stable).
pub fn flow_ref(doc: &FlowDocument, sa: Option<&str>) -> FlowRef {
    FlowRef {
        name: doc.name.clone(),
        namespace: doc.namespace.clone().unwrap_or_else(|| "default".into()),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        service_account: sa.unwrap_or("default").to_string(),
    }
}
