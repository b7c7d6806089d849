//! A resolved node file: the fd of its directory and its name there. Operations on it are
//! relative to that fd, so they act on the directory that was resolved inside the root even if
//! the path is changed meanwhile.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A file (existing or not) in a directory resolved inside the host root.
#[derive(Debug)]
pub struct NodeFile {
    dir: OwnedFd,
    name: OsString,
    path: PathBuf,
}

impl NodeFile {
    pub(super) fn new(dir: OwnedFd, name: OsString, path: PathBuf) -> Self {
        NodeFile { dir, name, path }
    }

    /// The directory's fd.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The file's name in that directory (one component).
    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// The node path it was reached by, after following symlinks (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file `<name><suffix>` in the same directory (backups beside the file).
    pub fn sibling(&self, suffix: &str) -> io::Result<NodeFile> {
        let mut name = self.name.clone();
        name.push(suffix);
        let mut path = self.path.clone().into_os_string();
        path.push(suffix);
        Ok(NodeFile::new(self.dir.try_clone()?, name, path.into()))
    }
}
