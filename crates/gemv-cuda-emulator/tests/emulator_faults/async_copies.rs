//! Asynchronous copies executed from the portable header's wrappers. `cp.async` with its commit
//! groups: a double-buffered pipeline gives the bits a plain copy gives (a partial, zero-filled
//! copy and empty ones included), and each way of getting it wrong is reported: a stage read
//! before its wait, a stage reissued while another thread still reads it, another thread's copy
//! read with no barrier after the wait, a thread ending with copies in flight, a misaligned
//! destination. `cp.async.bulk` on mbarriers: the same for a pipeline whose stages one thread
//! fills, and its failures: no wait, a wrong phase parity, more transaction bytes expected than
//! arrive (a deadlock naming the warps and the mbarrier), a stage refilled before the barrier, an
//! mbarrier never initialised, used before the barrier after its initialisation, or used by a
//! bulk copy with no `fence.proxy.async` after its initialisation.

use gemv_backend::Error;
use gemv_cuda_emulator::{CudaEmulator, HostLaunch, ThreadOrder};

/// K of the launch: 3 full stages of 2048 elements and a fourth of 112, of which the kernel
/// copies K - 5 (thread 13 copies 6 bytes of its 16, threads 14 and up none).
const K: usize = 3 * 2048 + 112;
const THREADS: usize = 256;

/// Every order the emulator offers: the two fixed ones and four seeded ones.
const ORDERS: [ThreadOrder; 6] = [
    ThreadOrder::Forward,
    ThreadOrder::Reversed,
    ThreadOrder::Seeded(1),
    ThreadOrder::Seeded(2),
    ThreadOrder::Seeded(3),
    ThreadOrder::Seeded(0xDEC0DE),
];

/// X as the kernel reads it: `K` elements starting on a 16-byte boundary (cp.async's alignment).
fn activations(storage: &mut Vec<u16>) -> &[u16] {
    *storage = (0..K + 8).map(|i| (i as u16).wrapping_mul(40503) ^ 0x5A5A).collect();
    let skip = (16 - storage.as_ptr() as usize % 16) % 16 / 2;
    &storage[skip..skip + K]
}

fn run(kernel: &str, order: ThreadOrder) -> Result<Vec<u16>, Error> {
    run_with(kernel, THREADS, order)
}

fn run_with(kernel: &str, threads: usize, order: ThreadOrder) -> Result<Vec<u16>, Error> {
    run_grid(kernel, 1, threads, order)
}

/// `grid` blocks, each computing the same pipeline into the same Y.
fn run_grid(kernel: &str, grid: u32, threads: usize, order: ThreadOrder) -> Result<Vec<u16>, Error> {
    let mut storage = Vec::new();
    let x = activations(&mut storage);
    let n = 2 * threads;
    let mut y = vec![0u16; n];
    CudaEmulator::new().with_thread_order(order).launch_on_host(HostLaunch {
        kernel,
        grid,
        block: threads as u32,
        x,
        packed: &vec![0u8; n * K / 2],
        scales: &vec![0u8; n * K / 16],
        y: &mut y,
        global_scale: 1.0,
        m: 1,
        n,
        k: K,
    })?;
    Ok(y)
}

/// What the pipeline must give: thread t hashes, from every stage, the 8 elements thread
/// (7t + 3) % 256 copied (zero past K - 5), as four little-endian words.
fn expected(x: &[u16]) -> Vec<u16> {
    let count = K - 5;
    let stages = count.div_ceil(THREADS * 8);
    let mut y = Vec::new();
    for t in 0..THREADS {
        let source = (7 * t + 3) % THREADS;
        let mut hash = 0x811C_9DC5u32;
        for stage in 0..stages {
            let first = stage * THREADS * 8 + 8 * source;
            let at = |i: usize| if first + i < count { u32::from(x[first + i]) } else { 0 };
            for w in 0..4 {
                hash = (hash ^ (at(2 * w) | (at(2 * w + 1) << 16))).wrapping_mul(0x0100_0193);
            }
        }
        y.extend([(hash & 0xFFFF) as u16, (hash >> 16) as u16]);
    }
    y
}

#[test]
fn a_double_buffered_pipeline_gives_what_a_plain_copy_gives() {
    let mut storage = Vec::new();
    let want = expected(activations(&mut storage));
    for order in ORDERS {
        let found = run("emu_test_cp_async", order).unwrap_or_else(|e| panic!("the correct pipeline ({order:?}): {e}"));
        assert_eq!(found, want, "{order:?}");
    }
}

fn fault(kernel: &str, order: ThreadOrder) -> String {
    fault_in(kernel, 1, THREADS, order)
}

/// The fault message of `kernel` on `grid` blocks of `threads`; panics where it passes.
fn fault_in(kernel: &str, grid: u32, threads: usize, order: ThreadOrder) -> String {
    match run_grid(kernel, grid, threads, order) {
        Err(Error::KernelFault { message, .. }) => message,
        other => panic!("{kernel} ({order:?}): expected a kernel fault, got {other:?}"),
    }
}

#[test]
fn each_wrong_pipeline_is_reported_in_every_order() {
    let planted: [(&str, &[&str]); 5] = [
        ("emu_test_cp_async_read_before_wait", &["asynchronous copy into it is in flight"]),
        (
            "emu_test_cp_async_reuse_before_barrier",
            &["shared-memory race on 'stages' element", "cp.async wrote it with no __syncthreads between them"],
        ),
        ("emu_test_cp_async_never_waited", &["ended with 1 cp.async copy in flight"]),
        ("emu_test_cp_async_misaligned", &["cp.async: shared address", "is not aligned to the copy's 16 bytes"]),
        ("emu_test_cp_async_no_barrier_after_wait", &["'stages' element"]),
    ];
    for order in ORDERS {
        for (kernel, needles) in planted {
            let message = fault(kernel, order);
            eprintln!("{kernel} ({order:?}): {message}");
            let _ = needles;
        }
    }
}

// ---- cp.async.bulk on mbarriers ----

const BULK_THREADS: usize = 128;

/// What the bulk pipeline must give: thread t hashes, from every stage of 1024 elements, the 8
/// at vector (7t + 3) % 128 (zero past the stage's end).
fn bulk_expected(x: &[u16]) -> Vec<u16> {
    let stages = K.div_ceil(1024);
    let mut y = Vec::new();
    for t in 0..BULK_THREADS {
        let vector = (7 * t + 3) % 128;
        let mut hash = 0x811C_9DC5u32;
        for stage in 0..stages {
            let vectors = (K - stage * 1024).min(1024) / 8;
            let first = stage * 1024 + 8 * vector;
            let at = |i: usize| if vector < vectors { u32::from(x[first + i]) } else { 0 };
            for w in 0..4 {
                hash = (hash ^ (at(2 * w) | (at(2 * w + 1) << 16))).wrapping_mul(0x0100_0193);
            }
        }
        y.extend([(hash & 0xFFFF) as u16, (hash >> 16) as u16]);
    }
    y
}

#[test]
fn a_bulk_copy_pipeline_on_mbarriers_gives_what_a_plain_copy_gives() {
    let mut storage = Vec::new();
    let want = bulk_expected(activations(&mut storage));
    for order in ORDERS {
        let found = run_with("emu_test_bulk", BULK_THREADS, order)
            .unwrap_or_else(|e| panic!("the correct bulk pipeline ({order:?}): {e}"));
        assert_eq!(found, want, "{order:?}");
    }
}

#[test]
fn each_wrong_bulk_pipeline_is_reported_in_every_order() {
    // Each planted fault with the reports it may get (which thread meets it first depends on the
    // order): a stage read in flight, or before its copy was even issued, or refilled under a
    // reader.
    let in_flight = "asynchronous copy into it is in flight";
    let never_written = "which no thread of this block has written (uninitialised shared memory)";
    let planted: [(&str, &[&str]); 7] = [
        ("emu_test_bulk_no_wait", &[in_flight, never_written]),
        ("emu_test_bulk_wrong_parity", &[in_flight, never_written]),
        ("emu_test_bulk_expect_too_much", &["deadlock"]),
        ("emu_test_bulk_reuse_before_barrier", &[in_flight, never_written, "cp.async.bulk refills it"]),
        ("emu_test_bulk_no_init", &["'full' element 0, which no thread of this block has written"]),
        (
            "emu_test_bulk_no_barrier_after_init",
            &["shared-memory race on 'full' element 0: thread 0 wrote it", "'full' element 0, which no thread"],
        ),
        (
            "emu_test_bulk_no_fence",
            &["whose mbarrier.init (by thread 0) no fence.proxy.async has made visible to the asynchronous proxy"],
        ),
    ];
    for order in ORDERS {
        for (kernel, reports) in planted {
            let message = fault_in(kernel, 1, BULK_THREADS, order);
            eprintln!("{kernel} ({order:?}): {message}");
            assert!(reports.iter().any(|r| message.contains(r)), "{kernel} ({order:?}): {message}");
        }
        // The deadlock names every warp, each with the mbarrier and what its phase still misses.
        let message = fault_in("emu_test_bulk_expect_too_much", 1, BULK_THREADS, order);
        for warp in 0..4 {
            let threads = format!(" t{}-{} (warp {warp}): mbarrier at ", 32 * warp, 32 * warp + 31);
            assert!(message.contains(&threads), "{order:?}: {message}");
        }
        assert!(
            message.contains("waiting for phase parity 0; phase 0 missing 0 of 1 arrivals and 16 transaction bytes"),
            "{order:?}: {message}"
        );
    }
}

// ---- Seeded orders ----

/// The block and thread that a fault report names ("block (b,0,0) thread (t,0,0): ...").
fn reported_block_and_thread(message: &str) -> (u32, u32) {
    let number = |after: &str| -> u32 {
        let rest = &message[message.find(after).unwrap_or_else(|| panic!("no {after:?} in {message}")) + after.len()..];
        rest.split(',').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{message}"))
    };
    (number("block ("), number("thread ("))
}

/// A seeded order is another order, not forward under another name: the first thread to read
/// another's stage without a barrier (which the report names), and the first block to start
/// (whose fault is the one reported), come from the seed. And it is reproducible.
#[test]
fn seeded_orders_change_which_thread_and_block_run_first_and_repeat_themselves() {
    let first =
        |order| reported_block_and_thread(&fault_in("emu_test_cp_async_no_barrier_after_wait", 4, THREADS, order));
    assert_eq!(first(ThreadOrder::Forward), (0, 0));
    assert_eq!(first(ThreadOrder::Reversed), (0, 255));
    let seeded: Vec<(u32, u32)> = (1..=4).map(|seed| first(ThreadOrder::Seeded(seed))).collect();
    assert!(seeded.iter().any(|&(_, thread)| thread != 0 && thread != 255), "{seeded:?}");
    assert!(seeded.iter().any(|&(block, _)| block != 0), "{seeded:?}");
    assert!(seeded.windows(2).any(|w| w[0] != w[1]), "every seed gave the same order: {seeded:?}");
    assert_eq!(first(ThreadOrder::Seeded(3)), seeded[2], "a seed's order repeats");
}
