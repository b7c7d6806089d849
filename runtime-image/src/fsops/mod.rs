//! Node file primitives on a [`NodeFile`] (a name in a directory resolved inside the host root,
//! see [`crate::hostroot`]): reads that never follow a link out of that directory, writes that
//! are atomic (an exclusively created temp file in the same directory, fsync, rename, fsync of
//! the directory) and skipped when nothing would change, and modes.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;

use rustix::fs::{
    fchmod, fchown, fstat, openat, renameat, statat, unlinkat, AtFlags, FileType, Gid, Mode,
    OFlags, Stat, Uid,
};
use rustix::io::Errno;

use crate::error::StepError;
use crate::hostroot::{temp, HostFsError, NodeFile};

/// Numeric owner of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Default mode of files the executor creates.
pub const DEFAULT_MODE: u32 = 0o644;

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
pub fn read_current(f: &NodeFile) -> Result<Option<Current>, StepError> {
    Ok(open_existing(f)?.map(|(_, cur)| cur))
}

/// Opens and reads the file without following a final symlink (the resolver already followed
/// the node's links; one appearing since is refused) and without blocking on a FIFO.
fn open_existing(f: &NodeFile) -> Result<Option<(File, Current)>, StepError> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match openat(f.dir(), f.name(), flags | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(StepError::failed(format!(
                "{} is a symbolic link",
                f.path().display()
            )))
        }
        Err(e) => return Err(fail("open", f, e)),
    };
    let st = fstat(&fd).map_err(|e| fail("stat", f, e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(StepError::failed(format!(
            "{} is not a regular file",
            f.path().display()
        )));
    }
    let mut file = File::from(fd);
    let mut content = Vec::new();
    file.read_to_end(&mut content)
        .map_err(|e| HostFsError::io("read", f.path(), e))?;
    let cur = Current {
        content,
        mode: mode_of(&st),
        owner: Owner {
            uid: st.st_uid,
            gid: st.st_gid,
        },
    };
    Ok(Some((file, cur)))
}

/// Makes the file hold exactly `content` with `mode` and `owner`. Returns false without
/// touching it (its mtime stays) when all three already match; fixes only mode/owner in place
/// (on the fd it read) when the content matches; otherwise replaces the file atomically.
pub fn ensure_file(
    f: &NodeFile,
    content: &[u8],
    mode: u32,
    owner: Owner,
) -> Result<bool, StepError> {
    match open_existing(f)? {
        Some((file, cur)) if cur.content == content => {
            if cur.mode == mode && cur.owner == owner {
                return Ok(false);
            }
            set_owner_and_mode(f, &file, cur.owner, owner, mode)?;
            Ok(true)
        }
        _ => {
            write_atomic(f, content, mode, owner)?;
            Ok(true)
        }
    }
}

/// Writes `content` to a new temp file beside the file, sets mode and owner, fsyncs, renames
/// it over the file and fsyncs the directory; the temp file is removed on any error.
pub fn write_atomic(
    f: &NodeFile,
    content: &[u8],
    mode: u32,
    owner: Owner,
) -> Result<(), StepError> {
    let (fd, tmp) = temp::create(f.dir(), f.name())
        .map_err(|e| HostFsError::io("create a temp file for", f.path(), e))?;
    let result = (|| {
        let mut file = File::from(fd);
        file.write_all(content)
            .map_err(|e| HostFsError::io("write", f.path(), e))?;
        let st = fstat(&file).map_err(|e| fail("stat", f, e))?;
        let created = Owner {
            uid: st.st_uid,
            gid: st.st_gid,
        };
        set_owner_and_mode(f, &file, created, owner, mode)?;
        file.sync_all()
            .map_err(|e| HostFsError::io("fsync", f.path(), e))?;
        renameat(f.dir(), &tmp, f.dir(), f.name()).map_err(|e| fail("rename", f, e))
    })();
    if result.is_err() {
        let _ = unlinkat(f.dir(), &tmp, AtFlags::empty());
    }
    result?;
    let _ = rustix::fs::fsync(f.dir());
    Ok(())
}

/// Removes the file (a symlink itself, not its target); false when it was already gone.
pub fn remove_file(f: &NodeFile) -> Result<bool, StepError> {
    match statat(f.dir(), f.name(), AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => return Ok(false),
        Err(e) => return Err(fail("stat", f, e)),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            return Err(StepError::failed(format!(
                "{} is a directory",
                f.path().display()
            )))
        }
        Ok(_) => {}
    }
    match unlinkat(f.dir(), f.name(), AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(fail("remove", f, e)),
    }
}

/// chown (when it differs; it clears set-id bits, so first) then chmod, on the open file.
fn set_owner_and_mode(
    f: &NodeFile,
    file: &File,
    now: Owner,
    owner: Owner,
    mode: u32,
) -> Result<(), StepError> {
    if now != owner {
        let (uid, gid) = (Uid::from_raw(owner.uid), Gid::from_raw(owner.gid));
        fchown(file.as_fd(), Some(uid), Some(gid)).map_err(|e| fail("chown", f, e))?;
    }
    fchmod(file.as_fd(), Mode::from_raw_mode(mode)).map_err(|e| fail("chmod", f, e))
}

fn mode_of(st: &Stat) -> u32 {
    st.st_mode & 0o7777
}

fn fail(op: &'static str, f: &NodeFile, e: Errno) -> StepError {
    HostFsError::io(op, f.path(), e.into()).into()
}

#[cfg(test)]
mod tests;
