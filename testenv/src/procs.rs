//! Child processes that never outlive the test: each runs in its own process group (so the whole
//! tree can be killed) and gets SIGKILL if the thread that started it dies.

use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result};
use tokio::process::{Child, Command};

/// A started process; killed (with its group) on drop.
pub struct Proc {
    /// A name for logs and errors.
    pub name: String,
    child: Child,
}

impl Proc {
    /// Starts `program args` with output appended to `log`.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> Result<Proc> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        own_group_and_die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Proc {
            name: name.into(),
            child,
        })
    }

    /// Process id (also the process group id).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// New process group + parent-death signal, for any command the test environment starts.
pub fn own_group_and_die_with_parent(cmd: &mut Command) {
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// Kills a whole process group.
pub fn kill_group(pid: u32) {
    // SAFETY: plain syscall; a negative pid addresses the group.
    unsafe {
        libc::kill(-(pid as i32), libc::SIGKILL);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            kill_group(pid);
        }
    }
}
