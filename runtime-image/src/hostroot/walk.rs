//! The fallback resolver: opens one component at a time with `O_NOFOLLOW`, relative to the fd
//! of the directory before it, and expands symlinks itself: an absolute target restarts at the
//! root, `..` goes back to the previous directory fd on the walk's own stack (never the
//! kernel's `..`, which a directory moved out of the root could escape through) and stops at
//! the root.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use rustix::fs::{fstat, mkdirat, openat, readlinkat, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::MAX_LINKS;

/// Opens the directory `dir` names inside `root`, readable (for fsync); with `create`, missing
/// directories are made (0755), each inside the one resolved before it.
pub fn open_dir(root: BorrowedFd<'_>, dir: &Path, create: bool) -> io::Result<OwnedFd> {
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut todo = parts(dir.as_os_str().as_bytes());
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        if part == ".." {
            stack.pop();
            continue;
        }
        let cur = stack.last().map_or(root, |fd| fd.as_fd());
        let fd = match open_nofollow(cur, &part) {
            Err(Errno::NOENT) if create => {
                match mkdirat(cur, &part, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                // Whatever is there now (a racing symlink included) is checked below.
                open_nofollow(cur, &part)?
            }
            r => r?,
        };
        match FileType::from_raw_mode(fstat(&fd)?.st_mode) {
            FileType::Directory => stack.push(fd),
            FileType::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Errno::LOOP.into());
                }
                // The link the fd holds, not whatever the name points at by now.
                let target = readlinkat(&fd, "", Vec::new())?;
                let target = target.as_bytes();
                if target.starts_with(b"/") {
                    stack.clear();
                }
                for p in parts(target).into_iter().rev() {
                    todo.push_front(p);
                }
            }
            _ => return Err(Errno::NOTDIR.into()),
        }
    }
    let cur = stack.last().map_or(root, |fd| fd.as_fd());
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(openat(cur, ".", flags, Mode::empty())?)
}

/// The entry itself (a symlink stays a symlink), as an `O_PATH` fd.
fn open_nofollow(dir: BorrowedFd<'_>, name: &OsString) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    openat(dir, name.as_os_str(), flags, Mode::empty())
}

/// The non-empty components other than `.`.
fn parts(path: &[u8]) -> VecDeque<OsString> {
    path.split(|b| *b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .map(|p| OsString::from_vec(p.to_vec()))
        .collect()
}
