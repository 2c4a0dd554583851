//! Zero-filled host bytes aligned like device memory.
//!
//! `cudaMalloc` returns 256-byte aligned addresses, so a kernel's alignment decisions depend only
//! on the offsets a caller chooses. Host buffers get the same guarantee: the backends that run on
//! the CPU (the host reference, the CUDA emulator) then see exactly the alignment a GPU would,
//! and an alignment check in a kernel is exercised by the offsets the tests choose, not by where
//! the allocator happened to put a `Vec`.
//!
//! Buffers of 2 MiB and more are aligned to 2 MiB and, on Linux, offered to transparent huge
//! pages (`madvise(MADV_HUGEPAGE)`, which matters where the system's setting is `madvise`, the
//! common default): the CPU backend streams weights from them, and with 4 KB pages every 4 KB of
//! a row stream costs a TLB miss. The advice comes before the zero-fill, which faults the pages
//! in: given after, no page becomes huge. docs/cpu.md has the measured effect.

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc, handle_alloc_error};
use std::ptr::NonNull;

/// The alignment of every host buffer (that of CUDA allocations).
pub const DEVICE_ALIGNMENT: usize = 256;

/// Buffers at least this large are aligned to it and offered to transparent huge pages.
const HUGE_PAGE: usize = 2 << 20;

/// A zero-filled byte buffer whose first byte is [`DEVICE_ALIGNMENT`]-aligned.
pub struct AlignedBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBytes owns its allocation exclusively, like a Vec<u8>; no interior mutability.
unsafe impl Send for AlignedBytes {}
// SAFETY: shared access only reads (through `Deref`); writes need `&mut self` or a raw pointer
// taken under the caller's own synchronisation (`HostMemory` holds its lock).
unsafe impl Sync for AlignedBytes {}

impl AlignedBytes {
    /// `len` zero bytes (a zero-length buffer still owns one aligned byte).
    pub fn zeroed(len: usize) -> Self {
        let layout = Self::layout(len);
        let raw = if len >= HUGE_PAGE {
            // The advice must come before the first touch: a page the zero-fill has already
            // faulted in stays a 4 KB page (`alloc_zeroed` with this alignment allocates, then
            // writes the zeros itself, so huge pages never came before this order).
            // SAFETY: the layout has a non-zero size and a power-of-two alignment.
            let raw = unsafe { alloc(layout) };
            if !raw.is_null() {
                advise_huge_pages(raw, len);
                // SAFETY: `raw` is a fresh allocation of `layout.size() >= len` bytes.
                unsafe { raw.write_bytes(0, len) };
            }
            raw
        } else {
            // SAFETY: the layout has a non-zero size (at least one byte) and a power-of-two
            // alignment.
            unsafe { alloc_zeroed(layout) }
        };
        let ptr = NonNull::new(raw).unwrap_or_else(|| handle_alloc_error(layout));
        Self { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        let align = if len >= HUGE_PAGE { HUGE_PAGE } else { DEVICE_ALIGNMENT };
        Layout::from_size_align(len.max(1), align).unwrap_or_else(|_| {
            // Only a size within DEVICE_ALIGNMENT of isize::MAX gets here; no allocator could
            // serve it either.
            handle_alloc_error(Layout::new::<u8>())
        })
    }

    /// The first byte's address, for kernels that access the buffer in place. Writing through it
    /// needs the same exclusivity as `&mut self` (the caller's lock).
    pub fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

/// Asks Linux to back `len` bytes from `start` (2 MiB-aligned) with huge pages; a refusal (no
/// THP support, or the setting `never`) only leaves the usual pages, so the result is logged, not
/// returned.
#[cfg(target_os = "linux")]
fn advise_huge_pages(start: *mut u8, len: usize) {
    // SAFETY: `start .. start + len` is one live allocation owned by the caller, and
    // MADV_HUGEPAGE only changes how the kernel backs those pages, never their contents.
    let status = unsafe { libc::madvise(start.cast(), len, libc::MADV_HUGEPAGE) };
    if status != 0 {
        tracing::debug!(len, error = %std::io::Error::last_os_error(), "no transparent huge pages");
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_start: *mut u8, _len: usize) {}

impl std::ops::Deref for AlignedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to an allocation of at least `len` initialised (zeroed) bytes that
        // lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

impl std::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBytes").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_and_device_aligned() {
        for len in [0, 1, 3, 255, 256, 4097, HUGE_PAGE - 1, HUGE_PAGE + 3] {
            let mut bytes = AlignedBytes::zeroed(len);
            assert_eq!(bytes.len(), len);
            assert_eq!(bytes.base() as usize % DEVICE_ALIGNMENT, 0, "len {len}");
            if len >= HUGE_PAGE {
                assert_eq!(bytes.base() as usize % HUGE_PAGE, 0, "len {len}");
            }
            assert!(bytes.iter().all(|&b| b == 0));
            bytes.iter_mut().for_each(|b| *b = 7);
            assert!(bytes.iter().all(|&b| b == 7));
        }
    }

    /// The kB of transparent huge pages backing the mapping that holds `address`
    /// (`/proc/self/smaps`).
    #[cfg(target_os = "linux")]
    fn anon_huge_kb(address: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((start, end)) = first.split_once('-')
                && let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
            {
                inside = (start..end).contains(&address);
            } else if inside && let Some(kb) = line.strip_prefix("AnonHugePages:") {
                return kb.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn large_buffers_get_huge_pages_where_the_system_offers_them() {
        let setting = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if !(setting.contains("[always]") || setting.contains("[madvise]")) {
            eprintln!("not checked: transparent huge pages are off here ({:?})", setting.trim());
            return;
        }
        // Four huge pages' worth: the zero-fill faults them in after the advice, so at least one
        // is a huge page unless the kernel found no free 2 MiB of memory at all. (Zeroing first
        // and advising after, as this buffer once did, left every page 4 KB.)
        let bytes = AlignedBytes::zeroed(4 * HUGE_PAGE);
        let huge = anon_huge_kb(bytes.base() as usize).expect("the buffer's mapping in /proc/self/smaps");
        assert!(
            huge >= 2048,
            "a {} MiB buffer has {huge} kB of huge pages (THP setting {:?})",
            (4 * HUGE_PAGE) >> 20,
            setting.trim()
        );
    }
}
