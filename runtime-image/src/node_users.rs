//! File owners named the way the node names them: `user[:group]` looked up in the node's own
//! `/etc/passwd` and `/etc/group` (read inside the host root, following the node's symlinks),
//! never the executor image's.

use crate::error::StepError;
use crate::fsops::{read_current, Owner};
use crate::hostroot::HostRoot;

/// Resolves `user[:group]` (names or numbers; default `root:root`) against the node's
/// `/etc/passwd` and `/etc/group`. A user alone means its primary group.
pub fn resolve_owner(root: &HostRoot, owner: Option<&str>) -> Result<Owner, StepError> {
    let owner = owner.unwrap_or("root:root");
    let (user, group) = match owner.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (owner, None),
    };
    let (uid, primary) = match user.parse::<u32>() {
        Ok(n) => (n, Some(n)),
        Err(_) => match lookup(&node_text(root, "/etc/passwd")?, user) {
            Some(fields) => (
                num(fields.first()),
                fields.get(1).and_then(|g| g.parse().ok()),
            ),
            None if user == "root" => (0, Some(0)),
            None => {
                return Err(StepError::failed(format!(
                    "unknown user {user:?} on the node"
                )))
            }
        },
    };
    let gid = match group {
        None => primary.unwrap_or(uid),
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => match lookup(&node_text(root, "/etc/group")?, g) {
                Some(fields) => num(fields.first()),
                None if g == "root" => 0,
                None => {
                    return Err(StepError::failed(format!(
                        "unknown group {g:?} on the node"
                    )))
                }
            },
        },
    };
    Ok(Owner { uid, gid })
}

/// A node text file's content; empty when it does not exist.
fn node_text(root: &HostRoot, path: &str) -> Result<String, StepError> {
    let content = match root.lookup(path, true)? {
        Some(f) => read_current(&f)?.map(|c| c.content).unwrap_or_default(),
        None => Vec::new(),
    };
    Ok(String::from_utf8_lossy(&content).into_owned())
}

/// The fields after `name:x:` of the line for `name` in a passwd/group file.
fn lookup<'a>(file: &'a str, name: &str) -> Option<Vec<&'a str>> {
    file.lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&name) && f.len() >= 3)
        .map(|f| f[2..].to_vec())
}

fn num(s: Option<&&str>) -> u32 {
    s.and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The executor's own uid/gid: what a file it creates is owned by.
pub fn current_owner() -> Owner {
    // SAFETY: geteuid/getegid cannot fail and touch no memory.
    unsafe {
        Owner {
            uid: libc::geteuid(),
            gid: libc::getegid(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn owners_resolve_in_the_nodes_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::open(dir.path()).unwrap();
        assert_eq!(
            resolve_owner(&root, None).unwrap(),
            Owner { uid: 0, gid: 0 }
        );
        assert_eq!(
            resolve_owner(&root, Some("10:20")).unwrap(),
            Owner { uid: 10, gid: 20 }
        );
        assert!(resolve_owner(&root, Some("coredns:coredns")).is_err());
        fs::create_dir_all(dir.path().join("etc")).unwrap();
        fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\ncoredns:x:101:102::/:/bin/false\n",
        )
        .unwrap();
        fs::write(dir.path().join("etc/group"), "root:x:0:\ndns:x:300:\n").unwrap();
        assert_eq!(
            resolve_owner(&root, Some("coredns")).unwrap(),
            Owner { uid: 101, gid: 102 }
        );
        assert_eq!(
            resolve_owner(&root, Some("coredns:dns")).unwrap(),
            Owner { uid: 101, gid: 300 }
        );
    }
}
