//! `openat2(2)` with `RESOLVE_IN_ROOT`: the kernel resolves the path as if the root fd were `/`
//! (absolute symlinks restart there, `..` stops there) and refuses magic links (`/proc/*/fd`).

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// `EAGAIN` means a concurrent rename raced the lookup; retried this often before giving up.
const RETRIES: usize = 8;

/// Opens the directory `dir` names inside `root`, readable (for fsync).
pub fn open_dir(root: BorrowedFd<'_>, dir: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let resolve = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
    let mut last = Errno::AGAIN;
    for _ in 0..RETRIES {
        match rustix::fs::openat2(root, dir, flags, Mode::empty(), resolve) {
            Err(Errno::AGAIN) => last = Errno::AGAIN,
            r => return r.map_err(Into::into),
        }
    }
    Err(last.into())
}

/// True when the error says `openat2` itself cannot be used here (missing syscall, seccomp
/// denial, unknown flags, or endless races), not that the path is bad.
pub fn unsupported(e: &io::Error) -> bool {
    let code = e.raw_os_error();
    [
        Errno::NOSYS,
        Errno::PERM,
        Errno::INVAL,
        Errno::TOOBIG,
        Errno::AGAIN,
    ]
    .iter()
    .any(|c| Some(c.raw_os_error()) == code)
}
