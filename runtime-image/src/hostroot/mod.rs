//! The node's filesystem as node steps see it: the host's `/` mounted at the host root (`/host`).
//!
//! Paths are resolved *inside* that root the way the host itself resolves them: an absolute
//! symlink starts again at the root and `..` stops at the root, so no link (planted by a node
//! user or shipped by a distribution, like `/etc/resolv.conf -> /run/...`) can make a step read
//! or write the executor's own filesystem or anything outside the host's. The kernel does it
//! with `openat2(RESOLVE_IN_ROOT)` ([`openat2`]); where that is missing or forbidden (kernels
//! before 5.6, some seccomp profiles) a checked component-by-component walk ([`walk`]) does the
//! same. The result is a [`NodeFile`]: an fd of the resolved directory and a single name in it,
//! so every later operation is relative to that fd and a path swapped meanwhile cannot redirect
//! it.

mod error;
mod node_file;
mod openat2;
pub mod temp;
mod walk;

use std::cell::Cell;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{openat, readlinkat, statat, AtFlags, FileType, Mode, OFlags};

pub use error::HostFsError;
pub use node_file::NodeFile;

/// Symbolic links followed for one path before giving up, as the kernel's own limit (ELOOP).
pub const MAX_LINKS: usize = 40;

/// How paths are resolved inside the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2(RESOLVE_IN_ROOT)`, falling back to [`Resolver::Walk`] for good when the kernel
    /// refuses it.
    Openat2,
    /// The checked walk only (what a kernel without `openat2` gets; tests use it directly).
    Walk,
}

/// An open handle on the host root.
#[derive(Debug)]
pub struct HostRoot {
    fd: OwnedFd,
    resolver: Cell<Resolver>,
}

impl HostRoot {
    /// Opens the host root directory (`PSEUDOFLOW_HOST_ROOT`, `/host` in the pod).
    pub fn open(root: &Path) -> Result<Self, HostFsError> {
        let fd = openat(
            rustix::fs::CWD,
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| HostFsError::io("open the host root", root, e.into()))?;
        Ok(HostRoot {
            fd,
            resolver: Cell::new(Resolver::Openat2),
        })
    }

    /// Resolves with `resolver` from now on.
    pub fn with_resolver(self, resolver: Resolver) -> Self {
        self.resolver.set(resolver);
        self
    }

    /// The resolver in use (it becomes `Walk` after `openat2` was refused).
    pub fn resolver(&self) -> Resolver {
        self.resolver.get()
    }

    /// The file a node path names, following symlinks (a final one too when `follow`, as the
    /// host would when opening it; not for removal, which acts on the link itself). `None`
    /// when a directory on the way does not exist.
    pub fn lookup(&self, path: &str, follow: bool) -> Result<Option<NodeFile>, HostFsError> {
        self.resolve(path, follow, false)
    }

    /// The file a node path names for writing: symlinks are followed (a dangling final link
    /// names the file to create, as `echo > link` on the host) and missing directories created.
    pub fn create_path(&self, path: &str) -> Result<NodeFile, HostFsError> {
        let found = self.resolve(path, true, true)?;
        Ok(found.expect("missing directories are created"))
    }

    fn resolve(
        &self,
        path: &str,
        follow: bool,
        create: bool,
    ) -> Result<Option<NodeFile>, HostFsError> {
        let mut at = check_node_path(path)?;
        for _ in 0..=MAX_LINKS {
            let (parent, name) = split(&at).ok_or_else(|| HostFsError::NotAFile {
                path: path.into(),
                resolved: at.clone(),
            })?;
            let dir = match self.open_dir(parent, create) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
                Err(e) => return Err(HostFsError::io("open directory", parent, e)),
            };
            let link = follow
                && matches!(statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW),
                        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
            if !link {
                return Ok(Some(NodeFile::new(dir, name.to_owned(), at)));
            }
            let target = readlinkat(&dir, name, Vec::new())
                .map_err(|e| HostFsError::io("read link", &at, e.into()))?;
            // Relative to the link's directory as written (the kernel resolves `..` in it);
            // an absolute target starts again at the root.
            at = parent.join(OsStr::from_bytes(target.as_bytes()));
        }
        Err(HostFsError::TooManyLinks { path: path.into() })
    }

    /// An fd (readable, for fsync) of the directory `dir` names inside the root.
    fn open_dir(&self, dir: &Path, create: bool) -> io::Result<OwnedFd> {
        if self.resolver.get() == Resolver::Openat2 {
            match openat2::open_dir(self.fd.as_fd(), dir) {
                Ok(fd) => return Ok(fd),
                Err(e) if openat2::unsupported(&e) => self.resolver.set(Resolver::Walk),
                // The walk creates what is missing, one checked component at a time.
                Err(e) if e.kind() == io::ErrorKind::NotFound && create => {}
                Err(e) => return Err(e),
            }
        }
        walk::open_dir(self.fd.as_fd(), dir, create)
    }
}

/// The node path as given, checked: absolute, no `..`, not `/`.
pub fn check_node_path(path: &str) -> Result<PathBuf, HostFsError> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(HostFsError::Relative { path: path.into() });
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(HostFsError::DotDot { path: path.into() });
    }
    if !p.components().any(|c| matches!(c, Component::Normal(_))) {
        return Err(HostFsError::Root);
    }
    Ok(p.to_path_buf())
}

/// Directory and final name; None when the path ends in `..` or is `/`.
fn split(p: &Path) -> Option<(&Path, &OsStr)> {
    match p.components().next_back()? {
        Component::Normal(name) => Some((p.parent().unwrap_or(Path::new("/")), name)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
