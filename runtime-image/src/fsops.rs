//! Node file primitives: paths under the host root, modes and owners (names resolved in the
//! node's own `/etc/passwd` and `/etc/group`), and writes that are atomic (temp file in the same
//! directory, fsync, rename) and skipped when nothing would change.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::error::StepError;

/// Default mode of files the executor creates.
pub const DEFAULT_MODE: u32 = 0o644;

/// Numeric owner of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Maps an absolute node path to the same path under `root`; refuses relative paths and `..`.
pub fn host_path(root: &Path, path: &str) -> Result<PathBuf, StepError> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(StepError::failed(format!(
            "{path:?} is not an absolute path"
        )));
    }
    let mut out = root.to_path_buf();
    for c in p.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir => {}
            _ => return Err(StepError::failed(format!("{path:?} must not contain '..'"))),
        }
    }
    if out == root {
        return Err(StepError::failed("path must name a file, not /"));
    }
    Ok(out)
}

/// Parses an octal mode (`"0644"`, `"644"`, `"0o640"`); `None` gives the default.
pub fn parse_mode(mode: Option<&str>) -> Result<u32, StepError> {
    let Some(m) = mode else {
        return Ok(DEFAULT_MODE);
    };
    let digits = m.trim().trim_start_matches("0o");
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|v| *v <= 0o7777 && !digits.is_empty())
        .ok_or_else(|| StepError::failed(format!("{m:?} is not an octal mode like \"0644\"")))
}

/// Resolves `user[:group]` (names or numbers; default `root:root`) against the node's
/// `<root>/etc/passwd` and `<root>/etc/group`. A user alone means its primary group.
pub fn resolve_owner(root: &Path, owner: Option<&str>) -> Result<Owner, StepError> {
    let owner = owner.unwrap_or("root:root");
    let (user, group) = match owner.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (owner, None),
    };
    let passwd = fs::read_to_string(root.join("etc/passwd")).unwrap_or_default();
    let (uid, primary) = match user.parse::<u32>() {
        Ok(n) => (n, Some(n)),
        Err(_) => match lookup(&passwd, user) {
            Some(fields) => (
                num(fields.first()),
                fields.get(1).and_then(|g| g.parse().ok()),
            ),
            None if user == "root" => (0, Some(0)),
            None => {
                return Err(StepError::failed(format!(
                    "unknown user {user:?} on the node"
                )))
            }
        },
    };
    let gid = match group {
        None => primary.unwrap_or(uid),
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                let groups = fs::read_to_string(root.join("etc/group")).unwrap_or_default();
                match lookup(&groups, g) {
                    Some(fields) => num(fields.first()),
                    None if g == "root" => 0,
                    None => {
                        return Err(StepError::failed(format!(
                            "unknown group {g:?} on the node"
                        )))
                    }
                }
            }
        },
    };
    Ok(Owner { uid, gid })
}

/// The fields after `name:x:` of the line for `name` in a passwd/group file.
fn lookup<'a>(file: &'a str, name: &str) -> Option<Vec<&'a str>> {
    file.lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&name) && f.len() >= 3)
        .map(|f| f[2..].to_vec())
}

fn num(s: Option<&&str>) -> u32 {
    s.and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// What a file on disk is now, when it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// Its bytes.
    pub content: Vec<u8>,
    /// Permission bits (`0o7777` mask).
    pub mode: u32,
    /// Its owner.
    pub owner: Owner,
}

/// Reads a regular file; Ok(None) when it does not exist.
pub fn read_current(path: &Path) -> Result<Option<Current>, StepError> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("stat", path, e)),
    };
    if !meta.is_file() {
        return Err(StepError::failed(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let content = fs::read(path).map_err(|e| io_err("read", path, e))?;
    Ok(Some(Current {
        content,
        mode: meta.permissions().mode() & 0o7777,
        owner: Owner {
            uid: meta.uid(),
            gid: meta.gid(),
        },
    }))
}

/// Makes `path` hold exactly `content` with `mode` and `owner`. Returns false without touching
/// the file (its mtime stays) when all three already match; fixes only mode/owner in place
/// when the content matches; otherwise replaces the file atomically.
pub fn ensure_file(
    path: &Path,
    content: &[u8],
    mode: u32,
    owner: Owner,
) -> Result<bool, StepError> {
    match read_current(path)? {
        Some(cur) if cur.content == content => {
            if cur.mode == mode && cur.owner == owner {
                return Ok(false);
            }
            if cur.owner != owner {
                chown(path, owner)?;
            }
            fs::set_permissions(path, fs::Permissions::from_mode(mode))
                .map_err(|e| io_err("chmod", path, e))?;
            Ok(true)
        }
        _ => {
            write_atomic(path, content, mode, owner)?;
            Ok(true)
        }
    }
}

/// Writes `content` to a temp file beside `path`, sets mode and owner, fsyncs, renames it over
/// `path` and fsyncs the directory; the temp file is removed on any error.
pub fn write_atomic(path: &Path, content: &[u8], mode: u32, owner: Owner) -> Result<(), StepError> {
    let dir = path
        .parent()
        .ok_or_else(|| StepError::failed(format!("{} has no directory", path.display())))?;
    fs::create_dir_all(dir).map_err(|e| io_err("create directory", dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.pseudoflow-tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io_err("create", &tmp, e))?;
        f.write_all(content).map_err(|e| io_err("write", &tmp, e))?;
        let meta = f.metadata().map_err(|e| io_err("stat", &tmp, e))?;
        if meta.uid() != owner.uid || meta.gid() != owner.gid {
            chown(&tmp, owner)?;
        }
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| io_err("chmod", &tmp, e))?;
        f.sync_all().map_err(|e| io_err("fsync", &tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| io_err("rename", path, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Removes a file; false when it was already gone.
pub fn remove_file(path: &Path) -> Result<bool, StepError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_err("stat", path, e)),
        Ok(m) if m.is_dir() => {
            return Err(StepError::failed(format!(
                "{} is a directory",
                path.display()
            )))
        }
        Ok(_) => {}
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err("remove", path, e)),
    }
}

fn chown(path: &Path, owner: Owner) -> Result<(), StepError> {
    std::os::unix::fs::chown(path, Some(owner.uid), Some(owner.gid))
        .map_err(|e| io_err("chown", path, e))
}

/// The executor's own uid/gid: what a file it creates is owned by.
pub fn current_owner() -> Owner {
    // SAFETY: geteuid/getegid cannot fail and touch no memory.
    unsafe {
        Owner {
            uid: libc::geteuid(),
            gid: libc::getegid(),
        }
    }
}

/// A file-system failure naming the operation and the path.
pub fn io_err(op: &str, path: &Path, e: std::io::Error) -> StepError {
    StepError::failed(format!("{op} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn me() -> Owner {
        current_owner()
    }

    #[test]
    fn host_paths_stay_under_the_root() {
        let root = Path::new("/host");
        assert_eq!(
            host_path(root, "/etc/x.conf").unwrap(),
            Path::new("/host/etc/x.conf")
        );
        assert!(host_path(root, "etc/x").is_err());
        assert!(host_path(root, "/etc/../x").is_err());
        assert!(host_path(root, "/").is_err());
    }

    #[test]
    fn modes_and_owners_parse() {
        assert_eq!(parse_mode(None).unwrap(), 0o644);
        assert_eq!(parse_mode(Some("0600")).unwrap(), 0o600);
        assert_eq!(parse_mode(Some("755")).unwrap(), 0o755);
        assert!(parse_mode(Some("0999")).is_err());
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(resolve_owner(root, None).unwrap(), Owner { uid: 0, gid: 0 });
        assert_eq!(
            resolve_owner(root, Some("10:20")).unwrap(),
            Owner { uid: 10, gid: 20 }
        );
        assert!(resolve_owner(root, Some("coredns:coredns")).is_err());
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(
            root.join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\ncoredns:x:101:102::/:/bin/false\n",
        )
        .unwrap();
        fs::write(root.join("etc/group"), "root:x:0:\ndns:x:300:\n").unwrap();
        assert_eq!(
            resolve_owner(root, Some("coredns")).unwrap(),
            Owner { uid: 101, gid: 102 }
        );
        assert_eq!(
            resolve_owner(root, Some("coredns:dns")).unwrap(),
            Owner { uid: 101, gid: 300 }
        );
    }

    #[test]
    fn unchanged_files_are_not_rewritten_and_keep_their_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("etc/app.conf");
        assert!(ensure_file(&f, b"a=1\n", 0o640, me()).unwrap());
        assert_eq!(
            fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
            0o640
        );
        let old = SystemTime::now() - Duration::from_secs(3600);
        fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert!(!ensure_file(&f, b"a=1\n", 0o640, me()).unwrap());
        assert_eq!(fs::metadata(&f).unwrap().modified().unwrap(), old);
        assert!(
            ensure_file(&f, b"a=1\n", 0o600, me()).unwrap(),
            "mode change is a change"
        );
        assert!(ensure_file(&f, b"a=2\n", 0o600, me()).unwrap());
        assert_eq!(fs::read(&f).unwrap(), b"a=2\n");
    }

    #[test]
    fn atomic_writes_leave_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        write_atomic(&f, b"1", 0o644, me()).unwrap();
        write_atomic(&f, b"2", 0o644, me()).unwrap();
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x")]);
        // A failing write (the target is a directory) cleans up its temp file too.
        fs::create_dir(dir.path().join("d")).unwrap();
        assert!(write_atomic(&dir.path().join("d"), b"3", 0o644, me()).is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn removing_a_missing_file_is_not_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        assert!(!remove_file(&f).unwrap());
        fs::write(&f, "1").unwrap();
        assert!(remove_file(&f).unwrap());
        assert!(!f.exists());
    }
}
