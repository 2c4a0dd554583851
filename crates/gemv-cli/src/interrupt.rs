//! SIGINT, SIGTERM and SIGHUP noted instead of ending the process, while an output a signal
//! would otherwise leave half-written in sight is being made (a hidden staging directory, where
//! unnamed files are unavailable). The work polls [`caught`] between pieces, stops, removes what
//! it wrote, and `main` then ends the process by the same signal ([`reraise`]).

use std::sync::atomic::{AtomicI32, Ordering};

/// The last signal caught while [`Catching`] was alive (0: none).
static CAUGHT: AtomicI32 = AtomicI32::new(0);

/// The signal that arrived while catching, if one did.
pub fn caught() -> Option<i32> {
    match CAUGHT.load(Ordering::Relaxed) {
        0 => None,
        signal => Some(signal),
    }
}

/// The signals noted while alive; the previous dispositions come back on drop.
#[cfg(target_os = "linux")]
pub struct Catching {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

#[cfg(target_os = "linux")]
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

#[cfg(target_os = "linux")]
extern "C" fn note(signal: libc::c_int) {
    // Async-signal-safe: one atomic store.
    CAUGHT.store(signal, Ordering::Relaxed);
}

#[cfg(target_os = "linux")]
impl Catching {
    /// Starts noting SIGINT, SIGTERM and SIGHUP.
    pub fn start() -> Self {
        let mut previous = Vec::new();
        for signal in SIGNALS {
            // SAFETY: `action` is a zeroed sigaction given a handler that only stores to an
            // atomic (async-signal-safe) and an empty mask; `old` receives the previous
            // disposition; both live across the call.
            unsafe {
                let mut action = std::mem::zeroed::<libc::sigaction>();
                action.sa_sigaction = note as *const () as libc::sighandler_t;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old = std::mem::zeroed::<libc::sigaction>();
                if libc::sigaction(signal, &action, &mut old) == 0 {
                    previous.push((signal, old));
                }
            }
        }
        Self { previous }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Catching {
    fn drop(&mut self) {
        for (signal, old) in &self.previous {
            // SAFETY: restores a disposition sigaction itself returned.
            unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
        }
    }
}

/// Elsewhere signals keep their default action.
#[cfg(not(target_os = "linux"))]
pub struct Catching;

#[cfg(not(target_os = "linux"))]
impl Catching {
    /// Notes nothing.
    pub fn start() -> Self {
        Self
    }
}

/// Ends the process by `signal`, with its default action, as if it had never been caught.
pub fn reraise(signal: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: resets the disposition to the default and raises the signal; no memory is passed.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = signal;
}
