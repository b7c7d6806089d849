//! Child processes that never outlive the test: each runs in its own process group (so the whole
//! tree can be killed) and gets SIGKILL if the thread that started it dies. A [`Proc`] remembers
//! how it was started, so it can be killed and started again the same way (a crash and a
//! restart, for the chaos tests).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::process::{Child, Command};

/// A started process; killed (with its group) on drop.
pub struct Proc {
    /// A name for logs and errors.
    pub name: String,
    child: Child,
    how: How,
}

/// How a process was started: what [`Proc::respawn`] starts again.
#[derive(Clone)]
struct How {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
}

impl How {
    fn spawn(&self) -> Result<Child> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        own_group_and_die_with_parent(&mut cmd);
        cmd.spawn()
            .with_context(|| format!("starting {}", self.program.display()))
    }
}

impl Proc {
    /// Starts `program args` with output appended to `log`.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> Result<Proc> {
        Self::spawn_with_env(name, program, args, &[], log)
    }

    /// Starts `program args` with `env` added to this process's environment and output
    /// appended to `log`. The process dies with the thread that started it (see the module
    /// doc): start it from a thread that lives as long as it should.
    pub fn spawn_with_env(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> Result<Proc> {
        let how = How {
            program: program.to_path_buf(),
            args: args.to_vec(),
            env: env.to_vec(),
            log: log.to_path_buf(),
        };
        let child = how.spawn()?;
        Ok(Proc {
            name: name.into(),
            child,
            how,
        })
    }

    /// SIGKILLs the process group (a crash: no cleanup, no graceful shutdown) and waits until
    /// the process is gone.
    pub async fn kill(&mut self) -> Result<()> {
        if let Some(pid) = self.child.id() {
            kill_group(pid);
        }
        self.child.wait().await?;
        Ok(())
    }

    /// Sends SIGTERM (a graceful stop) and waits up to `grace` for the process to exit; then
    /// SIGKILLs it. Returns whether it exited on its own.
    pub async fn terminate(&mut self, grace: Duration) -> Result<bool> {
        if let Some(pid) = self.child.id() {
            // SAFETY: plain syscall.
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
            return Ok(true);
        }
        self.kill().await?;
        Ok(false)
    }

    /// Starts the process again as it was first started (same program, arguments, environment
    /// and log), killing the current one first if it still runs.
    pub async fn respawn(&mut self) -> Result<()> {
        self.kill().await?;
        self.child = self.how.spawn()?;
        Ok(())
    }

    /// The exit status, once the process has exited.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Process id (also the process group id).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Where its output goes.
    pub fn log(&self) -> &Path {
        &self.how.log
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
