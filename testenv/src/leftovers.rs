//! Clusters started in temporary directories outlive their test binary on disk: a cluster shared
//! by a test binary is never dropped, and a killed binary drops nothing. Each directory records
//! the process that owns it, and the next start removes the directories of processes that are
//! gone (each holds an etcd data directory of about 125 MB).

use std::path::Path;

/// Where a cluster directory names its owning process.
const OWNER_FILE: &str = "owner.pid";
/// What cluster directories are called under the temporary directory.
pub(crate) const PREFIX: &str = "pseudoflow-testenv-";

/// Marks `dir` as owned by this process.
pub(crate) fn claim(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string())
}

/// Removes the cluster directories under `tmp` whose owner is no longer running; directories
/// without an owner file (made before owners were recorded) go once a day old. Returns how many
/// were removed.
pub(crate) fn sweep(tmp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let dir = entry.path();
        let is_cluster = entry.file_name().to_string_lossy().starts_with(PREFIX);
        if is_cluster && dir.is_dir() && abandoned(&dir) && std::fs::remove_dir_all(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn abandoned(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join(OWNER_FILE)) {
        Ok(pid) => pid.trim().parse::<i32>().is_ok_and(|pid| !running(pid)),
        Err(_) => dir
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 24 * 3600),
    }
}

pub(crate) fn running(pid: i32) -> bool {
    // Signal 0 checks existence; EPERM means it exists but is not ours.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_of_gone_owners_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let mine = tmp.path().join(format!("{PREFIX}mine"));
        let gone = tmp.path().join(format!("{PREFIX}gone"));
        let other = tmp.path().join("someone-else");
        for d in [&mine, &gone, &other] {
            std::fs::create_dir(d).unwrap();
        }
        claim(&mine).unwrap();
        // A pid above the kernel's maximum (4194304) never runs.
        std::fs::write(gone.join(OWNER_FILE), "99999999").unwrap();
        std::fs::write(other.join(OWNER_FILE), "99999999").unwrap();
        assert_eq!(sweep(tmp.path()), 1);
        assert!(mine.exists() && !gone.exists() && other.exists());
    }
}
