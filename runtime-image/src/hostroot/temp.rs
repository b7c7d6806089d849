//! Temp files beside a target, for atomic replacement. The name is random and the file is
//! created with `O_CREAT | O_EXCL | O_NOFOLLOW` relative to the target directory's fd: anything
//! already at the name (a symlink a node user planted, even a dangling one) makes the create
//! fail instead of redirecting the write, and another name is tried.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use rustix::fs::{openat, Mode, OFlags};
use rustix::io::Errno;
use rustix::rand::{getrandom, GetRandomFlags};

/// Names tried before giving up (each is 64 random bits; a collision means someone is
/// planting names, or the generator is broken).
const ATTEMPTS: usize = 16;
/// At most this many bytes of the target's name go into the temp name (NAME_MAX is 255).
const NAME_PREFIX_MAX: usize = 200;

/// Creates a new, empty temp file (mode 0600) in `dir` for `target`; returns it and its name.
pub fn create(dir: BorrowedFd<'_>, target: &OsStr) -> io::Result<(OwnedFd, OsString)> {
    create_with(dir, target, random_suffix)
}

/// [`create`] with the suffixes to try given (tests plant files at the first ones).
pub fn create_with(
    dir: BorrowedFd<'_>,
    target: &OsStr,
    mut suffix: impl FnMut() -> io::Result<String>,
) -> io::Result<(OwnedFd, OsString)> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    for _ in 0..ATTEMPTS {
        let name = temp_name(target, &suffix()?);
        match openat(dir, name.as_os_str(), flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => return Ok((fd, name)),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("no free temp file name after {ATTEMPTS} tries"),
    ))
}

/// `.<target>.pseudoflow-tmp-<suffix>`.
fn temp_name(target: &OsStr, suffix: &str) -> OsString {
    let t = target.as_bytes();
    let mut name = b".".to_vec();
    name.extend_from_slice(&t[..t.len().min(NAME_PREFIX_MAX)]);
    name.extend_from_slice(b".pseudoflow-tmp-");
    name.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(name)
}

/// 64 bits from the kernel's random source, in hex.
fn random_suffix() -> io::Result<String> {
    let mut buf = [0u8; 8];
    let mut filled = 0;
    while filled < buf.len() {
        filled += getrandom(&mut buf[filled..], GetRandomFlags::empty())?;
    }
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::fd::AsFd;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_planted_name_is_skipped_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        fs::write(&victim, "untouched").unwrap();
        // Both a link to an existing file and a dangling one (O_CREAT would create its target).
        symlink(&victim, dir.path().join(".app.conf.pseudoflow-tmp-aaaa")).unwrap();
        symlink(
            outside.path().join("new"),
            dir.path().join(".app.conf.pseudoflow-tmp-bbbb"),
        )
        .unwrap();
        let d = fs::File::open(dir.path()).unwrap();
        let mut tries = ["aaaa", "bbbb", "cccc"].into_iter();
        let (fd, name) = create_with(d.as_fd(), OsStr::new("app.conf"), || {
            Ok(tries.next().unwrap().to_string())
        })
        .unwrap();
        assert_eq!(name, ".app.conf.pseudoflow-tmp-cccc");
        use std::io::Write;
        fs::File::from(fd).write_all(b"new").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(!outside.path().join("new").exists());
        assert_eq!(
            fs::read(dir.path().join(".app.conf.pseudoflow-tmp-cccc")).unwrap(),
            b"new"
        );
    }

    #[test]
    fn names_are_random_and_fit_name_max() {
        let (a, b) = (random_suffix().unwrap(), random_suffix().unwrap());
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
        let long = OsString::from("x".repeat(255));
        assert!(temp_name(&long, &a).len() <= 255);
    }

    #[test]
    fn running_out_of_names_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(".f.pseudoflow-tmp-same"), "").unwrap();
        let d = fs::File::open(dir.path()).unwrap();
        let err = create_with(d.as_fd(), OsStr::new("f"), || Ok("same".into())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    }
}
