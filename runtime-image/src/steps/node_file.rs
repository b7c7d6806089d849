//! Node file steps that set a whole file or remove it: `configFile`, `template` with a file
//! output (the controller sends the rendered text) and node `deleteFile`. Files are resolved
//! inside the host root as the host resolves them (a symlinked file is written through the
//! link, a removed symlink is removed itself); writes are atomic and skipped when content, mode
//! and owner already match.

use std::path::Path;

use pseudoflow_crd::protocol::StepResult;

use crate::error::StepError;
use crate::fsops::{ensure_file, parse_mode, remove_file};
use crate::hostroot::{check_node_path, HostRoot};
use crate::node_users::resolve_owner;

/// Ensures `path` on the node holds `content` with `mode` (default 0644) and `owner`
/// (default root:root).
pub fn write(
    root: &Path,
    path: &str,
    content: &str,
    mode: Option<&str>,
    owner: Option<&str>,
) -> Result<StepResult, StepError> {
    check_node_path(path)?;
    let mode = parse_mode(mode)?;
    let root = HostRoot::open(root)?;
    let owner = resolve_owner(&root, owner)?;
    let file = root.create_path(path)?;
    let changed = ensure_file(&file, content.as_bytes(), mode, owner)?;
    let msg = if changed {
        format!("wrote {path}")
    } else {
        format!("{path} is up to date")
    };
    Ok(StepResult::succeeded(changed, msg))
}

/// Removes `path` on the node; a missing file is a success with `changed: false`.
pub fn delete(root: &Path, path: &str) -> Result<StepResult, StepError> {
    let removed = match HostRoot::open(root)?.lookup(path, false)? {
        Some(file) => remove_file(&file)?,
        None => false,
    };
    let msg = if removed {
        format!("removed {path}")
    } else {
        format!("{path} was already absent")
    };
    Ok(StepResult::succeeded(removed, msg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_users::current_owner;

    fn owner() -> String {
        let o = current_owner();
        format!("{}:{}", o.uid, o.gid)
    }

    #[test]
    fn config_file_is_idempotent() {
        let root = tempfile::tempdir().unwrap();
        let o = owner();
        let r = write(root.path(), "/etc/dns.conf", "x\n", Some("0600"), Some(&o)).unwrap();
        assert!(r.changed && r.ok);
        let r = write(root.path(), "/etc/dns.conf", "x\n", Some("0600"), Some(&o)).unwrap();
        assert!(!r.changed, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(root.path().join("etc/dns.conf")).unwrap(),
            "x\n"
        );
        assert!(write(root.path(), "/etc/../x", "x", None, Some(&o)).is_err());
    }

    #[test]
    fn node_delete_file_is_idempotent() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("f"), "1").unwrap();
        assert!(delete(root.path(), "/f").unwrap().changed);
        assert!(!delete(root.path(), "/f").unwrap().changed);
    }
}
