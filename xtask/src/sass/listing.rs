//! Reading ptxas's and cuobjdump's output: per-kernel resources and the instruction listing.

use std::collections::BTreeMap;

/// Per architecture, per function.
pub type PerArch<T> = BTreeMap<&'static str, BTreeMap<String, T>>;

#[derive(Default, Clone)]
pub struct KernelStats {
    pub registers: u32,
    /// Bytes of registers spilled to local memory (must be 0).
    pub spill_bytes: u32,
    /// Bytes loaded back from spills, or, with no spill stores, read through the call ABI (the
    /// plain fallback path is a called function).
    pub spill_loads: u32,
    pub shared_bytes: u32,
    pub instructions: usize,
}

/// `ptxas -v` stderr -> registers, spill bytes and shared memory per function (entries by name;
/// called device functions under their mangled names).
pub fn parse_ptxas(stderr: &str, stats: &mut BTreeMap<String, KernelStats>) {
    let mut current = String::new();
    for line in stderr.lines() {
        if let Some(rest) =
            line.split("Compiling entry function '").nth(1).or_else(|| line.split("Function properties for ").nth(1))
        {
            current = rest.split(['\'', ' ']).next().unwrap_or_default().trim().to_string();
        } else if line.contains("bytes spill stores") {
            let numbers: Vec<u32> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse().ok()).collect();
            // "N bytes stack frame, S bytes spill stores, L bytes spill loads"
            if let [_, stores, loads, ..] = numbers[..] {
                let entry = stats.entry(current.clone()).or_default();
                entry.spill_bytes = stores;
                entry.spill_loads = loads;
            }
        } else if let Some(rest) = line.split("Used ").nth(1) {
            let entry = stats.entry(current.clone()).or_default();
            entry.registers = rest.split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(0);
            entry.shared_bytes = rest
                .split(", ")
                .find(|part| part.ends_with("bytes smem"))
                .and_then(|part| part.split_whitespace().next()?.parse().ok())
                .unwrap_or(0);
        }
    }
}

/// `cuobjdump -sass` -> (function, [(address, instruction)]).
pub fn functions(sass: &str) -> Vec<(String, Vec<(u64, String)>)> {
    let mut functions: Vec<(String, Vec<(u64, String)>)> = Vec::new();
    for line in sass.lines() {
        if let Some(name) = line.split("Function : ").nth(1) {
            functions.push((name.trim().to_string(), Vec::new()));
            continue;
        }
        let Some((_, rest)) = line.trim_start().split_once("/*") else { continue };
        let Some((address, text)) = rest.split_once("*/") else { continue };
        let (Ok(address), Some(function)) = (u64::from_str_radix(address, 16), functions.last_mut()) else { continue };
        if let Some((instruction, _)) = text.split_once(';') {
            function.1.push((address, instruction.trim().to_string()));
        }
    }
    functions
}

/// Backward branches as (first address, last address) of the loop they close.
pub fn loops(instructions: &[(u64, String)]) -> Vec<(u64, u64)> {
    instructions
        .iter()
        .filter(|(_, text)| text.contains("BRA"))
        .filter_map(|(address, text)| {
            let hex = text.split("0x").nth(1)?;
            let target = u64::from_str_radix(hex.trim_matches(|c: char| !c.is_ascii_hexdigit()), 16).ok()?;
            (target < *address).then_some((target, *address))
        })
        .collect()
}

/// Predicated forward branches as (first, last address) of the instructions they skip.
pub fn skipped_blocks(instructions: &[(u64, String)]) -> Vec<(u64, u64)> {
    instructions
        .iter()
        .enumerate()
        .filter(|(_, (_, text))| text.starts_with('@') && text.contains("BRA"))
        .filter_map(|(index, (address, text))| {
            let hex = text.split("0x").nth(1)?;
            let target = u64::from_str_radix(hex.trim_matches(|c: char| !c.is_ascii_hexdigit()), 16).ok()?;
            let first = instructions.get(index + 1)?.0;
            let last = instructions.iter().take_while(|(a, _)| *a < target).last()?.0;
            (target > *address && first <= last).then_some((first, last))
        })
        .collect()
}
