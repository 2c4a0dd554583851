//! `gemv run --routing`: a routed mixture-of-experts layer from a checkpoint, every token of X
//! through the experts its row of the routing names, in grouped launches (each touched expert's
//! weights read once per launch). The experts are a 3-D tensor `[E, N, K/2]` or per-expert
//! tensors named by a pattern holding `{i}` (ModelOpt's and compressed-tensors' per-expert
//! exports, e.g. `model.layers.3.mlp.experts.{i}.down_proj`). Y is `[..., top_k, N]`.

use super::run::{PIECE_BYTES, RunOptions, host_copies, output_len, write_y};
use crate::activations::locate_activations;
use crate::backends::open;
use crate::checkpoint::{WeightsLocation, expert_count, locate_weights};
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;
use crate::routing::read_routing;
use gemv_backend::{DeviceExperts, GpuBackend, ResolvedTiers};
use gemv_core::{FamilyChoice, GroupedCall, KillSwitches, MAX_GROUPED_PAIRS, Nvfp4Experts};
use std::io::Write;
use std::path::Path;

/// Whether the checkpoint holds a layer named `name` (a prefix or the weight tensor's own name).
fn has_layer(file: &MappedCheckpoint, name: &str) -> bool {
    [format!("{name}.weight"), format!("{name}.weight_packed"), name.to_string()].iter().any(|n| file.contains(n))
}

/// Every expert of the layer `pattern` names: per-expert tensors (`{i}` = 0, 1, ... while they
/// exist) or the experts of one 3-D tensor. Reads no weight bytes.
fn locate_experts(file: &MappedCheckpoint, pattern: &str) -> Result<Vec<WeightsLocation>, CliError> {
    let bad = |reason: String| CliError::BadArgument { argument: "--name", reason };
    let experts = if pattern.contains("{i}") {
        let mut experts = Vec::new();
        while has_layer(file, &pattern.replace("{i}", &experts.len().to_string())) {
            experts.push(locate_weights(file, &pattern.replace("{i}", &experts.len().to_string()), None)?);
        }
        if experts.is_empty() {
            return Err(bad(format!("no layer matches {pattern:?} with {{i}} = 0")));
        }
        experts
    } else {
        match expert_count(file, pattern)? {
            Some(count) => (0..count).map(|e| locate_weights(file, pattern, Some(e))).collect::<Result<_, _>>()?,
            None => {
                return Err(bad(format!(
                    "{pattern:?} is a 2-D weight: a routed layer needs a 3-D expert tensor [E, N, K/2] or per-expert \
                     tensors named with {{i}}"
                )));
            }
        }
    };
    let (n, k) = (experts[0].n, experts[0].k);
    if let Some((i, other)) = experts.iter().enumerate().find(|(_, e)| (e.n, e.k) != (n, k)) {
        return Err(bad(format!(
            "expert {i} is {} x {}, expert 0 {n} x {k}: every expert needs one shape",
            other.n, other.k
        )));
    }
    Ok(experts)
}

/// Runs the routed layer; returns a one-line summary.
pub fn run_routed(options: &RunOptions, routing_path: &Path) -> Result<String, CliError> {
    crate::safetensors::check_tensor_name("--output-name", &options.output_name)?;
    crate::safetensors::check_output_path(&options.output)?;
    if options.expert.is_some() {
        let reason = "a routed layer runs the experts its routing names; drop --expert".to_string();
        return Err(CliError::BadArgument { argument: "--expert", reason });
    }
    let weights_file = MappedCheckpoint::open(&options.weights)?;
    let locations = locate_experts(&weights_file, &options.name)?;
    let (n, k, layout, experts) = (locations[0].n, locations[0].k, locations[0].layout, locations.len());
    let input_file = MappedCheckpoint::open(&options.input)?;
    let x = locate_activations(&input_file, options.input_name.as_deref(), k)?;
    let m = x.m;
    let routing_file = MappedCheckpoint::open(routing_path)?;
    let routing = read_routing(&routing_file, options.routing_name.as_deref(), m, experts)?;
    let top_k = routing.top_k;
    let mut shape = x.leading.clone();
    shape.extend([top_k, n]);
    let y_len = output_len(options, &shape)?;
    let backend = open(options.backend).map_err(CliError::BackendUnavailable)?;
    // Pieces of tokens: X and Y bounded, and at most MAX_GROUPED_PAIRS pairs a launch.
    let rows_per_piece = (PIECE_BYTES / (4 * (top_k * n).max(k))).min(MAX_GROUPED_PAIRS / top_k).clamp(1, m);
    let piece_bytes = (rows_per_piece as u64) * ((top_k * n).max(k) as u64) * 4;
    // The checkpoint's copy, the stack and the backend's.
    let weight_bytes = locations[0]
        .bytes()
        .and_then(|w| w.checked_mul(experts as u64)?.checked_mul(1 + host_copies(backend.device_info().kind)));
    crate::resources::check_memory(
        || format!("layer {:?} ({experts} experts of N = {n}, K = {k}) on backend {}", options.name, backend.name()),
        weight_bytes.and_then(|w| w.checked_add(2 * piece_bytes)),
    )?;
    let matrices = locations.iter().map(|location| location.read(&weights_file)).collect::<Result<Vec<_>, _>>()?;
    let stack = Nvfp4Experts::stack(&matrices).map_err(|error| CliError::BadArgument {
        argument: "--name",
        reason: format!("the experts do not stack: {error}"),
    })?;
    drop(matrices);
    let layer = DeviceExperts::upload(backend.as_ref() as &dyn GpuBackend, &stack.view())?;
    drop(stack);
    let tiers = ResolvedTiers::resolve(backend.as_ref(), KillSwitches::process());
    write_y(options, &shape, y_len, |file| {
        let mut row = 0;
        while row < m {
            let rows = rows_per_piece.min(m - row);
            let bits = x.rows(&input_file, row..row + rows)?;
            let ids = &routing.ids[row * top_k..(row + rows) * top_k];
            let y = layer.call(&tiers, &bits, ids, &GroupedCall::new(rows, top_k).with_family(FamilyChoice::Exact))?;
            file.write_all(bytemuck::cast_slice(&y))
                .map_err(|e| CliError::Io { path: options.output.clone(), error: e.to_string() })?;
            row += rows;
        }
        Ok(())
    })?;
    Ok(format!(
        "wrote {:?} BF16 {shape:?} to {} (X {:?}, M = {m}; routing {:?}, top {top_k}; {layout:?} weights {:?}, \
         {experts} experts of N = {n}, K = {k}, backend {})",
        options.output_name,
        options.output.display(),
        x.name,
        routing.name,
        options.name,
        backend.name()
    ))
}
