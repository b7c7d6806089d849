//! `patchFile`: a regex replace in a node file. No match and no `createIfMissing` is a success
//! with `changed: false`; `createIfMissing` appends `replace` as a line. Before the first change
//! of a run the previous content is kept as `<path>.pseudoflow.bak` (the run id is recorded in
//! `<path>.pseudoflow.bak.run`, so a retry in the same run keeps the original backup). A
//! symlinked file is patched through the link (resolved inside the host root), and its backup
//! sits beside the file the link leads to.
//!
//! The file is bytes, not text: the pattern is matched against the bytes (Unicode mode, as the
//! flow's validation checks it), and every byte outside a match is written back exactly, so a
//! Latin-1 comment or a binary blob elsewhere in the file survives. Invalid UTF-8 never matches
//! anything: `.`, classes and literals match only whole valid UTF-8 characters, so an invalid
//! byte ends a `.*` and is never part of a match or of what `$1` copies. The replacement is the
//! step's UTF-8 text, with `$n` groups copied from the matched bytes.

use pseudoflow_crd::protocol::StepResult;
use pseudoflow_crd::steps::patch_file::PatchFileStep;
use regex::bytes::Regex;
use std::path::Path;

use crate::error::StepError;
use crate::fsops::{read_current, write_atomic, Owner, DEFAULT_MODE};
use crate::hostroot::{check_node_path, HostFsError, HostRoot, NodeFile};
use crate::node_users::{current_owner, resolve_owner};

/// Suffix of the backup file.
pub const BACKUP_SUFFIX: &str = ".pseudoflow.bak";
/// Suffix of the file recording which run wrote the backup.
pub const BACKUP_RUN_SUFFIX: &str = ".pseudoflow.bak.run";

/// The patched bytes, or None when nothing would change.
pub fn patched(
    old: Option<&[u8]>,
    re: &Regex,
    replace: &str,
    create_if_missing: bool,
) -> Option<Vec<u8>> {
    let text = old.unwrap_or(b"");
    let new = if re.is_match(text) {
        re.replace_all(text, replace.as_bytes()).into_owned()
    } else if create_if_missing {
        let mut new = text.to_vec();
        if !(text.is_empty() || text.ends_with(b"\n")) {
            new.push(b'\n');
        }
        new.extend_from_slice(replace.as_bytes());
        new.push(b'\n');
        new
    } else {
        return None;
    };
    (old != Some(new.as_slice())).then_some(new)
}

/// Runs `patchFile` under `root` for run `run_id`.
pub fn run(root: &Path, step: &PatchFileStep, run_id: &str) -> Result<StepResult, StepError> {
    check_node_path(&step.path)?;
    let re = Regex::new(&step.pattern)
        .map_err(|e| StepError::failed(format!("pattern {:?}: {e}", step.pattern)))?;
    let root = HostRoot::open(root)?;
    let found = root.lookup(&step.path, true)?;
    let cur = match &found {
        Some(f) => read_current(f)?,
        None => None,
    };
    let old = cur.as_ref().map(|c| c.content.as_slice());
    let Some(new) = patched(old, &re, &step.replace, step.create_if_missing) else {
        let why = if cur.is_none() {
            "does not exist"
        } else {
            "needs no change"
        };
        return Ok(StepResult::succeeded(false, format!("{} {why}", step.path)));
    };
    let file = match found {
        Some(f) => f,
        None => root.create_path(&step.path)?,
    };
    let (mode, owner) = match &cur {
        Some(c) => (c.mode, c.owner),
        None => (DEFAULT_MODE, resolve_owner(&root, Some("root"))?),
    };
    if let Some(c) = &cur {
        backup_once(&file, &c.content, mode, owner, run_id)?;
    }
    write_atomic(&file, &new, mode, owner)?;
    Ok(StepResult::succeeded(
        true,
        format!("patched {}", step.path),
    ))
}

/// Keeps `content` as the backup unless this run already wrote one. Both files are replaced
/// atomically like the file itself, so a link planted at either name is replaced, not followed.
fn backup_once(
    file: &NodeFile,
    content: &[u8],
    mode: u32,
    owner: Owner,
    run_id: &str,
) -> Result<(), StepError> {
    let sibling = |suffix| {
        file.sibling(suffix)
            .map_err(|e| HostFsError::io("open directory of", file.path(), e))
    };
    let marker = sibling(BACKUP_RUN_SUFFIX)?;
    let recorded = match read_current(&marker) {
        Ok(Some(c)) => String::from_utf8_lossy(&c.content).into_owned(),
        // Missing, or not a plain file (a planted link): no backup of this run yet.
        Ok(None) | Err(_) => String::new(),
    };
    if recorded.trim() == run_id {
        return Ok(());
    }
    write_atomic(&sibling(BACKUP_SUFFIX)?, content, mode, owner)?;
    write_atomic(&marker, run_id.as_bytes(), 0o600, current_owner())
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
        let o = crate::node_users::current_owner();
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(
            root.join("etc/passwd"),
            format!("root:x:{}:{}::/:/bin/sh\n", o.uid, o.gid),
        )
        .unwrap();
    }

    fn p(old: Option<&[u8]>, re: &Regex, replace: &str, create: bool) -> Option<Vec<u8>> {
        patched(old, re, replace, create)
    }

    #[test]
    fn pure_patching() {
        let re = Regex::new(r"(?m)^port=\d+$").unwrap();
        assert_eq!(
            p(Some(b"port=1\n"), &re, "port=2", false).as_deref(),
            Some(&b"port=2\n"[..])
        );
        assert_eq!(p(Some(b"port=2\n"), &re, "port=2", false), None);
        assert_eq!(p(Some(b"x=1"), &re, "port=2", false), None);
        assert_eq!(
            p(Some(b"x=1"), &re, "port=2", true).as_deref(),
            Some(&b"x=1\nport=2\n"[..])
        );
        assert_eq!(
            p(None, &re, "port=2", true).as_deref(),
            Some(&b"port=2\n"[..])
        );
        let groups = Regex::new(r"v(\d)").unwrap();
        assert_eq!(
            p(Some(b"v1 v2"), &groups, "w$1", false).as_deref(),
            Some(&b"w1 w2"[..])
        );
    }

    #[test]
    fn invalid_utf8_is_never_matched_and_always_kept() {
        // `.` stops at the invalid byte: only the valid prefix of the line is replaced.
        let re = Regex::new(r"(?m)^# .*").unwrap();
        assert_eq!(
            p(Some(b"# caf\xe9 au lait\nx=1\n"), &re, "# coffee", false).as_deref(),
            Some(&b"# coffee\xe9 au lait\nx=1\n"[..])
        );
        // No pattern can reach into the invalid byte, so `$1` copies only valid text.
        let re = Regex::new(r"caf(.)").unwrap();
        assert_eq!(p(Some(b"caf\xe9"), &re, "tea$1", false), None);
        // A valid multi-byte character is one `.`.
        assert_eq!(
            p(Some("café".as_bytes()), &re, "tea$1", false).as_deref(),
            Some("teaé".as_bytes())
        );
        // createIfMissing appends after invalid bytes without touching them.
        let re = Regex::new("^dns=").unwrap();
        assert_eq!(
            p(Some(b"\xff\xfe"), &re, "dns=1", true).as_deref(),
            Some(&b"\xff\xfe\ndns=1\n"[..])
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
