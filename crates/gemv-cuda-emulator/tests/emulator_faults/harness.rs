//! Launching the emulator's test kernels and reading what happened.

use gemv_backend::Error;
use gemv_cuda_emulator::{CudaEmulator, HostLaunch, ThreadOrder};

pub(crate) const M: usize = 1;
pub(crate) const N: usize = 64;
pub(crate) const K: usize = 32;

/// Launches `kernel` on one token `x` of k elements and `packed` weights (n rows; zero scales),
/// y of n elements; returns y.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_token(
    emulator: CudaEmulator,
    kernel: &str,
    grid: u32,
    block: u32,
    x: &[u16],
    packed: &[u8],
    n: usize,
    k: usize,
) -> Result<Vec<u16>, Error> {
    let scales = vec![0u8; n * k / 16];
    let mut y = vec![0u16; n];
    emulator.launch_on_host(HostLaunch {
        kernel,
        grid,
        block,
        x,
        packed,
        scales: &scales,
        y: &mut y,
        global_scale: 1.0,
        m: 1,
        n,
        k,
    })?;
    Ok(y)
}

pub(crate) fn launch_with(kernel: &str, grid: u32, block: u32, order: ThreadOrder) -> Result<Vec<u16>, Error> {
    let x: Vec<u16> = (0..M * K).map(|i| i as u16).collect();
    let packed = vec![0u8; N * K / 2];
    let scales = vec![0u8; N * K / 16];
    let mut y = vec![0u16; M * N];
    CudaEmulator::new().with_thread_order(order).launch_on_host(HostLaunch {
        kernel,
        grid,
        block,
        x: &x,
        packed: &packed,
        scales: &scales,
        y: &mut y,
        global_scale: 1.0,
        m: M,
        n: N,
        k: K,
    })?;
    Ok(y)
}

pub(crate) fn launch(kernel: &str, block: u32) -> Result<Vec<u16>, Error> {
    launch_with(kernel, 2, block, ThreadOrder::Forward)
}

pub(crate) fn fault_message_with(kernel: &str, block: u32, order: ThreadOrder) -> String {
    match launch_with(kernel, 2, block, order) {
        Err(Error::KernelFault { kernel: name, message }) => {
            assert_eq!(name, kernel);
            eprintln!("{kernel} ({order:?}): {message}");
            message
        }
        other => panic!("{kernel}: expected a kernel fault, got {other:?}"),
    }
}

pub(crate) fn fault_message(kernel: &str, block: u32) -> String {
    fault_message_with(kernel, block, ThreadOrder::Forward)
}

pub(crate) fn passes(kernel: &str, block: u32) -> Vec<u16> {
    for order in [ThreadOrder::Forward, ThreadOrder::Reversed] {
        if let Err(error) = launch_with(kernel, 2, block, order) {
            panic!("control kernel {kernel} ({order:?}) must pass: {error}");
        }
    }
    launch(kernel, block).unwrap_or_default()
}

pub(crate) fn run_on(kernel: &str, x: &[u16], m: usize, n: usize, k: usize) -> Vec<u16> {
    assert_eq!(x.len(), m * k);
    let packed = vec![0u8; n * k / 2];
    let scales = vec![0u8; n * k / 16];
    let mut y = vec![0u16; m * n];
    let block = 256;
    let grid = (m * k).div_ceil(block) as u32;
    CudaEmulator::new()
        .launch_on_host(HostLaunch {
            kernel,
            grid,
            block: block as u32,
            x,
            packed: &packed,
            scales: &scales,
            y: &mut y,
            global_scale: 1.0,
            m,
            n,
            k,
        })
        .unwrap_or_else(|error| panic!("{kernel}: {error}"));
    y
}
