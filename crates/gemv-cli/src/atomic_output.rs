//! Outputs that appear whole or not at all.
//!
//! On Linux the file is created unnamed in the target's directory (`O_TMPFILE`) and given its
//! name only once complete and synced (`linkat`), so no signal, SIGKILL included, can leave a
//! partial or temporary file in sight, and an output that appeared meanwhile is never replaced
//! (`linkat` refuses an existing name). Where the system or the filesystem cannot make unnamed
//! files (or `/proc` is missing), a hidden temporary file beside the target is renamed into place
//! and removed on any error.

use crate::error::CliError;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Writes `path`, which must not exist, with `write`; `write` may run twice (once per method)
/// when the unnamed-file method is unavailable.
pub fn write_new(path: &Path, write: impl Fn(&mut File) -> io::Result<()>) -> Result<(), CliError> {
    let directory = parent_of(path);
    #[cfg(target_os = "linux")]
    match unnamed::write(directory, path, &write) {
        Ok(()) => return Ok(()),
        Err(unnamed::Failure::Exists) => return Err(CliError::OutputExists { path: path.to_path_buf() }),
        Err(unnamed::Failure::Io(error)) => {
            return Err(CliError::Io { path: path.to_path_buf(), error: error.to_string() });
        }
        Err(unnamed::Failure::Unsupported(reason)) => {
            tracing::debug!(%reason, "no unnamed output file: writing a temporary file and renaming it");
        }
    }
    renamed(directory, path, &write)
}

/// The directory an output at `path` is written in.
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

fn temporary_path(directory: &Path, path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "output".into());
    directory.join(format!(".{name}.{}.tmp", std::process::id()))
}

/// The portable method: a hidden temporary file, synced, then renamed.
fn renamed(directory: &Path, path: &Path, write: &impl Fn(&mut File) -> io::Result<()>) -> Result<(), CliError> {
    let temporary = temporary_path(directory, path);
    // Errors name the output the user asked for, never the temporary file.
    let io = |e: io::Error| CliError::Io { path: path.to_path_buf(), error: e.to_string() };
    let result = (|| {
        let mut file = File::create_new(&temporary).map_err(io)?;
        write(&mut file).map_err(io)?;
        file.sync_all().map_err(io)?;
        if path.symlink_metadata().is_ok() {
            return Err(CliError::OutputExists { path: path.to_path_buf() });
        }
        std::fs::rename(&temporary, path).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

#[cfg(target_os = "linux")]
pub(crate) mod unnamed {
    use std::ffi::CString;
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::Path;

    pub enum Failure {
        /// The output's name was taken while it was being written.
        Exists,
        /// Writing failed.
        Io(io::Error),
        /// This method is not available here; use the other.
        Unsupported(io::Error),
    }

    /// Writes an unnamed file in `directory`, then links it to `path`.
    pub fn write(directory: &Path, path: &Path, write: &impl Fn(&mut File) -> io::Result<()>) -> Result<(), Failure> {
        let mut file = create(directory)?;
        write(&mut file).map_err(Failure::Io)?;
        file.sync_all().map_err(Failure::Io)?;
        link(&file, path)
    }

    /// An unnamed file in `directory`: it has no name until [`link`] gives it one, and vanishes
    /// with the process if that never happens.
    pub fn create(directory: &Path) -> Result<File, Failure> {
        OpenOptions::new().write(true).mode(0o644).custom_flags(libc::O_TMPFILE).open(directory).map_err(|e| {
            match e.raw_os_error() {
                // Kernels or filesystems without O_TMPFILE.
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL) => Failure::Unsupported(e),
                _ => Failure::Io(e),
            }
        })
    }

    /// Gives an unnamed file the name `path` (on its filesystem), which must not exist.
    pub fn link(file: &File, path: &Path) -> Result<(), Failure> {
        let source = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(|e| Failure::Io(e.into()))?;
        let target = CString::new(path.as_os_str().as_bytes()).map_err(|e| Failure::Io(e.into()))?;
        // SAFETY: both arguments are NUL-terminated strings that outlive the call, which only
        // reads them; the descriptor behind `source` is open (`file` is borrowed).
        let linked = unsafe {
            libc::linkat(libc::AT_FDCWD, source.as_ptr(), libc::AT_FDCWD, target.as_ptr(), libc::AT_SYMLINK_FOLLOW)
        };
        if linked == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        Err(match error.raw_os_error() {
            Some(libc::EEXIST) => Failure::Exists,
            // No /proc (some sandboxes): the data is written but cannot be named this way.
            Some(libc::ENOENT | libc::EPERM) if !Path::new("/proc/self/fd").exists() => Failure::Unsupported(error),
            _ => Failure::Io(error),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// A fresh scratch directory for one test.
    pub(crate) fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gemv-atomic-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    /// The names in `dir`, sorted.
    pub(crate) fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// While the output is being written nothing is visible in its directory (so a SIGKILL at
    /// that moment leaves nothing), and afterwards exactly the output is.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_output_is_invisible_until_it_is_complete() {
        let dir = scratch("invisible");
        let path = dir.join("y.safetensors");
        write_new(&path, |file| {
            file.write_all(b"first half ")?;
            assert_eq!(entries(&dir), Vec::<String>::new(), "visible while being written");
            file.write_all(b"second half")
        })
        .expect("written");
        assert_eq!(entries(&dir), ["y.safetensors"]);
        assert_eq!(std::fs::read(&path).expect("read"), b"first half second half");
    }

    #[test]
    fn a_failed_write_leaves_nothing_and_a_taken_name_is_never_replaced() {
        let dir = scratch("failed");
        let path = dir.join("y.safetensors");
        let failed = write_new(&path, |file| {
            file.write_all(b"partial")?;
            Err(io::Error::other("disk full"))
        });
        assert!(matches!(failed, Err(CliError::Io { ref path, .. }) if path.ends_with("y.safetensors")), "{failed:?}");
        assert_eq!(entries(&dir), Vec::<String>::new());
        // Another process creates the output while ours is being written: it is kept.
        let raced = write_new(&path, |file| {
            if !path.exists() {
                std::fs::write(&path, b"theirs")?;
            }
            file.write_all(b"ours")
        });
        assert!(matches!(raced, Err(CliError::OutputExists { .. })), "{raced:?}");
        assert_eq!(std::fs::read(&path).expect("read"), b"theirs");
        assert_eq!(entries(&dir), ["y.safetensors"]);
    }

    #[test]
    fn the_portable_method_renames_a_complete_file_and_cleans_up_on_error() {
        let dir = scratch("renamed");
        let path = dir.join("y.safetensors");
        renamed(&dir, &path, &|file: &mut File| file.write_all(b"data")).expect("written");
        assert_eq!(
            (entries(&dir), std::fs::read(&path).expect("read")),
            (vec!["y.safetensors".to_string()], b"data".to_vec())
        );
        let other = dir.join("z.safetensors");
        assert!(renamed(&dir, &other, &|_: &mut File| Err(io::Error::other("no"))).is_err());
        assert_eq!(entries(&dir), ["y.safetensors"]);
    }
}
