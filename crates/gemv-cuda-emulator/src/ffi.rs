//! The C interface of runtime/emulator.h.

use std::ffi::{c_char, c_int, c_uint, c_void};

#[repr(C)]
pub struct EmuKernel {
    _name: *const c_char,
    _entry: *const c_void,
    _max_threads: c_uint,
    _grouped_entry: *const c_void,
}

#[repr(C)]
pub struct EmuArgs {
    pub x: *const u16,
    pub packed: *const u8,
    pub scales: *const u8,
    pub y: *mut u16,
    pub global_scale: f32,
    pub m: c_int,
    pub n: c_int,
    pub k: c_int,
    pub x_stride: c_int,
    pub y_stride: c_int,
    pub y_f32: c_int,
    pub global_scales: *const f32,
    pub per_expert_scales: c_int,
    pub routing: *const u32,
    pub experts: c_int,
    pub pairs: c_int,
    pub top_k: c_int,
}

#[repr(C)]
pub struct EmuRegion {
    pub name: *const c_char,
    pub base: *const c_void,
    pub len: usize,
    pub writable: c_int,
}

/// `EMU_ACCESS_WIDTHS` of emulator.h: `1 << w` bytes in slot `w`, 1 to 16 bytes.
pub const ACCESS_WIDTHS: usize = 5;
/// `EMU_COUNTED_REGIONS` of emulator.h.
pub const COUNTED_REGIONS: usize = 4;

#[repr(C)]
#[derive(Default)]
pub struct EmuCounts {
    pub fallback_blocks: u64,
    pub loads: [[u64; ACCESS_WIDTHS]; COUNTED_REGIONS],
    pub stores: [[u64; ACCESS_WIDTHS]; COUNTED_REGIONS],
}

unsafe extern "C" {
    pub fn gemv_emu_find(name: *const c_char) -> *const EmuKernel;
    pub fn gemv_emu_launch_bound(kernel: *const EmuKernel) -> c_uint;
    pub fn gemv_emu_check_asm(error: *mut c_char, error_len: usize) -> c_int;
    pub fn gemv_emu_launch(
        kernel: *const EmuKernel,
        grid_x: c_uint,
        block_x: c_uint,
        args: *const EmuArgs,
        regions: *const EmuRegion,
        region_count: c_int,
        workers: c_int,
        reversed: c_int,
        seed: u64,
        dependent: c_int,
        grid_ends: c_uint,
        counts: *mut EmuCounts,
        error: *mut c_char,
        error_len: usize,
    ) -> c_int;
}
