//! Memory and disk, checked before the work that needs them: an input the machine cannot hold
//! is a clear error (exit 2) naming the size and what is available, not an allocation failure
//! that aborts the process (a Rust allocation failure aborts; on Linux an overcommitted one is
//! killed later instead), and an output the disk cannot hold is refused before it is written.

use crate::error::CliError;
use std::path::Path;

/// The memory the kernel says is available (`MemAvailable`), where it says so.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The filesystem statistics of `directory` (None where statvfs fails).
#[cfg(target_os = "linux")]
fn filesystem(directory: &Path) -> Option<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(directory.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call and `stats` is a writable
    // buffer of the size statvfs fills; it is read only after the call reported success.
    unsafe {
        if libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) != 0 {
            return None;
        }
        Some(stats.assume_init())
    }
}

/// The bytes an unprivileged user may still write on the filesystem holding `directory`.
#[cfg(target_os = "linux")]
pub fn available_disk(directory: &Path) -> Option<u64> {
    let stats = filesystem(directory)?;
    // fsblkcnt_t and c_ulong are 32 bits wide on some targets.
    #[allow(clippy::useless_conversion)]
    u64::from(stats.f_bavail).checked_mul(u64::from(stats.f_frsize))
}

/// Elsewhere the disk is not checked (the write fails cleanly when it fills).
#[cfg(not(target_os = "linux"))]
pub fn available_disk(_directory: &Path) -> Option<u64> {
    None
}

/// Why nothing can be written in `directory`, if so: its filesystem is mounted read-only, or
/// this user may not write there. Free space means nothing on such a filesystem, so this is
/// asked first.
#[cfg(target_os = "linux")]
fn unwritable(directory: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(directory.as_os_str().as_bytes()).ok()?;
    let read_only = filesystem(directory).is_some_and(|s| s.f_flag & libc::ST_RDONLY as libc::c_ulong != 0);
    // SAFETY: `path` is a NUL-terminated string that outlives the call; access reads only it.
    let denied = unsafe { libc::access(path.as_ptr(), libc::W_OK) } != 0;
    let error = denied.then(|| std::io::Error::last_os_error().raw_os_error()).flatten();
    unwritable_reason(read_only, error)
}

#[cfg(not(target_os = "linux"))]
fn unwritable(_directory: &Path) -> Option<&'static str> {
    None
}

/// The reason [`unwritable`] gives for a filesystem's read-only flag and `access(W_OK)`'s error.
#[cfg(target_os = "linux")]
fn unwritable_reason(read_only: bool, access_error: Option<i32>) -> Option<&'static str> {
    match access_error {
        _ if read_only => Some("is on a read-only filesystem"),
        Some(libc::EROFS) => Some("is on a read-only filesystem"),
        Some(libc::EACCES | libc::EPERM) => Some("is not writable by this user"),
        _ => None,
    }
}

/// Refuses `needed` bytes of memory for `what` when more than the available memory; `None` (a
/// size past 64 bits) is refused too.
pub fn check_memory(what: impl FnOnce() -> String, needed: Option<u64>) -> Result<(), CliError> {
    check_memory_against(what, needed, available_memory())
}

/// [`check_memory`] with the available memory given (None: unknown, nothing is refused but a
/// size past 64 bits).
pub fn check_memory_against(
    what: impl FnOnce() -> String,
    needed: Option<u64>,
    available: Option<u64>,
) -> Result<(), CliError> {
    match (needed, available) {
        (None, available) => {
            Err(CliError::NotEnoughMemory { what: what(), needed: u64::MAX, available: available.unwrap_or(0) })
        }
        (Some(needed), Some(available)) if needed > available => {
            Err(CliError::NotEnoughMemory { what: what(), needed, available })
        }
        _ => Ok(()),
    }
}

/// Refuses an output of `needed` bytes at `path` when its filesystem has less free (None: past
/// 64 bits).
pub fn check_disk(path: &Path, needed: Option<u64>) -> Result<(), CliError> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if let Some(reason) = unwritable(directory) {
        let reason = format!("cannot be written: its directory {} {reason}", directory.display());
        return Err(CliError::BadOutput { path: path.to_path_buf(), reason });
    }
    let available = available_disk(directory);
    match (needed, available) {
        (None, available) => Err(CliError::NotEnoughDisk {
            path: path.to_path_buf(),
            needed: u64::MAX,
            available: available.unwrap_or(0),
        }),
        (Some(needed), Some(available)) if needed > available => {
            Err(CliError::NotEnoughDisk { path: path.to_path_buf(), needed, available })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_does_not_fit_is_refused_with_its_size_and_what_is_there() {
        assert!(check_memory_against(|| "X".into(), Some(10), Some(10)).is_ok());
        assert!(check_memory_against(|| "X".into(), Some(11), None).is_ok(), "unknown: not refused");
        let refused = check_memory_against(|| "X".into(), Some(11), Some(10));
        assert!(matches!(refused, Err(CliError::NotEnoughMemory { needed: 11, available: 10, .. })), "{refused:?}");
        assert!(check_memory_against(|| "X".into(), None, None).is_err(), "past 64 bits");
        // The disk: more than any filesystem holds is refused, a byte is not.
        let dir = std::env::temp_dir();
        if available_disk(&dir).is_some() {
            let refused = check_disk(&dir.join("out"), Some(u64::MAX - 1));
            assert!(matches!(refused, Err(CliError::NotEnoughDisk { .. })), "{refused:?}");
        }
        assert!(check_disk(&dir.join("out"), Some(1)).is_ok());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_read_only_or_forbidden_directory_is_named_as_such_not_as_lacking_space() {
        assert_eq!(unwritable_reason(true, None), Some("is on a read-only filesystem"));
        assert_eq!(unwritable_reason(false, Some(libc::EROFS)), Some("is on a read-only filesystem"));
        assert_eq!(unwritable_reason(false, Some(libc::EACCES)), Some("is not writable by this user"));
        assert_eq!(unwritable_reason(false, None), None);
        assert_eq!(unwritable_reason(false, Some(libc::ENOENT)), None, "a missing directory is reported elsewhere");
        // A directory this machine can write passes; one on a read-only mount, where the machine
        // has one, is refused with that reason.
        assert_eq!(unwritable(&std::env::temp_dir()), None);
        if let Some(mount) = read_only_mount() {
            let refused = check_disk(&mount.join("out.safetensors"), Some(1));
            assert!(
                matches!(&refused, Err(CliError::BadOutput { reason, .. }) if reason.contains("read-only filesystem")),
                "{refused:?}"
            );
        } else {
            eprintln!("skipped the read-only mount case: no read-only filesystem is mounted here");
        }
    }

    /// A mount point /proc/mounts lists as read-only, if any.
    #[cfg(target_os = "linux")]
    fn read_only_mount() -> Option<std::path::PathBuf> {
        let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
        mounts.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (point, options) = (fields.get(1)?, fields.get(3)?);
            options.split(',').any(|o| o == "ro").then(|| std::path::PathBuf::from(point))
        })
    }
}
