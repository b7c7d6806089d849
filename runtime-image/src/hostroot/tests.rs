//! Every case runs with both resolvers: `openat2` (the kernel's RESOLVE_IN_ROOT) and the walk
//! a kernel without it gets. "Outside" is a second temp dir standing for the executor's own
//! filesystem; the root holds a copy of its absolute path, so a link that is resolved in the
//! wrong filesystem shows up as the outside copy being found.

use super::*;
use std::fs;
use std::os::unix::fs::symlink;

const BOTH: [Resolver; 2] = [Resolver::Openat2, Resolver::Walk];

struct Case {
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl Case {
    fn new() -> Self {
        Case {
            root: tempfile::tempdir().unwrap(),
            outside: tempfile::tempdir().unwrap(),
        }
    }

    fn host(&self, resolver: Resolver) -> HostRoot {
        HostRoot::open(self.root.path())
            .unwrap()
            .with_resolver(resolver)
    }

    fn at(&self, node_path: &str) -> PathBuf {
        self.root.path().join(node_path.trim_start_matches('/'))
    }

    /// The root's copy of the outside dir (same absolute path, under the root).
    fn mirrored(&self) -> PathBuf {
        self.root
            .path()
            .join(self.outside.path().strip_prefix("/").unwrap())
    }

    fn link(&self, node_path: &str, target: impl AsRef<Path>) {
        let p = self.at(node_path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, p).unwrap();
    }
}

/// Which real directory a NodeFile's dir fd is, by its inode.
fn same_dir(f: &NodeFile, dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let st = rustix::fs::fstat(f.dir()).unwrap();
    let m = fs::metadata(dir).unwrap();
    (st.st_dev, st.st_ino) == (m.dev(), m.ino())
}

fn check_openat2_was_used(h: &HostRoot, resolver: Resolver) {
    if resolver == Resolver::Openat2 && h.resolver() != Resolver::Openat2 {
        eprintln!("openat2 is refused here: this run tested the walk twice");
    }
}

#[test]
fn absolute_links_restart_at_the_root() {
    for r in BOTH {
        let c = Case::new();
        fs::create_dir_all(c.mirrored()).unwrap();
        c.link("/etc/app.conf", c.outside.path().join("app.conf"));
        let h = c.host(r);
        let f = h.lookup("/etc/app.conf", true).unwrap().unwrap();
        assert!(same_dir(&f, &c.mirrored()), "{r:?}");
        assert_eq!(f.name(), "app.conf");
        assert_eq!(f.path(), c.outside.path().join("app.conf"), "{r:?}");
        // Not following the final link names the link itself.
        let f = h.lookup("/etc/app.conf", false).unwrap().unwrap();
        assert!(same_dir(&f, &c.at("/etc")), "{r:?}");
        check_openat2_was_used(&h, r);
    }
}

#[test]
fn dot_dot_stops_at_the_root() {
    for r in BOTH {
        let c = Case::new();
        fs::create_dir_all(c.mirrored()).unwrap();
        fs::create_dir_all(c.at("/etc")).unwrap();
        let ups = "../".repeat(c.root.path().components().count() + 3);
        // A directory link and a file link, both with more `..` than the root is deep.
        c.link("/etc/d", format!("{ups}{}", c.outside.path().display()));
        c.link("/etc/f", format!("{ups}{}/f", c.outside.path().display()));
        let h = c.host(r);
        let f = h.lookup("/etc/d/x", true).unwrap().unwrap();
        assert!(same_dir(&f, &c.mirrored()), "{r:?}");
        let f = h.lookup("/etc/f", true).unwrap().unwrap();
        assert!(same_dir(&f, &c.mirrored()), "{r:?}");
        // Creating directories through such a link creates them inside the root.
        let f = h.create_path("/etc/d/new/sub/x").unwrap();
        assert!(same_dir(&f, &c.mirrored().join("new/sub")), "{r:?}");
        assert!(!c.outside.path().join("new").exists(), "{r:?}");
        check_openat2_was_used(&h, r);
    }
}

#[test]
fn relative_links_resolve_from_the_links_directory() {
    for r in BOTH {
        let c = Case::new();
        fs::create_dir_all(c.at("/usr/lib/sysctl.d")).unwrap();
        fs::create_dir_all(c.at("/etc")).unwrap();
        c.link("/etc/sysctl.d", "../usr/lib/sysctl.d");
        c.link("/etc/lib", "/usr/lib");
        // `..` after a symlinked directory is the parent of its target, as in the kernel.
        c.link("/etc/via", "lib/../lib/sysctl.d/k.conf");
        let h = c.host(r);
        let f = h.lookup("/etc/sysctl.d/k.conf", true).unwrap().unwrap();
        assert!(same_dir(&f, &c.at("/usr/lib/sysctl.d")), "{r:?}");
        let f = h.lookup("/etc/via", true).unwrap().unwrap();
        assert!(same_dir(&f, &c.at("/usr/lib/sysctl.d")), "{r:?}");
        assert_eq!(f.name(), "k.conf");
    }
}

#[test]
fn missing_directories_are_none_unless_created() {
    for r in BOTH {
        let c = Case::new();
        let h = c.host(r);
        assert!(h.lookup("/etc/none/x", true).unwrap().is_none(), "{r:?}");
        assert!(!c.at("/etc").exists());
        let f = h.create_path("/etc/none/x").unwrap();
        assert!(same_dir(&f, &c.at("/etc/none")), "{r:?}");
        // A dangling final link names the file to create, inside the root.
        c.link("/etc/dangling", "/var/lib/app/x.conf");
        let f = h.create_path("/etc/dangling").unwrap();
        assert!(same_dir(&f, &c.at("/var/lib/app")), "{r:?}");
        assert_eq!(f.name(), "x.conf");
    }
}

#[test]
fn loops_and_links_to_non_files_are_errors() {
    for r in BOTH {
        let c = Case::new();
        c.link("/etc/a", "/etc/b");
        c.link("/etc/b", "/etc/a");
        c.link("/etc/up", "..");
        c.link("/etc/dirloop", "/etc/dirloop/x");
        fs::write(c.at("/etc/file"), "").unwrap();
        let h = c.host(r);
        let e = h.lookup("/etc/a", true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/a: too many levels of symbolic links",
            "{r:?}"
        );
        let e = h.lookup("/etc/up", true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/up resolves to \"/etc/..\", which is not a file"
        );
        let e = h.lookup("/etc/dirloop/x/y", true).unwrap_err();
        assert!(
            e.to_string().starts_with("open directory /etc/dirloop/x: "),
            "{e}"
        );
        let e = h.create_path("/etc/file/x").unwrap_err();
        assert!(e.to_string().contains("Not a directory"), "{r:?} {e}");
    }
}

#[test]
fn written_paths_are_checked() {
    let c = Case::new();
    let h = c.host(Resolver::Openat2);
    let msg = |p: &str| h.lookup(p, true).unwrap_err().to_string();
    assert_eq!(msg("etc/x"), "\"etc/x\" is not an absolute path");
    assert_eq!(msg("/etc/../x"), "\"/etc/../x\" must not contain '..'");
    assert_eq!(msg("/"), "path must name a file, not /");
    assert_eq!(msg("/./"), "path must name a file, not /");
}

#[test]
fn a_missing_root_is_an_error_naming_it() {
    let e = HostRoot::open(Path::new("/nonexistent-pseudoflow-root")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("open the host root /nonexistent-pseudoflow-root: "),
        "{e}"
    );
}
