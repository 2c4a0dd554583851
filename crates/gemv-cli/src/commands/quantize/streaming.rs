//! `gemv quantize`'s writing: which tensors each output file holds, and each tensor streamed a
//! piece of rows at a time (two passes: the largest magnitude for the global scale, then the
//! quantization), with copies streamed the same way.

use super::selection::{PIECE_BYTES, Planned, fused_group};
use crate::commands::progress::progress;
use crate::mapped::MappedCheckpoint;
use crate::safetensors::TensorLayout;
use gemv_core::{global_scale_for_amax, quantize_rows};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;

/// The largest magnitude of each fused group (parent, group), over its members.
pub type GroupAmax = BTreeMap<(String, &'static str), f32>;

/// One output file: its quantized tensors and the tensors it copies.
pub struct Target<'a> {
    /// Its path.
    pub path: PathBuf,
    /// Its `__metadata__`.
    pub metadata: Option<serde_json::Value>,
    /// The tensors it holds quantized.
    pub planned: Vec<&'a Planned>,
    /// The tensors it copies.
    pub copied: Vec<TensorLayout>,
}

impl Target<'_> {
    /// Every tensor of the file as its header lists it: each quantized weight's three parts,
    /// then the copies.
    pub fn layouts(&self) -> Vec<TensorLayout> {
        let mut layouts = Vec::new();
        for plan in &self.planned {
            let (name, n, k) = (&plan.name, plan.n, plan.k);
            layouts.push(TensorLayout {
                name: name.clone(),
                dtype: "U8".into(),
                shape: vec![n, k / 2],
                len: n * k / 2,
            });
            layouts.push(TensorLayout {
                name: format!("{name}_scale"),
                dtype: "F8_E4M3".into(),
                shape: vec![n, k / 16],
                len: n * k / 16,
            });
            layouts.push(TensorLayout { name: format!("{name}_scale_2"), dtype: "F32".into(), shape: vec![], len: 4 });
        }
        layouts.extend(self.copied.iter().cloned());
        layouts
    }
}

/// The largest magnitude of a tensor, read a piece at a time.
pub fn tensor_amax(input: &MappedCheckpoint, plan: &Planned) -> std::io::Result<f32> {
    let mut amax = 0f32;
    input
        .for_each_piece(&plan.name, plan.piece_bytes(), |bytes| {
            stop_if_interrupted()?;
            let values = plan.dtype.floats(bytes).unwrap_or_default();
            amax = values.iter().fold(amax, |acc, v| acc.max(v.abs()));
            Ok(())
        })
        .unwrap_or_else(|| Err(vanished(&plan.name)))?;
    Ok(amax)
}

/// Stops the work between pieces once a signal was noted (see `interrupt.rs`).
fn stop_if_interrupted() -> std::io::Result<()> {
    match crate::interrupt::caught() {
        Some(_) => Err(std::io::ErrorKind::Interrupted.into()),
        None => Ok(()),
    }
}

fn vanished(name: &str) -> std::io::Error {
    std::io::Error::other(format!("tensor {name:?} vanished while reading"))
}

/// Writes one tensor's three parts (packed `[N, K/2]`, scales `[N, K/16]`, global scale) at the
/// file's position, a piece of rows at a time: the packed bytes in order, each piece's scales
/// at their place further on. Returns the global scale.
fn write_quantized(
    input: &MappedCheckpoint,
    plan: &Planned,
    shared_amax: f32,
    file: &mut File,
) -> std::io::Result<f32> {
    let global = global_scale_for_amax(tensor_amax(input, plan)?.max(shared_amax));
    let k = plan.k;
    let scales_start = file.stream_position()? + (plan.n * k / 2) as u64;
    let mut row = 0;
    input
        .for_each_piece(&plan.name, plan.piece_bytes(), |bytes| {
            stop_if_interrupted()?;
            let values = plan.dtype.floats(bytes).unwrap_or_default();
            let (mut packed, mut scales) = (vec![0u8; values.len() / 2], vec![0u8; values.len() / 16]);
            quantize_rows(&values, k, global, &mut packed, &mut scales).map_err(|error| {
                let error = match error {
                    gemv_core::CoreError::NonFiniteWeight { row: r, col, value } => {
                        gemv_core::CoreError::NonFiniteWeight { row: row + r, col, value }
                    }
                    other => other,
                };
                std::io::Error::other(format!("{}: {error}", plan.name))
            })?;
            file.write_all(&packed)?;
            let here = file.stream_position()?;
            file.seek(SeekFrom::Start(scales_start + (row * k / 16) as u64))?;
            file.write_all(&scales)?;
            file.seek(SeekFrom::Start(here))?;
            row += values.len() / k;
            Ok(())
        })
        .unwrap_or_else(|| Err(vanished(&plan.name)))?;
    file.seek(SeekFrom::Start(scales_start + (plan.n * k / 16) as u64))?;
    file.write_all(&global.to_le_bytes())?;
    Ok(global)
}

/// Writes one target's tensors: its quantized weights, streamed, then its copies. Returns their
/// global scales in order.
pub fn fill_target(
    input: &MappedCheckpoint,
    target: &Target,
    group_amax: &GroupAmax,
    done: usize,
    total: usize,
    file: &mut File,
) -> std::io::Result<Vec<f32>> {
    let mut globals = Vec::new();
    for plan in &target.planned {
        let shared = fused_group(&plan.name).and_then(|g| group_amax.get(&g).copied()).unwrap_or(0.0);
        globals.push(write_quantized(input, plan, shared, file)?);
        progress(done + globals.len(), total, "quantize", "tensors");
    }
    for layout in &target.copied {
        input
            .for_each_piece(&layout.name, PIECE_BYTES, |bytes| file.write_all(bytes))
            .unwrap_or_else(|| Err(vanished(&layout.name)))?;
    }
    Ok(globals)
}

/// The index of a sharded output: which file holds each tensor, and the bytes of tensor data.
pub fn index_text(targets: &[Target]) -> String {
    let mut weight_map = serde_json::Map::new();
    let mut total_size = 0usize;
    for target in targets {
        let file = target.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for layout in target.layouts() {
            total_size += layout.len;
            weight_map.insert(layout.name, serde_json::Value::String(file.clone()));
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": total_size}, "weight_map": weight_map});
    serde_json::to_string_pretty(&index).unwrap_or_default() + "\n"
}
