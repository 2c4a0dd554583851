//! The exact family's fast path serves ordinary inputs. A block that finds an infinite or NaN
//! output runs again on the plain path, which gives the same bits; so a fault that spoils the
//! fast path everywhere (every staged activation NaN, say) still passes every gate that compares
//! bits. The emulator counts the blocks that take that detour
//! ([`CudaEmulator::fallback_blocks`]): on ordinary data (the conformance suite's weights and
//! activations) no block of any exact kernel, on either build, with X aligned or not, may take
//! it, and one activation that overflows when staged must send blocks there (the control) with
//! the same bits as the host contract.
//!
//! Both X alignments matter: each stages X by its own code (one 16-byte load, or eight 2-byte
//! loads paired by shifts). Mutant #328 of the kernel pass (the odd element's `<< 16` to `<< 17`
//! in the misaligned branch) turns ordinary activations into huge or infinite staged values, so
//! every block it touches reruns on the plain path and the gates, which compare bits, pass; only
//! this count sees it.

use gemv_backend::{DeviceMatrix, GpuBackend, KernelHandle};
use gemv_conformance as conformance;
use gemv_core::codec::f32_to_bf16;
use gemv_core::{Family, KERNELS, MODULE_NAME, Nvfp4Matrix, gemv_contract};
use gemv_cuda::launch::grid_size;
use gemv_cuda_emulator::CudaEmulator;
use gemv_cuda_emulator::DEFAULT_MULTIPROCESSORS;

/// The emulated devices that run each build of the exact family: sm_80 its sm_75 build, sm_90
/// its sm_89 build.
const CAPABILITIES: [(i32, i32); 2] = [(8, 0), (9, 0)];

/// (N, K): an odd N (a warp past the last row), K = 800 (50 groups: one pass, partials in the
/// second half of the 64) and K = 2576 (161 groups: three passes, the last with 33); and N = 1,
/// where every row of the warp but the first is past N and must read row 0, not the row before
/// the matrix (mutant #954, the plain path's `n - 1` to `n - 2`, read out of bounds only there).
const SHAPES: [(usize, usize); 3] = [(37, 800), (21, 2576), (1, 800)];

/// Weights whose scale codes are drawn from all 254 finite E4M3 codes: both signs, zero and
/// subnormals are ordinary data too. (With positive codes only, a sign shifted into the sm_75
/// build's scale table's exponent, which makes every negative scale infinite and sends those
/// blocks to the plain path, would pass: mutant #103 in docs/mutants/w4a16_gemv.tsv.)
fn every_finite_scale_code(n: usize, k: usize) -> Nvfp4Matrix {
    conformance::matrix_with_scales(n, k, 11, conformance::GLOBAL_SCALE, |_, _, rng| {
        let code = rng.next_u32() as u8;
        if code & 0x7F == 0x7F { code ^ 1 } else { code }
    })
}

/// Where X starts in its buffer: 256-byte aligned (the 16-byte loads) and 2 bytes past that
/// (the 2-byte loads; the alignment check reads the address the kernel is given).
const X_OFFSETS: [usize; 2] = [0, 2];

/// One launch of `kernel` with X at byte `x_offset` of its buffer; returns Y.
fn launch_at(
    emulator: &CudaEmulator,
    matrix: &DeviceMatrix<impl gemv_backend::BackendRef>,
    kernel: KernelHandle,
    x: &[u16],
    x_offset: usize,
    m: usize,
) -> gemv_backend::Result<Vec<u16>> {
    let (n, x_bytes) = (matrix.n(), 2 * x.len());
    let x_buffer = emulator.alloc(x_offset + x_bytes)?;
    let y_buffer = emulator.alloc(2 * m * n)?;
    let mut args = matrix.args(x_buffer, y_buffer, 0, m);
    args.x = x_buffer.range(x_offset, x_bytes);
    emulator.upload(args.x, bytemuck::cast_slice(x))?;
    emulator.launch_gemv(kernel, &args)?;
    emulator.synchronize()?;
    let mut y = vec![0u16; m * n];
    emulator.download(y_buffer.whole(), bytemuck::cast_slice_mut(&mut y))?;
    emulator.free(x_buffer)?;
    emulator.free(y_buffer)?;
    Ok(y)
}

/// What one build's launches did: blocks on the plain path, of blocks launched.
struct Fallbacks {
    capability: (i32, i32),
    blocks: u64,
    launched: u64,
}

/// Launches every exact kernel at its widest M and one less on `weights_for(n, k)` and
/// `x_for(m, k)` over every shape and both X alignments, on both builds; checks the bits against
/// the host contract and returns, per build, the fallback blocks counted and the blocks launched.
fn fallback_blocks(
    weights_for: impl Fn(usize, usize) -> Nvfp4Matrix,
    x_for: impl Fn(usize, usize) -> Vec<u16>,
) -> Vec<Fallbacks> {
    CAPABILITIES
        .iter()
        .map(|&capability| {
            let emulator = CudaEmulator::new().with_capability(capability);
            let mut launched = 0;
            for (n, k) in SHAPES {
                let weights = weights_for(n, k);
                let matrix = DeviceMatrix::upload(&emulator, &weights.view())
                    .unwrap_or_else(|e| panic!("sm_{}{}: upload: {e}", capability.0, capability.1));
                for spec in KERNELS.iter().filter(|spec| spec.family == Family::Exact) {
                    let kernel = emulator.lookup_kernel(MODULE_NAME, spec.name);
                    assert!(kernel.is_resolved(), "{} does not resolve on the emulator", spec.name);
                    // The widest M, and one token fewer: tokens past M must not be read.
                    for m in [spec.max_m, spec.max_m - 1].into_iter().filter(|&m| m > 0) {
                        let x = x_for(m, k);
                        let mut expected = vec![0u16; m * n];
                        gemv_contract(&weights.view(), &x, m, &mut expected, 1).expect("host contract");
                        for x_offset in X_OFFSETS {
                            let found = launch_at(&emulator, &matrix, kernel, &x, x_offset, m).unwrap_or_else(|e| {
                                panic!("{} N={n} K={k} M={m} X at byte {x_offset}: {e}", spec.name)
                            });
                            let grid = grid_size("cuda-emu", spec, n, DEFAULT_MULTIPROCESSORS).expect("a small grid");
                            launched += block_rounds_with_rows(spec, n, grid);
                            if let Some(i) = (0..expected.len()).find(|&i| found[i] != expected[i]) {
                                panic!(
                                    "{} on sm_{}{} N={n} K={k} M={m} X at byte {x_offset}: output {i}: expected \
                                     {:#06x}, found {:#06x}",
                                    spec.name, capability.0, capability.1, expected[i], found[i]
                                );
                            }
                        }
                    }
                }
            }
            Fallbacks { capability, blocks: emulator.fallback_blocks(), launched }
        })
        .collect()
}

#[test]
fn ordinary_inputs_never_leave_the_fast_path() {
    for Fallbacks { capability, blocks, .. } in
        fallback_blocks(every_finite_scale_code, |m, k| conformance::activations(m, k, 12))
    {
        eprintln!("sm_{}{}: {blocks} fallback blocks on ordinary data", capability.0, capability.1);
        assert_eq!(
            blocks, 0,
            "sm_{}{}: blocks of ordinary data took the plain path: the fast path gave an infinite or NaN output \
             (the plain path hid it by giving the right bits)",
            capability.0, capability.1
        );
    }
}

/// The control: x = 2^122 overflows when staged (times 2^7 in the sm_75 build, 2^14 in the sm_89
/// build), so every block (each has token 0 of a live row, which reads it) must take the plain
/// path once, and still give the contract's bits. (Counted exactly: mutant #1079, every thread
/// but the first noting the detour, counted each block 255 times.)
#[test]
fn an_activation_that_overflows_when_staged_sends_blocks_to_the_plain_path() {
    let overflowing = |m: usize, k: usize| {
        let mut x = conformance::activations(m, k, 12);
        x[5] = f32_to_bf16(2f32.powi(122));
        x
    };
    every_block_took_the_plain_path_once(fallback_blocks(every_finite_scale_code, overflowing), "x = 2^122");
}

/// The blocks of a launch that compute live rows, counted once per round: a persistent grid's
/// block runs a round per `8 x grid` groups of rows, and a round in which none of its warps has a
/// group stores nothing and cannot detour (warp 0 holds the block's first group of a round).
fn block_rounds_with_rows(spec: &gemv_core::KernelSpec, n: usize, grid: u32) -> u64 {
    let grid = grid as usize;
    if !spec.persistent {
        return grid as u64;
    }
    let groups = n.div_ceil(spec.rows);
    let rounds = groups.div_ceil(8 * grid);
    (0..rounds).map(|round| (0..grid).filter(|&block| block + grid * 8 * round < groups).count() as u64).sum()
}

/// The controls' check: each build counted every block it launched on the plain path, once (a
/// persistent block once per round with rows).
fn every_block_took_the_plain_path_once(fallbacks: Vec<Fallbacks>, cause: &str) {
    for Fallbacks { capability, blocks, launched } in fallbacks {
        eprintln!("sm_{}{}: {blocks} fallback blocks of {launched} with {cause}", capability.0, capability.1);
        assert_eq!(
            blocks, launched,
            "sm_{}{}: {cause} must send every block to the plain path once",
            capability.0, capability.1
        );
    }
}

/// Weights whose first group is 1.0 at k = 5 and k = 6 in every row (E2M1 code 2, scale code
/// 0x38), the rest as `every_finite_scale_code`.
fn equal_weights_at_k5_and_k6(n: usize, k: usize) -> Nvfp4Matrix {
    let random = every_finite_scale_code(n, k);
    let (mut packed, mut scales) = (random.view().packed().to_vec(), random.view().scales().to_vec());
    for row in 0..n {
        let codes = &mut packed[row * k / 2..];
        codes[2] = (codes[2] & 0x0F) | (2 << 4); // k = 5: the high nibble of byte 2
        codes[3] = (codes[3] & 0xF0) | 2; // k = 6: the low nibble of byte 3
        scales[row * (k / 16)] = 0x38;
    }
    Nvfp4Matrix::from_parts(packed, scales, conformance::GLOBAL_SCALE, n, k).expect("the same shape")
}

/// Every output NaN on the fast path, finite in the contract: x = 2^121 and -2^121 at k = 5 and
/// 6, against weights 1.0 there in every row, cancel exactly unscaled but are +inf and -inf once
/// staged, so each of token 0's chains meets inf - inf (a NaN, 0x7FFFFFFF on a GPU and under the
/// emulator) and no output of it is infinite. Every block must still take the plain path.
/// Mutant #1072 (the finiteness mask 0x7F800000 to 0x7F800001) calls 0x7FFFFFFF finite and
/// stores NaN here; with x86's NaN (0xFFC00000) it passed.
#[test]
fn outputs_that_are_nan_only_when_staged_send_blocks_to_the_plain_path() {
    let cancelling = |m: usize, k: usize| {
        let mut x = conformance::activations(m, k, 12);
        x[5] = f32_to_bf16(2f32.powi(121));
        x[6] = f32_to_bf16(-(2f32.powi(121)));
        x
    };
    every_block_took_the_plain_path_once(
        fallback_blocks(equal_weights_at_k5_and_k6, cancelling),
        "x = +-2^121 (NaN outputs once staged)",
    );
}
