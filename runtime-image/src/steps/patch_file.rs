//! `patchFile`: a regex replace in a node file. No match and no `createIfMissing` is a success
//! with `changed: false`; `createIfMissing` appends `replace` as a line. Before the first change
//! of a run the previous content is kept as `<path>.pseudoflow.bak` (the run id is recorded in
//! `<path>.pseudoflow.bak.run`, so a retry in the same run keeps the original backup).

use std::path::{Path, PathBuf};

use pseudoflow_compiler::result::StepResult;
use pseudoflow_crd::steps::patch_file::PatchFileStep;
use regex::Regex;

use crate::error::StepError;
use crate::fsops::{host_path, io_err, read_current, resolve_owner, write_atomic, DEFAULT_MODE};

/// Suffix of the backup file.
pub const BACKUP_SUFFIX: &str = ".pseudoflow.bak";
/// Suffix of the file recording which run wrote the backup.
pub const BACKUP_RUN_SUFFIX: &str = ".pseudoflow.bak.run";

/// The patched text, or None when nothing would change.
pub fn patched(
    old: Option<&str>,
    re: &Regex,
    replace: &str,
    create_if_missing: bool,
) -> Option<String> {
    let text = old.unwrap_or("");
    let new = if re.is_match(text) {
        re.replace_all(text, replace).into_owned()
    } else if create_if_missing {
        let sep = if text.is_empty() || text.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        format!("{text}{sep}{replace}\n")
    } else {
        return None;
    };
    (old != Some(new.as_str())).then_some(new)
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Runs `patchFile` under `root` for run `run_id`.
pub fn run(root: &Path, step: &PatchFileStep, run_id: &str) -> Result<StepResult, StepError> {
    let file = host_path(root, &step.path)?;
    let re = Regex::new(&step.pattern)
        .map_err(|e| StepError::failed(format!("pattern {:?}: {e}", step.pattern)))?;
    let cur = read_current(&file)?;
    let old = cur
        .as_ref()
        .map(|c| String::from_utf8_lossy(&c.content).into_owned());
    let Some(new) = patched(old.as_deref(), &re, &step.replace, step.create_if_missing) else {
        let why = if cur.is_none() {
            "does not exist"
        } else {
            "needs no change"
        };
        return Ok(StepResult::succeeded(false, format!("{} {why}", step.path)));
    };
    let (mode, owner) = match &cur {
        Some(c) => (c.mode, c.owner),
        None => (DEFAULT_MODE, resolve_owner(root, Some("root"))?),
    };
    if let Some(c) = &cur {
        backup_once(&file, &c.content, mode, owner, run_id)?;
    }
    write_atomic(&file, new.as_bytes(), mode, owner)?;
    Ok(StepResult::succeeded(
        true,
        format!("patched {}", step.path),
    ))
}

fn backup_once(
    file: &Path,
    content: &[u8],
    mode: u32,
    owner: crate::fsops::Owner,
    run_id: &str,
) -> Result<(), StepError> {
    let marker = with_suffix(file, BACKUP_RUN_SUFFIX);
    let recorded = std::fs::read_to_string(&marker).unwrap_or_default();
    if recorded.trim() == run_id {
        return Ok(());
    }
    write_atomic(&with_suffix(file, BACKUP_SUFFIX), content, mode, owner)?;
    std::fs::write(&marker, run_id).map_err(|e| io_err("write", &marker, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn step(pattern: &str, replace: &str, create: bool) -> PatchFileStep {
        PatchFileStep {
            path: "/etc/app.conf".into(),
            pattern: pattern.into(),
            replace: replace.into(),
            create_if_missing: create,
            node_selector: None,
        }
    }

    fn owned_by_me(root: &Path) {
        let o = crate::fsops::current_owner();
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(
            root.join("etc/passwd"),
            format!("root:x:{}:{}::/:/bin/sh\n", o.uid, o.gid),
        )
        .unwrap();
    }

    #[test]
    fn pure_patching() {
        let re = Regex::new(r"(?m)^port=\d+$").unwrap();
        assert_eq!(
            patched(Some("port=1\n"), &re, "port=2", false).as_deref(),
            Some("port=2\n")
        );
        assert_eq!(patched(Some("port=2\n"), &re, "port=2", false), None);
        assert_eq!(patched(Some("x=1"), &re, "port=2", false), None);
        assert_eq!(
            patched(Some("x=1"), &re, "port=2", true).as_deref(),
            Some("x=1\nport=2\n")
        );
        assert_eq!(
            patched(None, &re, "port=2", true).as_deref(),
            Some("port=2\n")
        );
        let groups = Regex::new(r"v(\d)").unwrap();
        assert_eq!(
            patched(Some("v1 v2"), &groups, "w$1", false).as_deref(),
            Some("w1 w2")
        );
    }

    #[test]
    fn backup_is_written_once_per_run() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        owned_by_me(root);
        let f = root.join("etc/app.conf");
        fs::write(&f, "port=1\n").unwrap();
        let bak = root.join("etc/app.conf.pseudoflow.bak");
        assert!(
            run(root, &step(r"port=\d", "port=2", false), "run-a")
                .unwrap()
                .changed
        );
        assert_eq!(fs::read_to_string(&f).unwrap(), "port=2\n");
        assert_eq!(fs::read_to_string(&bak).unwrap(), "port=1\n");
        // A second change in the same run keeps the first backup.
        assert!(
            run(root, &step(r"port=\d", "port=3", false), "run-a")
                .unwrap()
                .changed
        );
        assert_eq!(fs::read_to_string(&bak).unwrap(), "port=1\n");
        // Nothing to change: no backup either.
        assert!(
            !run(root, &step(r"port=\d", "port=3", false), "run-b")
                .unwrap()
                .changed
        );
        assert_eq!(fs::read_to_string(&bak).unwrap(), "port=1\n");
        // A new run that changes the file backs up the content it found.
        assert!(
            run(root, &step(r"port=\d", "port=4", false), "run-b")
                .unwrap()
                .changed
        );
        assert_eq!(fs::read_to_string(&bak).unwrap(), "port=3\n");
    }

    #[test]
    fn no_match_is_ok_unless_create_if_missing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        owned_by_me(root);
        let f = root.join("etc/app.conf");
        let r = run(root, &step("^dns=", "dns=1", false), "r").unwrap();
        assert!(r.ok && !r.changed && !f.exists());
        fs::write(&f, "a=1").unwrap();
        assert!(
            !run(root, &step("^dns=", "dns=1", false), "r")
                .unwrap()
                .changed
        );
        assert!(
            run(root, &step("(?m)^dns=.*$", "dns=1", true), "r")
                .unwrap()
                .changed
        );
        assert_eq!(fs::read_to_string(&f).unwrap(), "a=1\ndns=1\n");
        assert!(
            !run(root, &step("(?m)^dns=.*$", "dns=1", true), "r")
                .unwrap()
                .changed
        );
    }
}
