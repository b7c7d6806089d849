//! Why a node file could not be found or used, in node paths (never the `/host` mount point,
//! which the flow's author did not write).

use std::io;
use std::path::{Path, PathBuf};

use crate::error::StepError;

/// A node path that is invalid, cannot be resolved inside the root, or an I/O failure on it.
#[derive(Debug, thiserror::Error)]
pub enum HostFsError {
    /// Node steps name files by absolute path.
    #[error("{path:?} is not an absolute path")]
    Relative {
        /// The path as written.
        path: String,
    },
    /// `..` in a written path is refused (symlinks on the node may still use it).
    #[error("{path:?} must not contain '..'")]
    DotDot {
        /// The path as written.
        path: String,
    },
    /// `/` is not a file.
    #[error("path must name a file, not /")]
    Root,
    /// Following the node's symlinks led to a directory entry that cannot be a file (`..`).
    #[error("{path} resolves to {resolved:?}, which is not a file")]
    NotAFile {
        /// The path as written.
        path: String,
        /// Where its symlinks led.
        resolved: PathBuf,
    },
    /// A symlink loop, or a chain longer than the kernel would follow.
    #[error("{path}: too many levels of symbolic links")]
    TooManyLinks {
        /// The path as written.
        path: String,
    },
    /// A system call failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The node path (as resolved) it was done to.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl HostFsError {
    /// An I/O failure of `op` on the node path `path`.
    pub fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        HostFsError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<HostFsError> for StepError {
    fn from(e: HostFsError) -> Self {
        StepError::failed(e.to_string())
    }
}
