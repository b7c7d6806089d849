use super::*;
use crate::hostroot::HostRoot;
use crate::node_users::current_owner;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

fn me() -> Owner {
    current_owner()
}

fn file(root: &Path, path: &str) -> NodeFile {
    HostRoot::open(root).unwrap().create_path(path).unwrap()
}

#[test]
fn modes_parse() {
    assert_eq!(parse_mode(None).unwrap(), 0o644);
    assert_eq!(parse_mode(Some("0600")).unwrap(), 0o600);
    assert_eq!(parse_mode(Some("755")).unwrap(), 0o755);
    assert_eq!(parse_mode(Some("0o640")).unwrap(), 0o640);
    assert!(parse_mode(Some("0999")).is_err());
    assert!(parse_mode(Some("")).is_err());
}

#[test]
fn unchanged_files_are_not_rewritten_and_keep_their_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("etc/app.conf");
    let nf = file(dir.path(), "/etc/app.conf");
    assert!(ensure_file(&nf, b"a=1\n", 0o640, me()).unwrap());
    assert_eq!(
        fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    let old = SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(old)
        .unwrap();
    assert!(!ensure_file(&nf, b"a=1\n", 0o640, me()).unwrap());
    assert_eq!(fs::metadata(&f).unwrap().modified().unwrap(), old);
    assert!(
        ensure_file(&nf, b"a=1\n", 0o600, me()).unwrap(),
        "mode change is a change"
    );
    assert_eq!(
        fs::metadata(&f).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    assert!(ensure_file(&nf, b"a=2\n", 0o600, me()).unwrap());
    assert_eq!(fs::read(&f).unwrap(), b"a=2\n");
}

#[test]
fn atomic_writes_leave_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let nf = file(dir.path(), "/x");
    write_atomic(&nf, b"1", 0o644, me()).unwrap();
    write_atomic(&nf, b"2", 0o644, me()).unwrap();
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("x")]);
    // A failing write (the target is a directory) cleans up its temp file too.
    fs::create_dir(dir.path().join("d")).unwrap();
    let err = write_atomic(&file(dir.path(), "/d"), b"3", 0o644, me()).unwrap_err();
    assert!(err.to_string().starts_with("rename /d: "), "{err}");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn reading_refuses_what_is_not_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("d")).unwrap();
    let err = read_current(&file(dir.path(), "/d")).unwrap_err();
    assert_eq!(err.to_string(), "/d is not a regular file");
    // A FIFO is refused without blocking on it.
    let fifo =
        std::ffi::CString::new(dir.path().join("p").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let err = read_current(&file(dir.path(), "/p")).unwrap_err();
    assert_eq!(err.to_string(), "/p is not a regular file");
}

#[test]
fn removing_a_missing_file_is_not_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x");
    let nf = file(dir.path(), "/x");
    assert!(!remove_file(&nf).unwrap());
    fs::write(&f, "1").unwrap();
    assert!(remove_file(&nf).unwrap());
    assert!(!f.exists());
    fs::create_dir(&f).unwrap();
    assert_eq!(
        remove_file(&nf).unwrap_err().to_string(),
        "/x is a directory"
    );
}
