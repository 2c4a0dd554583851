//! The bench's memory, checked before anything is allocated: a shape or `--cold-mb` the machine
//! cannot hold is a clear error, not an allocation failure that aborts the process (a Rust
//! allocation failure aborts; on Linux an overcommitted one is killed later instead).

use crate::error::CliError;
use gemv_backend::{DeviceInfo, DeviceKind};

/// What the bench would allocate for one shape, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchMemory {
    /// The host copy of the weights and activations the bench builds before uploading.
    pub host: u64,
    /// The cold weight copies plus X and Y on the device.
    pub device: u64,
}

/// The bytes of one NVFP4 matrix (packed nibbles plus one scale byte per 16 weights).
fn weight_bytes(n: u64, k: u64) -> Option<u64> {
    let weights = n.checked_mul(k)?;
    Some(weights / 2 + weights / 16)
}

/// How many weight copies the bench rotates through: enough to fill `cold_bytes`, at least one.
/// The protocol allocates exactly this many, so the check and the allocation agree.
pub fn cold_copies(weight_bytes: u64, cold_bytes: u64) -> u64 {
    cold_bytes.div_ceil(weight_bytes.max(1)).max(1)
}

/// What one shape needs, or None when it does not even fit in 64 bits.
pub fn needed(n: usize, k: usize, max_m: usize, cold_bytes: usize) -> Option<BenchMemory> {
    let (n, k, m) = (n as u64, k as u64, max_m as u64);
    let weights = weight_bytes(n, k)?;
    let activations = m.checked_mul(n.checked_add(k)?)?.checked_mul(2)?;
    let copies = cold_copies(weights, cold_bytes as u64);
    Some(BenchMemory {
        host: weights.checked_add(activations)?,
        device: copies.checked_mul(weights)?.checked_add(activations)?,
    })
}

/// Refuses a shape whose bench would not fit: the host copy always lives in host memory, and so
/// do the device buffers of every backend that is not a real GPU (the CPU, the host reference,
/// the emulator, a software rasteriser). On a GPU the driver refuses what it cannot hold with a
/// typed error.
pub fn check(
    info: &DeviceInfo,
    label: &str,
    n: usize,
    k: usize,
    max_m: usize,
    cold_bytes: usize,
) -> Result<(), CliError> {
    let need = needed(n, k, max_m, cold_bytes).ok_or_else(|| {
        CliError::Usage(format!(
            "shape {label} (N = {n}, K = {k}) at M = {max_m}: the memory it needs overflows 64 bits"
        ))
    })?;
    let Some(available) = crate::resources::available_memory() else {
        tracing::debug!("no MemAvailable: the bench's memory is not checked");
        return Ok(());
    };
    check_against(info.kind, label, need, available)
}

/// Copies of the device buffers the CPU backend holds: the raw bytes and its own arrangement of
/// each weight copy (made at the first launch over it), and with the ggml peer rows built in,
/// ggml's three formats of the same cold size.
const CPU_DEVICE_COPIES: u64 = if cfg!(feature = "ggml-peer") { 5 } else { 2 };

/// [`check`] with the available memory given.
pub fn check_against(kind: DeviceKind, label: &str, need: BenchMemory, available: u64) -> Result<(), CliError> {
    let device = if kind == DeviceKind::Cpu { need.device.saturating_mul(CPU_DEVICE_COPIES) } else { need.device };
    let host = if kind == DeviceKind::Gpu { need.host } else { need.host.saturating_add(device) };
    if host > available {
        let what = format!(
            "shape {label}: the bench ({} of weights and activations{}; use a smaller --shape, --m or --cold-mb)",
            crate::error::size(need.host),
            if kind == DeviceKind::Gpu {
                String::new()
            } else {
                format!(", {} of device buffers in host memory", crate::error::size(device))
            },
        );
        return Err(CliError::NotEnoughMemory { what, needed: host, available });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_bench_fits_and_a_huge_shape_is_refused_before_allocating() {
        // qkv/o at M = 8 with 256 MiB of cold copies: 14,745,600 bytes per copy, 19 copies.
        let need = needed(5120, 5120, 8, 256 << 20).expect("fits in 64 bits");
        assert_eq!(need.host, 5120 * 5120 / 2 + 5120 * 5120 / 16 + 8 * 10240 * 2);
        assert_eq!(need.device, 19 * (5120 * 5120 / 2 + 5120 * 5120 / 16) + 8 * 10240 * 2);
        assert!(check_against(DeviceKind::Cpu, "qkv/o", need, 8 << 30).is_ok());

        let huge = needed(1_000_000, 1_000_000, 1, 256 << 20).expect("fits in 64 bits");
        let refused = |kind| check_against(kind, "1000000x1000000", huge, 8 << 30).expect_err("refused");
        let error = refused(DeviceKind::Reference);
        assert!(
            matches!(error, CliError::NotEnoughMemory { needed, available: 0x2_0000_0000, .. } if needed == huge.host + huge.device)
        );
        let error = error.to_string();
        assert!(error.contains("of memory and 8.0 GiB is available"), "{error}");
        // The CPU backend also holds its arrangement of every copy.
        let cpu = refused(DeviceKind::Cpu);
        assert!(
            matches!(cpu, CliError::NotEnoughMemory { needed, .. } if needed == huge.host + huge.device * CPU_DEVICE_COPIES)
        );
        let twice = need.host + 2 * need.device;
        assert!(check_against(DeviceKind::Cpu, "qkv/o", need, twice - 1).is_err() || CPU_DEVICE_COPIES < 2);
        assert!(check_against(DeviceKind::Reference, "qkv/o", need, twice - 1).is_ok());
        // On a GPU only the host copy counts against host memory.
        let gpu = refused(DeviceKind::Gpu);
        assert!(matches!(gpu, CliError::NotEnoughMemory { needed, .. } if needed == huge.host), "{gpu}");
        assert!(!gpu.to_string().contains("device buffers"), "{gpu}");
        assert!(check_against(DeviceKind::Gpu, "qkv/o", need, 100 << 20).is_ok());

        assert_eq!(needed(usize::MAX, 16, 1, 0), None);
    }
}
