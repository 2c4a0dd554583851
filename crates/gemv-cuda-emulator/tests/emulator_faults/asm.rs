//! The PTX executor: every inline-PTX wrapper of the kernels, as the executor runs its text,
//! against the wrapper's C++ oracle; every asm statement of the kernel sources parses; and
//! planted faults inside asm statements (the kind no C++ stand-in could see) are reported.

use crate::harness::{fault_message, launch_with, passes};
use gemv_cuda_emulator::{CudaEmulator, HostLaunch, ThreadOrder};

/// Runs the oracle kernel for wrapper `which` on 2 blocks of 256 threads; y[t] = cases thread t checked.
fn oracle_run(kernel: &str, which: usize) -> Result<Vec<u16>, gemv_backend::Error> {
    let (threads, k) = (512usize, 32usize);
    let x = vec![0u16; which.max(1) * k];
    let mut y = vec![0u16; threads];
    CudaEmulator::new().launch_on_host(HostLaunch {
        kernel,
        grid: 2,
        block: 256,
        x: &x,
        packed: &vec![0u8; threads * k / 2],
        scales: &vec![0u8; threads * k / 16],
        y: &mut y,
        global_scale: 1.0,
        m: which,
        n: threads,
        k,
    })?;
    Ok(y)
}

#[test]
fn every_wrapper_run_by_the_executor_equals_its_oracle() {
    let names = ["prmt", "hmul2", "e4m3x2_to_f16x2", "hmul2_by_lo", "hmul2_by_hi", "half_lo", "half_hi", "bf16x2_mul"];
    for (which, name) in names.iter().enumerate() {
        let checked = oracle_run("emu_test_asm_oracle", which).unwrap_or_else(|e| panic!("gemv_{name}: {e}"));
        let total: u64 = checked.iter().map(|&c| u64::from(c)).sum();
        let expected = if matches!(which, 2 | 5 | 6) { 65_536 } else { 1 << 18 };
        assert_eq!(total, expected, "gemv_{name}: every case checked");
    }
    let rounds = oracle_run("emu_test_asm_oracle_mma", 0).unwrap_or_else(|e| panic!("gemv_mma_bf16_16816: {e}"));
    assert!(rounds.iter().all(|&r| r == 64), "every lane of every warp ran 64 mma rounds");
}

#[test]
fn the_oracle_kernel_reports_a_difference_it_finds() {
    // Wrapper 8 does not exist: the kernel's own failure path, which a difference also takes.
    let error = oracle_run("emu_test_asm_oracle", 8).expect_err("an unknown wrapper must fail");
    assert!(error.to_string().contains("test kernel check failed"), "{error}");
}

#[test]
fn every_asm_statement_of_the_kernel_sources_parses() {
    let count = CudaEmulator::check_inline_ptx().unwrap_or_else(|errors| panic!("{errors}"));
    // The portable header's wrappers: prefetch, prmt, three f16 multiplies, e4m3x2, two
    // half-to-f32, bf16x2 and mma.
    assert!(count >= 10, "found only {count} asm statements");
}

/// (kernel, what its fault message must say)
const PLANTED: [(&str, &str); 10] = [
    ("emu_test_asm_writes_input", "writes input operand %1, which the compiler assumes unchanged"),
    ("emu_test_asm_output_bound_twice", "outputs %1 and %2 are bound to the same object"),
    ("emu_test_asm_output_never_written", "output operand %0 is never written"),
    ("emu_test_asm_reads_output", "reads output operand %0 before writing it"),
    ("emu_test_asm_unknown_instruction", "`add.u32`: instruction not supported by the executor"),
    ("emu_test_asm_unknown_modifier", "`prmt.b32.f4e`: instruction not supported by the executor"),
    ("emu_test_asm_wrong_binding", "operand %1 is bound to a 4-byte float, which constraint 'r' does not take"),
    ("emu_test_asm_wrong_width", "operand 2 (h) is 16 bits, the instruction needs 32"),
    ("emu_test_asm_uninitialised_register", "reads register t before writing it"),
    ("emu_test_asm_out_of_scope", "register `t` is not declared"),
];

#[test]
fn planted_faults_in_asm_statements_are_reported_with_file_line_and_text() {
    for (kernel, expected) in PLANTED {
        let message = fault_message(kernel, 32);
        assert!(message.contains("inline PTX test_asm_kernels.cu:"), "{kernel}: {message}");
        assert!(message.contains(expected), "{kernel}: {message}");
    }
}

#[test]
fn the_planted_faults_are_caught_in_both_thread_orders() {
    for (kernel, _) in PLANTED {
        assert!(launch_with(kernel, 2, 32, ThreadOrder::Reversed).is_err(), "{kernel} (reversed)");
    }
    // Control: a wrapper used correctly in the same kind of kernel passes.
    passes("emu_test_prmt", 32);
}
