//! A directory output that appears whole or not at all.
//!
//! On Linux each file is written unnamed (`O_TMPFILE`) in the directory that will hold the
//! output, and kept open: while the work runs nothing is visible, and a process ended by any
//! signal, SIGKILL included, leaves nothing behind (unnamed files die with it). Once every file
//! is complete, [`DirectoryOutput::finish`] makes a hidden directory beside the target, links
//! the files into it, syncs it and renames it to the target's name, refusing a name that
//! appeared meanwhile (`RENAME_NOREPLACE`). SIGINT, SIGTERM, SIGHUP and SIGQUIT are held back
//! during those few calls and delivered after: a signal then ends the process with the output
//! complete. Only a SIGKILL inside that window can leave the hidden directory; the next run to
//! the same output removes it.
//!
//! Where unnamed files are unavailable (another system, a filesystem without them, no `/proc`)
//! the files are written straight into the hidden directory, which is removed on any error; on
//! Linux SIGINT, SIGTERM and SIGHUP are then noted, the work stops at the next piece, the
//! directory is removed, and the process ends by the signal (`interrupt.rs`). After a SIGKILL
//! the next run to the same output removes it.

use crate::atomic_output::parent_of;
use crate::error::CliError;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Where the files wait until [`DirectoryOutput::finish`].
enum Staging {
    /// Unnamed files in the target's parent, each with the name it will have.
    #[cfg(target_os = "linux")]
    Unnamed(Vec<(String, File)>),
    /// A hidden directory beside the target, created on the first file.
    Hidden { created: bool },
}

/// A directory being written: files are added one by one, then it appears under its name.
pub struct DirectoryOutput {
    path: PathBuf,
    hidden: PathBuf,
    staging: Staging,
    finished: bool,
    /// With a hidden directory: signals noted, so the work stops and removes it first.
    _catching: Option<crate::interrupt::Catching>,
}

/// The hidden directory's name: `.NAME.gemv-PID.tmp` beside the target.
fn hidden_name(path: &Path, pid: u32) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "output".into());
    format!(".{name}.gemv-{pid}.tmp")
}

impl DirectoryOutput {
    /// Starts the output `path`, which must not exist (checked again when it appears).
    pub fn begin(path: &Path) -> Result<Self, CliError> {
        Self::begin_with(path, true)
    }

    /// [`Self::begin`], staging in the hidden directory unless `unnamed` allows unnamed files
    /// and they work here.
    fn begin_with(path: &Path, unnamed: bool) -> Result<Self, CliError> {
        crate::safetensors::check_output_path(path)?;
        let parent = parent_of(path);
        remove_stale(parent, path);
        let hidden = parent.join(hidden_name(path, std::process::id()));
        #[cfg(target_os = "linux")]
        let staging = match crate::atomic_output::unnamed::create(parent) {
            Ok(_probe) if unnamed => Staging::Unnamed(Vec::new()),
            _ => {
                tracing::debug!("no unnamed files here: the output is staged in {}", hidden.display());
                Staging::Hidden { created: false }
            }
        };
        #[cfg(not(target_os = "linux"))]
        let staging = {
            let _ = unnamed;
            Staging::Hidden { created: false }
        };
        let catching = matches!(staging, Staging::Hidden { .. }).then(crate::interrupt::Catching::start);
        Ok(Self { path: path.to_path_buf(), hidden, staging, finished: false, _catching: catching })
    }

    /// Writes the file `name` of the output with `write`, which should stop between pieces of
    /// work once [`crate::interrupt::caught`] says a signal arrived.
    pub fn add(&mut self, name: &str, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<(), CliError> {
        let added = self.add_file(name, write);
        match crate::interrupt::caught() {
            Some(signal) => Err(CliError::Interrupted { signal }),
            None => added,
        }
    }

    fn add_file(&mut self, name: &str, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<(), CliError> {
        let shown = self.path.join(name);
        let io = |e: io::Error| CliError::Io { path: shown.clone(), error: e.to_string() };
        match &mut self.staging {
            #[cfg(target_os = "linux")]
            Staging::Unnamed(files) => {
                use crate::atomic_output::unnamed::Failure;
                let mut file = crate::atomic_output::unnamed::create(parent_of(&self.path)).map_err(|f| match f {
                    Failure::Io(e) | Failure::Unsupported(e) => io(e),
                    Failure::Exists => io(io::Error::from(io::ErrorKind::AlreadyExists)),
                })?;
                write(&mut file).map_err(io)?;
                file.sync_all().map_err(io)?;
                files.push((name.to_string(), file));
            }
            Staging::Hidden { created } => {
                if !*created {
                    std::fs::create_dir(&self.hidden).map_err(io)?;
                    *created = true;
                }
                let mut file = File::create_new(self.hidden.join(name)).map_err(io)?;
                write(&mut file).map_err(io)?;
                file.sync_all().map_err(io)?;
            }
        }
        Ok(())
    }

    /// Makes the output appear under its name, with every file added.
    pub fn finish(mut self) -> Result<(), CliError> {
        let io = |e: io::Error| CliError::Io { path: self.path.clone(), error: e.to_string() };
        let _held = HeldSignals::hold();
        #[cfg(target_os = "linux")]
        if matches!(self.staging, Staging::Unnamed(_))
            && let Staging::Unnamed(files) = std::mem::replace(&mut self.staging, Staging::Hidden { created: false })
        {
            std::fs::create_dir(&self.hidden).map_err(io)?;
            self.staging = Staging::Hidden { created: true };
            for (name, file) in &files {
                crate::atomic_output::unnamed::link(file, &self.hidden.join(name)).map_err(|f| {
                    use crate::atomic_output::unnamed::Failure;
                    match f {
                        Failure::Io(e) | Failure::Unsupported(e) => io(e),
                        Failure::Exists => io(io::Error::from(io::ErrorKind::AlreadyExists)),
                    }
                })?;
            }
        }
        if let Staging::Hidden { created: false } = self.staging {
            std::fs::create_dir(&self.hidden).map_err(io)?;
            self.staging = Staging::Hidden { created: true };
        }
        File::open(&self.hidden).and_then(|d| d.sync_all()).map_err(io)?;
        rename_no_replace(&self.hidden, &self.path)?;
        // The rename is durable once the parent is synced; the output is complete either way.
        let _ = File::open(parent_of(&self.path)).and_then(|d| d.sync_all());
        self.finished = true;
        Ok(())
    }
}

impl Drop for DirectoryOutput {
    /// An output never finished leaves nothing: unnamed files close and vanish, a hidden
    /// directory is removed.
    fn drop(&mut self) {
        if !self.finished && matches!(self.staging, Staging::Hidden { created: true }) {
            let _ = std::fs::remove_dir_all(&self.hidden);
        }
    }
}

/// Renames `from` to `to`, refusing to replace anything at `to` (an empty directory included,
/// which a plain rename would replace).
fn rename_no_replace(from: &Path, to: &Path) -> Result<(), CliError> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let io = |e: io::Error| CliError::Io { path: to.to_path_buf(), error: e.to_string() };
        let source = std::ffi::CString::new(from.as_os_str().as_bytes()).map_err(|e| io(e.into()))?;
        let target = std::ffi::CString::new(to.as_os_str().as_bytes()).map_err(|e| io(e.into()))?;
        // SAFETY: both paths are NUL-terminated strings that outlive the call, which only reads
        // them; renameat2 takes no other pointers.
        let renamed = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                source.as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if renamed == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EEXIST) => return Err(CliError::OutputExists { path: to.to_path_buf() }),
            // A kernel or filesystem without the flag: the portable way below.
            Some(libc::ENOSYS | libc::EINVAL) => {}
            _ => return Err(io(error)),
        }
    }
    if to.symlink_metadata().is_ok() {
        return Err(CliError::OutputExists { path: to.to_path_buf() });
    }
    std::fs::rename(from, to).map_err(|e| CliError::Io { path: to.to_path_buf(), error: e.to_string() })
}

/// Removes hidden directories a run killed while finishing left for the output `path`: those
/// whose process no longer exists.
fn remove_stale(parent: &Path, path: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    let prefix = hidden_name(path, 0);
    let Some(prefix) = prefix.strip_suffix("0.tmp") else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix(prefix).and_then(|rest| rest.strip_suffix(".tmp")).and_then(|p| p.parse().ok());
        if let Some(pid) = pid
            && !process_exists(pid)
        {
            tracing::info!(stale = %entry.path().display(), "removing what an interrupted run left");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(unix)]
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    alive || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn process_exists(pid: u32) -> bool {
    pid == std::process::id()
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT held back (blocked) while alive; those that arrived are
/// delivered when it drops.
struct HeldSignals {
    #[cfg(unix)]
    previous: libc::sigset_t,
}

impl HeldSignals {
    #[cfg(unix)]
    fn hold() -> Self {
        // SAFETY: sigemptyset/sigaddset fill a sigset_t we own; pthread_sigmask reads `held`
        // and writes the previous mask into `previous`, both valid for the call.
        unsafe {
            let mut held = std::mem::zeroed::<libc::sigset_t>();
            let mut previous = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut held);
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                libc::sigaddset(&mut held, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &held, &mut previous);
            Self { previous }
        }
    }

    #[cfg(not(unix))]
    fn hold() -> Self {
        Self {}
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: restores the mask saved by `hold`, a valid sigset_t owned by `self`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atomic_output::tests::{entries, scratch};
    use std::io::Write;

    /// Both ways of staging: unnamed files, and the hidden directory used where those are
    /// unavailable.
    #[test]
    fn the_hidden_way_also_appears_whole_and_leaves_nothing_when_unfinished() {
        let dir = scratch("hidden");
        let out = dir.join("model");
        let mut output = DirectoryOutput::begin_with(&out, false).expect("begins");
        output.add("a.safetensors", |f| f.write_all(b"a")).expect("a");
        assert_eq!(entries(&dir), [hidden_name(&out, std::process::id())]);
        output.finish().expect("finished");
        assert_eq!((entries(&dir), entries(&out)), (vec!["model".to_string()], vec!["a.safetensors".to_string()]));
        let other = dir.join("other");
        let mut output = DirectoryOutput::begin_with(&other, false).expect("begins");
        output.add("a.safetensors", |f| f.write_all(b"a")).expect("a");
        drop(output);
        assert_eq!(entries(&dir), ["model"]);
    }

    #[test]
    fn an_unfinished_or_refused_directory_leaves_nothing() {
        let dir = scratch("unfinished");
        let out = dir.join("model");
        let mut output = DirectoryOutput::begin(&out).expect("begins");
        output.add("a.safetensors", |f| f.write_all(b"a")).expect("a");
        let failed = output.add("b.safetensors", |_| Err(io::Error::other("disk full")));
        assert!(matches!(failed, Err(CliError::Io { ref path, .. }) if path.ends_with("model/b.safetensors")));
        drop(output);
        assert_eq!(entries(&dir), Vec::<String>::new());

        // A directory that appeared meanwhile (even an empty one) is never replaced.
        let mut output = DirectoryOutput::begin(&out).expect("begins");
        output.add("a.safetensors", |f| f.write_all(b"a")).expect("a");
        std::fs::create_dir(&out).expect("someone else's");
        let refused = output.finish();
        assert!(matches!(refused, Err(CliError::OutputExists { .. })), "{refused:?}");
        assert_eq!(entries(&dir), ["model"]);
        assert_eq!(entries(&out), Vec::<String>::new());
    }

    #[test]
    fn a_hidden_directory_left_by_a_dead_run_is_removed_by_the_next() {
        let dir = scratch("stale");
        let out = dir.join("model");
        // No process has pid i32::MAX - 1 (pid_max is at most 2^22).
        let stale = dir.join(hidden_name(&out, (i32::MAX - 1) as u32));
        let live = dir.join(hidden_name(&out, std::process::id()));
        let other = dir.join(".other.gemv-1.tmp");
        for d in [&stale, &live, &other] {
            std::fs::create_dir(d).expect("planted");
        }
        let output = DirectoryOutput::begin(&out).expect("begins");
        drop(output);
        let names = entries(&dir);
        assert!(!names.contains(&hidden_name(&out, (i32::MAX - 1) as u32)), "{names:?}");
        assert!(names.contains(&".other.gemv-1.tmp".to_string()), "another output's is not ours: {names:?}");
        assert!(names.contains(&hidden_name(&out, std::process::id())), "a live run's is kept: {names:?}");
    }
}
