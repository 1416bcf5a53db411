//! Opening a file beneath a directory without ever leaving it, whatever is renamed or swapped
//! for a link while the path is walked: the file server's only way into its root.
//!
//! Each step resolves relative to a descriptor, never to a path checked earlier, so nothing
//! can change between a check and the open. With `openat2(RESOLVE_BENEATH)` the kernel walks
//! the path and refuses to leave the directory (`EXDEV`): absolute links, `..` above it and
//! links out of it are refused, links that stay inside are followed. Where `openat2` is
//! missing (Linux before 5.6: `ENOSYS`) or forbidden (a seccomp filter: `EPERM`), the same
//! rules are applied here, one component at a time: each opened with `O_NOFOLLOW` relative to
//! the directory opened before it, each link read and resolved by the rules above, `..` going
//! back along the directories walked, never above the first.
//!
//! The file itself is opened `O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`: a FIFO does not
//! block the open, a terminal does not become the master's. What it is (a regular file?) is
//! for the caller to ask of the descriptor (`fstat`).

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

/// Links followed on one path at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Times `openat2` is tried again when a rename elsewhere raced its walk (`EAGAIN`) before the
/// walk here takes over.
const RACE_RETRIES: usize = 3;

/// How the file at the end is opened.
const FILE_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;

/// How each directory on the way is opened by the walk: only to look up the next name in.
const DIR_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// Set once `openat2` answered `ENOSYS`: the kernel has none, so it is not tried again.
static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

/// Opens `path` (relative, made of plain names only: the caller refuses `..`, `.` and a
/// leading `/`) beneath `dir`, following links only while they stay beneath it.
///
/// Errors are the kernel's: `EXDEV` for a path or link leading out of `dir`, `ENOENT` and
/// `ENOTDIR` for what is not there, `ELOOP` for too many links.
pub(crate) fn open_beneath(dir: BorrowedFd<'_>, path: &Path) -> io::Result<File> {
    let joined = plain(path)?;
    if !OPENAT2_MISSING.load(Ordering::Relaxed) {
        for _ in 0..RACE_RETRIES {
            match openat2_beneath(dir, &joined) {
                Ok(fd) => return Ok(File::from(fd)),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    OPENAT2_MISSING.store(true, Ordering::Relaxed);
                    tracing::info!("openat2 is not available; files are opened one path component at a time");
                    break;
                }
                // A seccomp filter, most likely (opening for reading has no other EPERM but
                // a fanotify veto, which the walk meets again): walk this once.
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => break,
                Err(e) => return Err(e),
            }
        }
    }
    walk_beneath(dir, path)
}

/// `path` as one C string, checked to be plain names only.
fn plain(path: &Path) -> io::Result<CString> {
    let mut joined = Vec::with_capacity(path.as_os_str().len());
    for component in path.components() {
        let Component::Normal(name) = component else { return Err(errno(libc::EXDEV)) };
        if !joined.is_empty() {
            joined.push(b'/');
        }
        joined.extend_from_slice(name.as_bytes());
    }
    if joined.is_empty() {
        return Err(errno(libc::ENOENT));
    }
    CString::new(joined).map_err(|_| errno(libc::EINVAL))
}

fn errno(code: libc::c_int) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// The kernel's `struct open_how` (linux/openat2.h), version 0: three 64-bit fields.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dir, path, FILE_FLAGS, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn openat2_beneath(dir: BorrowedFd<'_>, path: &CStr) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: u64::from(FILE_FLAGS.unsigned_abs()),
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2(2) reads a NUL-terminated path from `path` (a live CStr) and
    // `size_of::<OpenHow>()` bytes from `&how` (a live `repr(C)` struct laid out as the
    // kernel's open_how v0); `dir` is an open descriptor borrowed for the whole call. Nothing
    // is written through either pointer. The result is a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    owned(RawFd::try_from(fd).unwrap_or(-1))
}

#[cfg(not(target_os = "linux"))]
fn openat2_beneath(_dir: BorrowedFd<'_>, _path: &CStr) -> io::Result<OwnedFd> {
    Err(errno(libc::ENOSYS))
}

/// The descriptor a call just returned, owned; or the call's error if it returned -1.
#[allow(unsafe_code)]
fn owned(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by open(2)/openat2(2) and handed to nothing else, so this
    // is its only owner and it is closed exactly once, when the OwnedFd drops.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags)`.
#[allow(unsafe_code)]
fn openat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a live NUL-terminated string and `dir` an open descriptor, both
    // borrowed for the call; no mode is passed, as none of the flags creates a file.
    owned(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

/// Whether `name` in `dir` is a symbolic link (not followed).
#[allow(unsafe_code)]
fn is_link_at(dir: BorrowedFd<'_>, name: &CStr) -> bool {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstatat(2) writes a whole `struct stat` to `stat` (sized for it) and reads the
    // live NUL-terminated `name`; `dir` is an open descriptor borrowed for the call.
    let done = unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), stat.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    if done != 0 {
        return false;
    }
    // SAFETY: fstatat returned 0, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    stat.st_mode & libc::S_IFMT == libc::S_IFLNK
}

/// The target of the link `name` in `dir`.
#[allow(unsafe_code)]
fn readlinkat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat(2) writes at most `buf.len()` bytes into `buf` (owned, that long)
    // and reads the live NUL-terminated `name`; `dir` is an open descriptor borrowed for it.
    let len = unsafe { libc::readlinkat(dir.as_raw_fd(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let len = usize::try_from(len).map_err(|_| io::Error::last_os_error())?;
    if len >= buf.len() {
        return Err(errno(libc::ENAMETOOLONG));
    }
    buf.truncate(len);
    Ok(buf)
}

/// The names of a path or link target, to be walked: empty names and `.` dropped.
fn names(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|name| !name.is_empty() && *name != b".")
}

/// What `openat2(RESOLVE_BENEATH)` does, by hand: one name at a time, never following a link
/// in the kernel, never going above `root`.
pub(crate) fn walk_beneath(root: BorrowedFd<'_>, path: &Path) -> io::Result<File> {
    let joined = plain(path)?;
    // Names still to walk, the next one last.
    let mut pending: Vec<Vec<u8>> = names(joined.as_bytes()).rev().map(<[u8]>::to_vec).collect();
    // The directories walked from `root` to `here`, by name, for `..`.
    let mut walked: Vec<CString> = Vec::new();
    let mut here: Option<OwnedFd> = None;
    let mut links = 0;
    while let Some(name) = pending.pop() {
        let dir = here.as_ref().map_or(root, AsFd::as_fd);
        if name == b".." {
            // Back along the walk, by name from `root` again: never the directory's own `..`,
            // which leads out if the directory was moved out meanwhile.
            if walked.pop().is_none() {
                return Err(errno(libc::EXDEV));
            }
            here = reopen(root, &walked)?;
            continue;
        }
        let name = CString::new(name).map_err(|_| errno(libc::EINVAL))?;
        let last = pending.is_empty();
        let flags = if last { FILE_FLAGS | libc::O_NOFOLLOW } else { DIR_FLAGS };
        match openat(dir, &name, flags) {
            Ok(fd) if last => return Ok(File::from(fd)),
            Ok(fd) => {
                walked.push(name);
                here = Some(fd);
            }
            // O_NOFOLLOW meets a link: ELOOP, or ENOTDIR with O_PATH | O_DIRECTORY.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) && is_link_at(dir, &name) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(errno(libc::ELOOP));
                }
                let target = readlinkat(dir, &name)?;
                if target.first() == Some(&b'/') {
                    return Err(errno(libc::EXDEV));
                }
                pending.extend(names(&target).rev().map(<[u8]>::to_vec));
            }
            Err(e) => return Err(e),
        }
    }
    // The path ended on a directory (a link to one, or `..`).
    Err(errno(libc::EISDIR))
}

/// The directory `walked` leads to from `root` (`None`: the root itself), each name opened
/// without following links.
fn reopen(root: BorrowedFd<'_>, walked: &[CString]) -> io::Result<Option<OwnedFd>> {
    let mut here: Option<OwnedFd> = None;
    for name in walked {
        let dir = here.as_ref().map_or(root, AsFd::as_fd);
        here = Some(openat(dir, name, DIR_FLAGS)?);
    }
    Ok(here)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_and_openat2_agree() {
        let dir = std::env::temp_dir().join(format!("halite-beneath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root/app/deep")).unwrap();
        std::fs::write(dir.join("root/app/conf"), b"hello").unwrap();
        std::fs::write(dir.join("secret"), b"outside").unwrap();
        let link = |target: &str, at: &str| std::os::unix::fs::symlink(target, dir.join("root").join(at)).unwrap();
        link("app/conf", "inside");
        link("../conf", "app/deep/up");
        link("deep/../../app/conf", "app/around");
        link("../secret", "escape");
        link("../../../secret", "app/deep/escape");
        link(dir.join("root/app/conf").to_str().unwrap(), "absolute");
        link("loop", "loop");
        link("app", "to-dir");
        let root = File::open(dir.join("root")).unwrap();
        let read = |file: io::Result<File>| -> Result<String, i32> {
            let mut file = file.map_err(|e| e.raw_os_error().unwrap())?;
            let mut text = String::new();
            io::Read::read_to_string(&mut file, &mut text).map_err(|e| e.raw_os_error().unwrap())?;
            Ok(text)
        };
        for (path, want) in [
            ("app/conf", Ok("hello".to_owned())),
            ("inside", Ok("hello".to_owned())),
            ("app/deep/up", Ok("hello".to_owned())),
            ("app/around", Ok("hello".to_owned())),
            ("escape", Err(libc::EXDEV)),
            ("app/deep/escape", Err(libc::EXDEV)),
            ("absolute", Err(libc::EXDEV)),
            ("loop", Err(libc::ELOOP)),
            ("missing", Err(libc::ENOENT)),
            ("app/conf/below", Err(libc::ENOTDIR)),
            ("to-dir/conf", Ok("hello".to_owned())),
        ] {
            assert_eq!(read(walk_beneath(root.as_fd(), Path::new(path))), want, "walk: {path}");
            assert_eq!(read(open_beneath(root.as_fd(), Path::new(path))), want, "open: {path}");
        }
        // A directory opens (the caller's fstat refuses it); `..` is the caller's to refuse.
        assert!(walk_beneath(root.as_fd(), Path::new("app")).unwrap().metadata().unwrap().is_dir());
        assert!(open_beneath(root.as_fd(), Path::new("to-dir")).unwrap().metadata().unwrap().is_dir());
        assert_eq!(walk_beneath(root.as_fd(), Path::new("../secret")).unwrap_err().raw_os_error(), Some(libc::EXDEV));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The walk under the race the issue describes: a directory swapped for a link out of the
    /// root and back while its file is opened; what opens is always the file inside.
    #[test]
    fn the_walk_never_leaves_the_root_while_a_directory_is_swapped_for_a_link() {
        let dir = std::env::temp_dir().join(format!("halite-beneath-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (inside, parked, outside) = (dir.join("root/d"), dir.join("root/d.parked"), dir.join("state"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(inside.join("key"), b"decoy").unwrap();
        std::fs::write(outside.join("key"), b"secret").unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, inside) = (stop.clone(), inside.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::fs::rename(&inside, &parked).unwrap();
                    std::os::unix::fs::symlink(&outside, &inside).unwrap();
                    std::thread::yield_now();
                    std::fs::remove_file(&inside).unwrap();
                    std::fs::rename(&parked, &inside).unwrap();
                }
            })
        };
        let root = File::open(dir.join("root")).unwrap();
        let (mut opened, mut refused) = (0, 0);
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(1) || opened == 0 || refused == 0 {
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "{opened} opened, {refused} refused");
            match walk_beneath(root.as_fd(), Path::new("d/key")) {
                Ok(mut file) => {
                    let mut text = String::new();
                    io::Read::read_to_string(&mut file, &mut text).unwrap();
                    assert_eq!(text, "decoy");
                    opened += 1;
                }
                Err(_) => refused += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
