//! Grid-level primitives executed from the portable header's wrappers: programmatic dependent
//! launch (X read and Y written only after `griddepcontrol.wait`, weights before it), global
//! atomics (a persistent grid's tickets under every block order) and `elect.sync`.

use gemv_backend::Error;
use gemv_cuda_emulator::{CudaEmulator, HostLaunch, ThreadOrder};

/// Runs `kernel` on `grid` blocks of 256 threads over X = 0, 1, ..., packed = 3, 4, ...; returns Y.
fn run(kernel: &str, grid: u32, emulator: CudaEmulator) -> Result<Vec<u16>, Error> {
    let (n, k) = (512, 256);
    let x: Vec<u16> = (0..k as u16).collect();
    let packed: Vec<u8> = (0..n * k / 2).map(|i| (i % 251 + 3) as u8).collect();
    let mut y = vec![0u16; n];
    assert_eq!(y.as_ptr() as usize % 4, 0, "the tickets read Y as u32 words");
    emulator.launch_on_host(HostLaunch {
        kernel,
        grid,
        block: 256,
        x: &x,
        packed: &packed,
        scales: &vec![0u8; n * k / 16],
        y: &mut y,
        global_scale: 1.0,
        m: 1,
        n,
        k,
    })?;
    Ok(y)
}

fn fault(kernel: &str, emulator: CudaEmulator) -> String {
    match run(kernel, 1, emulator) {
        Err(Error::KernelFault { message, .. }) => message,
        other => panic!("{kernel}: expected a kernel fault, got {other:?}"),
    }
}

#[test]
fn a_dependent_launch_reads_x_and_writes_y_only_after_its_wait() {
    let dependent = || CudaEmulator::new().with_dependent_launch(true);
    let y = run("emu_test_dependent", 1, dependent()).expect("the wait comes first");
    assert!((0..256).all(|t| y[t] == t as u16 + (t % 251 + 3) as u16), "y = x + packed");
    let message = fault("emu_test_dependent_reads_x_early", dependent());
    assert!(message.contains("read of 'x' before griddepcontrol.wait"), "{message}");
    assert!(message.contains("the previous kernel may still be writing it"), "{message}");
    let message = fault("emu_test_dependent_writes_y_early", dependent());
    assert!(message.contains("write of 'y' before griddepcontrol.wait"), "{message}");
    // Without the launch attribute the wait returns at once and the early accesses are legal.
    run("emu_test_dependent_reads_x_early", 1, CudaEmulator::new()).expect("an ordinary launch");
}

/// Every block takes exactly one ticket whatever the order blocks arrive in, and every thread's
/// reduction counts; the arrival order itself comes from the block order (the seed).
#[test]
fn tickets_are_taken_once_each_in_every_block_order() {
    let grid = 16u32;
    let words = |y: &[u16], i: usize| u32::from(y[2 * i]) | (u32::from(y[2 * i + 1]) << 16);
    let mut arrivals = Vec::new();
    for order in [ThreadOrder::Forward, ThreadOrder::Reversed, ThreadOrder::Seeded(11), ThreadOrder::Seeded(12)] {
        let emulator = CudaEmulator::new().with_thread_order(order).with_workers(1);
        let y = run("emu_test_tickets", grid, emulator).unwrap_or_else(|e| panic!("{order:?}: {e}"));
        assert_eq!(words(&y, 0), grid, "{order:?}: tickets taken");
        let mut holders: Vec<u32> = (1..=grid as usize).map(|ticket| words(&y, ticket)).collect();
        arrivals.push(holders.clone());
        holders.sort_unstable();
        assert_eq!(holders, (1..=grid).collect::<Vec<_>>(), "{order:?}: each block holds one ticket");
        assert_eq!(words(&y, grid as usize + 1), 256 * grid, "{order:?}: every thread's reduction");
    }
    assert_eq!(arrivals[0], (1..=grid).collect::<Vec<_>>(), "forward: blocks arrive in index order");
    assert_ne!(arrivals[2], arrivals[0], "a seeded order changes the arrival order");
    assert_ne!(arrivals[3], arrivals[2], "two seeds, two arrival orders");
}

#[test]
fn an_atomic_on_read_only_memory_is_reported() {
    let message = fault("emu_test_atomic_on_x", CudaEmulator::new());
    assert!(message.contains("write of 4 bytes to read-only 'x'"), "{message}");
}

#[test]
fn elect_sync_chooses_one_lane_per_warp_and_needs_the_whole_warp() {
    for order in [ThreadOrder::Forward, ThreadOrder::Reversed, ThreadOrder::Seeded(5)] {
        let y = run("emu_test_elect", 1, CudaEmulator::new().with_thread_order(order)).expect("a full warp elects");
        let word = |i: usize| u32::from(y[2 * i]) | (u32::from(y[2 * i + 1]) << 16);
        assert!((0..8).all(|warp| word(warp) == 1), "{order:?}: lane 0 of every warp elected");
        assert_eq!(word(8), 256, "{order:?}: every lane went through");
    }
    let message = fault("emu_test_elect_divergent", CudaEmulator::new());
    assert!(message.contains("elect.sync"), "{message}");
}

/// `with_grid_ends(e)` runs the first and the last `e` blocks and nothing between, in any block
/// order (the large-weights test relies on it to check a grid's ends alone).
#[test]
fn grid_ends_run_only_the_blocks_at_either_end() {
    let grid = 16u32;
    let words = |y: &[u16], i: usize| u32::from(y[2 * i]) | (u32::from(y[2 * i + 1]) << 16);
    for order in [ThreadOrder::Forward, ThreadOrder::Seeded(3)] {
        let emulator = CudaEmulator::new().with_thread_order(order).with_grid_ends(2);
        let y = run("emu_test_tickets", grid, emulator).unwrap_or_else(|e| panic!("{order:?}: {e}"));
        assert_eq!(words(&y, 0), 4, "{order:?}: four blocks took tickets");
        let mut holders: Vec<u32> = (1..=4).map(|ticket| words(&y, ticket)).collect();
        holders.sort_unstable();
        assert_eq!(holders, [1, 2, 15, 16], "{order:?}: blocks 0, 1, 14 and 15 ran");
        assert_eq!(words(&y, grid as usize + 1), 256 * 4, "{order:?}: only their threads counted");
    }
}
