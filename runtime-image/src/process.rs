//! Child processes (`exec`, `script`, node commands): stdout captured (bounded) for variables,
//! stderr kept for the failure message, and the whole process group killed if the step times
//! out — a timed-out `sh -c` must not leave its children running.

use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use crate::error::StepError;

/// Largest stdout kept for a variable; results go through a ConfigMap (1 MiB) at most.
pub const MAX_STDOUT: usize = 768 * 1024;
/// How much of stderr a failure message repeats.
const STDERR_TAIL: usize = 1000;

/// What a finished command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit code; None when killed by a signal.
    pub code: Option<i32>,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
}

/// Lines of each stream a step with `logOutput` writes to its log, at most.
const MAX_LOGGED_LINES: usize = 1000;

impl Output {
    /// The same output, first written to the log line by line when `log` is true (a step's
    /// `logOutput`), so `kubectl pf logs` shows what the command printed.
    pub fn logged(self, log: bool) -> Self {
        if log {
            log_lines("stdout", &self.stdout);
            log_lines("stderr", &self.stderr);
        }
        self
    }

    /// Stdout with one trailing newline trimmed: the value a `var` gets.
    pub fn value(&self) -> String {
        trim_newline(&self.stdout).to_string()
    }

    /// Ok when the command exited 0, else a failure naming the exit code and stderr's tail.
    pub fn check(self, what: &str) -> Result<Output, StepError> {
        if self.code == Some(0) {
            return Ok(self);
        }
        let status = match self.code {
            Some(c) => format!("exit code {c}"),
            None => "killed by a signal".to_string(),
        };
        let tail = tail(&self.stderr, STDERR_TAIL);
        let msg = if tail.is_empty() {
            format!("{what} failed with {status}")
        } else {
            format!("{what} failed with {status}: {tail}")
        };
        Err(StepError::Failed(msg))
    }
}

/// Writes `text` to the log, one record per line (the line is the record's message), at most
/// [`MAX_LOGGED_LINES`] of them.
pub fn log_lines(stream: &str, text: &str) {
    let mut lines = text.lines();
    for line in lines.by_ref().take(MAX_LOGGED_LINES) {
        tracing::info!(stream, "{line}");
    }
    let rest = lines.count();
    if rest > 0 {
        tracing::info!(stream, "({rest} more lines not logged)");
    }
}

/// Removes one trailing `\n` (and a `\r` before it).
pub fn trim_newline(s: &str) -> &str {
    let s = s.strip_suffix('\n').unwrap_or(s);
    s.strip_suffix('\r').unwrap_or(s)
}

/// The last `max` bytes of `s` (on a char boundary), trimmed.
pub fn tail(s: &str, max: usize) -> &str {
    let s = s.trim();
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Kills the child's process group when dropped before the child was reaped (a timeout).
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            // SAFETY: kill(2) with a negative pid signals a process group we created; no memory
            // is touched.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// Runs `program args...` with no stdin, capturing output; its own process group.
pub async fn run(program: &str, args: &[String]) -> Result<Output, StepError> {
    run_with_env(program, args, &[]).await
}

/// [`run`] with `env` added to (or replacing in) the executor's environment.
pub async fn run_with_env(
    program: &str,
    args: &[String],
    env: &[(String, String)],
) -> Result<Output, StepError> {
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| StepError::failed(format!("cannot start {program}: {e}")))?;
    let mut guard = GroupGuard(child.id().map(|p| p as i32));
    let out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    let (stdout, stderr, status) = tokio::join!(
        read_bounded(out, MAX_STDOUT),
        read_bounded(err, MAX_STDOUT),
        child.wait()
    );
    guard.0 = None;
    let status = status.map_err(|e| StepError::failed(format!("waiting for {program}: {e}")))?;
    let (stdout, overflow) = stdout;
    if overflow {
        return Err(StepError::failed(format!(
            "{program} wrote more than {MAX_STDOUT} bytes to stdout"
        )));
    }
    Ok(Output {
        code: status.code(),
        stdout,
        stderr: stderr.0,
    })
}

/// Reads a stream to its end, keeping at most `max` bytes; true when more was written.
pub async fn read_bounded<R: AsyncRead + Unpin>(mut r: R, max: usize) -> (String, bool) {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut overflow = false;
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                overflow |= n > room;
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(cmd: &str) -> Vec<String> {
        vec!["-c".into(), cmd.into()]
    }

    #[tokio::test]
    async fn captures_stdout_and_trims_one_newline() {
        let out = run("sh", &sh("printf 'a\\n\\n'")).await.unwrap();
        assert_eq!(out.value(), "a\n");
        assert_eq!(out.check("x").unwrap().code, Some(0));
    }

    #[tokio::test]
    async fn failures_report_code_and_stderr_tail() {
        let out = run("sh", &sh("echo boom >&2; exit 3")).await.unwrap();
        let e = out.check("exec").unwrap_err().to_string();
        assert_eq!(e, "exec failed with exit code 3: boom");
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("late");
        let cmd = format!("(sleep 1; touch {}) & sleep 5", marker.display());
        let r =
            tokio::time::timeout(std::time::Duration::from_millis(200), run("sh", &sh(&cmd))).await;
        assert!(r.is_err());
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        assert!(!marker.exists(), "background child survived the timeout");
    }

    #[test]
    fn tails_respect_char_boundaries() {
        assert_eq!(tail("ééé", 3), "é");
        assert_eq!(trim_newline("x\r\n"), "x");
    }
}
