//! What commands a pod's image gives it. testenv runs containers as host processes, so without
//! care every pod would find every host tool on its PATH, and a flow that works here could fail
//! on a real cluster (the runtime image once lacked the kubectl the seed's `exec` runs). So each
//! image declares its commands, and a pod's PATH holds a directory of links to exactly those
//! (plus the image's own scripts, and the node's recording shims) — nothing else from the host.
//!
//! The runtime image's commands come from `runtime-image/tools.txt`, the list its Dockerfile
//! installs from; kubectl is linked to the one `testenv/build-k8s.sh` built, the same version
//! and build as the image's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// `runtime-image/tools.txt`: what the runtime image provides, and where each command comes from.
pub const RUNTIME_TOOLS: &str = include_str!("../../../runtime-image/tools.txt");

/// The commands of `testenv/shell` (`crate::SHELL_IMAGE`), a stand-in for a busybox-like image:
/// a shell and the usual file and text tools.
pub const SHELL_COMMANDS: &[&str] = &[
    "sh", "cat", "cp", "cut", "date", "echo", "env", "false", "grep", "head", "id", "ln", "ls",
    "mkdir", "mv", "printf", "pwd", "rm", "sed", "sleep", "sort", "tail", "tee", "test", "touch",
    "tr", "true", "uname", "wc",
];

/// One line of a tool list: where the commands come from, and the commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSource {
    /// A Debian package, or `<name>@build-k8s` for a binary testenv/build-k8s.sh builds.
    pub source: String,
    /// The commands it provides.
    pub commands: Vec<String>,
}

impl ToolSource {
    /// Whether the commands are built by testenv/build-k8s.sh rather than installed by apt.
    pub fn built(&self) -> bool {
        self.source.ends_with("@build-k8s")
    }
}

/// Parses a tool list (`<source>: <commands>` lines; `#` comments).
pub fn parse(text: &str) -> Result<Vec<ToolSource>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let Some((source, commands)) = line.split_once(':') else {
            bail!("tool list line {}: expected `<source>: <commands>`", i + 1);
        };
        out.push(ToolSource {
            source: source.trim().to_string(),
            commands: commands.split_whitespace().map(str::to_string).collect(),
        });
    }
    Ok(out)
}

/// Every command of the runtime image.
pub fn runtime_commands() -> Vec<String> {
    parse(RUNTIME_TOOLS)
        .expect("runtime-image/tools.txt parses")
        .into_iter()
        .flat_map(|s| s.commands)
        .collect()
}

/// Where the host has `command`: the Kubernetes build for kubectl (the supported version),
/// else the first of the standard directories. Also what testenv's own plumbing (`unshare`)
/// runs, since a pod's PATH no longer finds the host's tools.
pub fn host_binary(command: &str) -> Result<PathBuf> {
    if command == "kubectl" {
        return crate::binaries::binary("kubectl");
    }
    for dir in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        let p = Path::new(dir).join(command);
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!("the host has no {command:?}, which an image here declares")
}

/// Makes `dir` hold a link to the host's binary for each of `commands` (idempotent: pods of an
/// image starting at once may race to make it).
pub fn materialize(dir: &Path, commands: &[String]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut want: BTreeMap<&str, PathBuf> = BTreeMap::new();
    for c in commands {
        want.insert(c, host_binary(c)?);
    }
    for (c, target) in want {
        let link = dir.join(c);
        if link.symlink_metadata().is_ok() {
            continue;
        }
        match std::os::unix::fs::symlink(&target, &link) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("linking {}", link.display())),
        }
    }
    Ok(())
}

/// A directory name for an image reference.
pub fn dir_name(image: &str) -> String {
    image
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    #[test]
    fn the_runtime_image_list_the_dockerfile_and_testenv_agree() {
        let list = parse(RUNTIME_TOOLS).unwrap();
        let dockerfile = std::fs::read_to_string(repo().join("runtime-image/Dockerfile")).unwrap();
        // The Dockerfile installs its packages from the list itself...
        assert!(
            dockerfile.contains("COPY runtime-image/tools.txt /tmp/tools.txt"),
            "the Dockerfile must install from runtime-image/tools.txt"
        );
        assert!(
            dockerfile.contains("apt-get install -y --no-install-recommends $(sed -n 's/^\\([a-z0-9.+-]*\\):.*/\\1/p' /tmp/tools.txt)"),
            "the Dockerfile's apt-get must take the list's packages"
        );
        // ... which that sed expression reads as exactly the list's package lines ...
        let packages: Vec<&str> = list
            .iter()
            .filter(|s| !s.built())
            .map(|s| s.source.as_str())
            .collect();
        for p in &packages {
            assert!(
                p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".+-".contains(c)),
                "{p:?} is not a Debian package name the Dockerfile's sed picks up"
            );
        }
        assert!(packages.contains(&"bash") && packages.contains(&"util-linux"));
        // ... and copies in every built command, from the build-k8s.sh stage.
        for s in list.iter().filter(|s| s.built()) {
            for c in &s.commands {
                assert!(
                    dockerfile
                        .contains(&format!("COPY --from=kubectl /out/{c} /usr/local/bin/{c}")),
                    "the Dockerfile must copy the built {c}"
                );
            }
        }
        assert!(dockerfile.contains("build-k8s.sh --kubectl-only /out"));
        // testenv gives the runtime image's pods exactly the list's commands.
        let commands = runtime_commands();
        for c in ["sh", "bash", "nsenter", "kubectl", "cat", "date", "true"] {
            assert!(
                commands.iter().any(|x| x == c),
                "{c} missing from {commands:?}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        materialize(dir.path(), &commands).unwrap();
        let mut linked: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        linked.sort();
        let mut want = commands.clone();
        want.sort();
        assert_eq!(linked, want);
        assert_eq!(
            std::fs::read_link(dir.path().join("kubectl")).unwrap(),
            crate::binaries::binary("kubectl").unwrap(),
            "kubectl is the built one, the image's version"
        );
    }

    #[test]
    fn lists_parse_with_comments_and_empty_sources() {
        let l = parse("# c\na: x y # z\nb:\nk@build-k8s: k\n").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].commands, ["x", "y"]);
        assert!(l[1].commands.is_empty());
        assert!(l[2].built() && !l[0].built());
        assert!(parse("no colon").is_err());
    }
}
