//! Node file steps against a temp dir acting as the host root (`/host`): symlinks on the host
//! are followed as the host would follow them and never out of the root, temp files cannot be
//! redirected by a pre-planted symlink, and patchFile keeps bytes outside its matches exactly.
//!
//! "Outside" is a second temp dir standing for the executor's own filesystem: links on the
//! host name it by its absolute path, and the root holds a copy of that path, so a write that
//! resolves in the executor's filesystem instead of the host's shows up as the outside file
//! changing and the host's copy not.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use pseudoflow_crd::steps::patch_file::PatchFileStep;
use pseudoflow_runtime::node_users::current_owner;
use pseudoflow_runtime::steps::{node_file, patch_file};

struct Host {
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl Host {
    fn new() -> Self {
        let h = Host {
            root: tempfile::tempdir().unwrap(),
            outside: tempfile::tempdir().unwrap(),
        };
        let o = current_owner();
        h.put(
            "/etc/passwd",
            format!("root:x:{}:{}::/:/bin/sh\n", o.uid, o.gid).as_bytes(),
        );
        h
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    /// The outside path (in the executor's filesystem) of `name`.
    fn outside(&self, name: &str) -> PathBuf {
        self.outside.path().join(name)
    }

    /// The host's copy of an outside path: the same absolute path, under the root.
    fn mirrored(&self, name: &str) -> PathBuf {
        let abs = self.outside(name);
        self.root().join(abs.strip_prefix("/").unwrap())
    }

    /// `root` + node path.
    fn at(&self, node_path: &str) -> PathBuf {
        self.root().join(node_path.trim_start_matches('/'))
    }

    fn put(&self, node_path: &str, content: &[u8]) {
        let p = self.at(node_path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    fn link(&self, node_path: &str, target: impl AsRef<Path>) {
        let p = self.at(node_path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, p).unwrap();
    }
}

fn owner() -> String {
    let o = current_owner();
    format!("{}:{}", o.uid, o.gid)
}

fn patch(path: &str, pattern: &str, replace: &str) -> PatchFileStep {
    PatchFileStep {
        path: path.into(),
        pattern: pattern.into(),
        replace: replace.into(),
        create_if_missing: false,
        node_selector: None,
    }
}

#[test]
fn an_absolute_symlink_is_resolved_inside_the_host_root() {
    let h = Host::new();
    fs::write(h.outside("victim.conf"), "executor\n").unwrap();
    fs::create_dir_all(h.mirrored("")).unwrap();
    fs::write(h.mirrored("victim.conf"), "host\n").unwrap();
    h.link("/etc/app.conf", h.outside("victim.conf"));

    let o = owner();
    let r = node_file::write(h.root(), "/etc/app.conf", "new\n", None, Some(&o)).unwrap();
    assert!(r.ok && r.changed, "{r:?}");
    assert_eq!(
        fs::read_to_string(h.mirrored("victim.conf")).unwrap(),
        "new\n"
    );
    assert_eq!(
        fs::read_to_string(h.outside("victim.conf")).unwrap(),
        "executor\n"
    );
    assert!(
        fs::symlink_metadata(h.at("/etc/app.conf"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the host's link stays a link, as `echo new > /etc/app.conf` would leave it"
    );
}

#[test]
fn patch_file_reads_and_writes_the_host_file_behind_an_absolute_symlink() {
    let h = Host::new();
    fs::write(h.outside("kubelet.env"), "port=9\n").unwrap();
    fs::create_dir_all(h.mirrored("")).unwrap();
    fs::write(h.mirrored("kubelet.env"), "port=1\n").unwrap();
    h.link("/etc/kubelet.env", h.outside("kubelet.env"));

    let r = patch_file::run(
        h.root(),
        &patch("/etc/kubelet.env", r"port=\d", "port=2"),
        "r1",
    )
    .unwrap();
    assert!(r.ok && r.changed, "{r:?}");
    assert_eq!(
        fs::read_to_string(h.mirrored("kubelet.env")).unwrap(),
        "port=2\n"
    );
    assert_eq!(
        fs::read_to_string(h.outside("kubelet.env")).unwrap(),
        "port=9\n"
    );
    // The backup is the host file's previous content, beside the host file.
    let bak = h.mirrored("kubelet.env.pseudoflow.bak");
    assert_eq!(fs::read_to_string(bak).unwrap(), "port=1\n");
}

#[test]
fn dot_dot_links_cannot_leave_the_root() {
    let h = Host::new();
    fs::create_dir_all(h.mirrored("")).unwrap();
    // A relative link with more `..` than the root is deep, to a directory outside.
    let ups = "../".repeat(h.root().components().count() + 2);
    let rel = format!("{ups}{}", h.outside.path().display());
    h.link("/etc/conf.d", &rel);

    let o = owner();
    let r = node_file::write(h.root(), "/etc/conf.d/x.conf", "x\n", None, Some(&o)).unwrap();
    assert!(r.ok && r.changed, "{r:?}");
    assert!(
        !h.outside("x.conf").exists(),
        "the write escaped the root through a `..` link"
    );
    // `..` at the root stays at the root, as on the host: the link names the mirrored dir.
    assert_eq!(fs::read_to_string(h.mirrored("x.conf")).unwrap(), "x\n");

    // deleteFile through the same link removes the host's file, not the outside one.
    fs::write(h.outside("x.conf"), "keep").unwrap();
    let r = node_file::delete(h.root(), "/etc/conf.d/x.conf").unwrap();
    assert!(r.changed, "{r:?}");
    assert!(!h.mirrored("x.conf").exists());
    assert_eq!(fs::read_to_string(h.outside("x.conf")).unwrap(), "keep");
}

#[test]
fn delete_file_removes_a_link_not_its_target() {
    let h = Host::new();
    h.put("/etc/real.conf", b"1");
    h.link("/etc/alias.conf", "/etc/real.conf");
    assert!(
        node_file::delete(h.root(), "/etc/alias.conf")
            .unwrap()
            .changed
    );
    assert!(fs::symlink_metadata(h.at("/etc/alias.conf")).is_err());
    assert_eq!(fs::read(h.at("/etc/real.conf")).unwrap(), b"1");
}

#[test]
fn owners_are_looked_up_in_the_hosts_passwd_behind_a_symlink() {
    let h = Host::new();
    fs::remove_file(h.at("/etc/passwd")).unwrap();
    h.put(
        "/usr/lib/passwd",
        b"root:x:0:0::/:/bin/sh\npfsvc:x:4242:4343::/:/bin/false\n",
    );
    h.link("/etc/passwd", "/usr/lib/passwd");
    let r = node_file::write(h.root(), "/etc/svc.conf", "x\n", None, Some("pfsvc"));
    let r = r.unwrap();
    assert!(r.changed, "{r:?}");
    let meta = fs::metadata(h.at("/etc/svc.conf")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.gid()), (4242, 4343));
}

#[test]
fn a_symlink_planted_at_the_temp_name_does_not_redirect_the_write() {
    let h = Host::new();
    h.put("/etc/app.conf", b"port=1\n");
    fs::write(h.outside("victim"), "untouched\n").unwrap();
    // The names a writer could predict: pid-based, as the executor used to use.
    let pid = std::process::id();
    for name in ["app.conf", "app.conf.pseudoflow.bak"] {
        h.link(
            &format!("/etc/.{name}.pseudoflow-tmp-{pid}"),
            h.outside("victim"),
        );
    }
    // And the backup's run marker, which used to be written in place.
    h.link("/etc/app.conf.pseudoflow.bak.run", h.outside("victim"));

    let o = owner();
    let r = node_file::write(h.root(), "/etc/app.conf", "port=2\n", None, Some(&o)).unwrap();
    assert!(r.changed, "{r:?}");
    let r = patch_file::run(
        h.root(),
        &patch("/etc/app.conf", r"port=\d", "port=3"),
        "r1",
    )
    .unwrap();
    assert!(r.changed, "{r:?}");

    assert_eq!(
        fs::read_to_string(h.outside("victim")).unwrap(),
        "untouched\n"
    );
    let meta = fs::symlink_metadata(h.at("/etc/app.conf")).unwrap();
    assert!(meta.is_file(), "the target became {:?}", meta.file_type());
    assert_eq!(fs::read(h.at("/etc/app.conf")).unwrap(), b"port=3\n");
    assert_eq!(
        fs::read(h.at("/etc/app.conf.pseudoflow.bak")).unwrap(),
        b"port=2\n"
    );
}

#[test]
fn patch_file_is_byte_exact_outside_its_matches() {
    let h = Host::new();
    let before: &[u8] = b"port=1\n# caf\xe9 latin-1\n\xff\xfe\x00bin\n";
    h.put("/etc/app.conf", before);
    let r = patch_file::run(
        h.root(),
        &patch("/etc/app.conf", r"port=\d", "port=2"),
        "r1",
    )
    .unwrap();
    assert!(r.changed, "{r:?}");
    assert_eq!(
        fs::read(h.at("/etc/app.conf")).unwrap(),
        b"port=2\n# caf\xe9 latin-1\n\xff\xfe\x00bin\n"
    );
    assert_eq!(
        fs::read(h.at("/etc/app.conf.pseudoflow.bak")).unwrap(),
        before
    );
    // Invalid bytes are never part of a match: `.*` stops at them and they stay.
    let r = patch_file::run(
        h.root(),
        &patch("/etc/app.conf", r"(?m)^# .*", "# coffee"),
        "r1",
    )
    .unwrap();
    assert!(r.changed, "{r:?}");
    assert_eq!(
        fs::read(h.at("/etc/app.conf")).unwrap(),
        b"port=2\n# coffee\xe9 latin-1\n\xff\xfe\x00bin\n"
    );
    // Nothing to match: the file is left alone (not rewritten with replacement characters).
    let r = patch_file::run(h.root(), &patch("/etc/app.conf", "nomatch", "x"), "r1").unwrap();
    assert!(!r.changed, "{r:?}");
}
