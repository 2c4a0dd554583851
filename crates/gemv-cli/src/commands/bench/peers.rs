//! Peers timed in the rotation beside the kernels: on the CPU backend, ggml's 4-bit matrix
//! multiply (llama.cpp's CPU kernels) in the layouts llama.cpp runs by default, built in with the
//! `ggml-peer` feature (`cargo xtask ggml-bench` builds and runs it).

use super::moe::{MoePeer, MoeShape};
use super::rotation_peer::RotationPeer;
use gemv_backend::{DeviceInfo, DeviceKind};

/// What a CPU bench says where the ggml peers are not built in.
#[cfg(not(feature = "ggml-peer"))]
const NOT_BUILT_IN: &str = "no ggml peer rows: this gemv was built without the ggml-peer feature (`cargo xtask \
                            ggml-bench` builds llama.cpp's CPU kernels in and runs the bench with them)";

/// The rotation peers of a backend on shape `n x k` at every M of `ms` (weight copies filling
/// `cold_bytes`, `threads` threads like the backend's), and a note when a peer the backend would
/// have is not built in.
pub fn for_backend(
    info: &DeviceInfo,
    n: usize,
    k: usize,
    ms: &[usize],
    cold_bytes: usize,
    threads: usize,
    notes: &mut Vec<String>,
) -> Vec<Box<dyn RotationPeer>> {
    if info.kind != DeviceKind::Cpu {
        return Vec::new();
    }
    #[cfg(feature = "ggml-peer")]
    {
        match super::ggml::peers(n, k, ms, cold_bytes, threads) {
            Ok((peers, about)) => {
                notes.push(about);
                peers
            }
            Err(error) => {
                notes.push(format!("no ggml peer rows: {error}"));
                Vec::new()
            }
        }
    }
    #[cfg(not(feature = "ggml-peer"))]
    {
        let _ = (n, k, ms, cold_bytes, threads);
        notes.push(NOT_BUILT_IN.into());
        Vec::new()
    }
}

/// The peers of a backend's `--moe` layer `shape` (on `threads` threads like the backend's), and a
/// note when a peer the backend would have is not built in.
pub fn for_moe(info: &DeviceInfo, shape: &MoeShape, threads: usize, notes: &mut Vec<String>) -> Vec<Box<dyn MoePeer>> {
    if info.kind != DeviceKind::Cpu {
        return Vec::new();
    }
    #[cfg(feature = "ggml-peer")]
    {
        match super::ggml_moe::peers(shape, threads) {
            Ok((peers, about)) => {
                notes.push(about);
                peers
            }
            Err(error) => {
                notes.push(format!("no ggml peer arms: {error}"));
                Vec::new()
            }
        }
    }
    #[cfg(not(feature = "ggml-peer"))]
    {
        let _ = (shape, threads);
        notes.push(NOT_BUILT_IN.into());
        Vec::new()
    }
}
