//! What the integration tests share: an independent safetensors writer (so the tests do not
//! trust the code under test), sparse files for sizes no disk holds, scratch directories.

#![allow(dead_code)]

use gemv_core::codec::f32_to_bf16;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The header of a file holding `tensors` (name, dtype, shape, bytes) in order, and where each
/// one's data starts within the data section.
fn header(tensors: &[(&str, &str, Vec<u64>, u64)]) -> (String, Vec<u64>) {
    let mut header = String::from("{");
    let (mut offset, mut starts) = (0u64, Vec::new());
    for (i, (name, dtype, shape, len)) in tensors.iter().enumerate() {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        if i > 0 {
            header.push(',');
        }
        header += &format!(
            r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{offset},{}]}}"#,
            dims.join(","),
            offset + len
        );
        starts.push(offset);
        offset += len;
    }
    header.push('}');
    (header, starts)
}

/// A minimal, independent safetensors writer (so the tests do not trust the code under test).
pub fn write_safetensors(path: &Path, tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) {
    let described: Vec<(&str, &str, Vec<u64>, u64)> = tensors
        .iter()
        .map(|(name, dtype, shape, data)| (*name, *dtype, shape.iter().map(|&d| d as u64).collect(), data.len() as u64))
        .collect();
    let (header, _) = header(&described);
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    for (_, _, _, data) in tensors {
        bytes.extend(data);
    }
    std::fs::write(path, bytes).expect("write fixture");
}

/// A scratch directory, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("gemv-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Dir(dir)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Little-endian f32 bytes.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A safetensors file whose tensors (name, dtype, shape, bytes) are holes: only the header and
/// the `written` tensors' bytes take disk; the rest reads as zeros.
pub fn write_sparse(path: &Path, tensors: &[(&str, &str, Vec<u64>, u64)], written: &[(&str, Vec<u8>)]) {
    let (header, starts) = header(tensors);
    let offset: u64 = tensors.iter().map(|t| t.3).sum();
    let start_of = |name: &str| tensors.iter().position(|t| t.0 == name).map(|i| starts[i]).expect("a listed tensor");
    let mut file = std::fs::File::create(path).expect("sparse fixture");
    file.write_all(&(header.len() as u64).to_le_bytes()).expect("header length");
    file.write_all(header.as_bytes()).expect("header");
    let data_start = 8 + header.len() as u64;
    file.set_len(data_start + offset).expect("a sparse file this large");
    for (name, bytes) in written {
        file.seek(SeekFrom::Start(data_start + start_of(name))).expect("seek");
        file.write_all(bytes).expect("tensor bytes");
    }
}

/// `gemv ARGS`: the exit status and stderr.
pub fn gemv(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_gemv")).args(args).output().expect("gemv runs");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

pub fn bf16_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|&v| f32_to_bf16(v).to_le_bytes()).collect()
}

/// Reads Y back with the independent layout knowledge: header, then the one tensor.
pub fn read_y(path: &Path) -> (String, Vec<u16>) {
    let bytes = std::fs::read(path).expect("output exists");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header = String::from_utf8(bytes[8..8 + header_len].to_vec()).expect("utf-8 header");
    let data = &bytes[8 + header_len..];
    (header, data.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect())
}

pub const N: usize = 24;
pub const K: usize = 48;

pub fn weights() -> Vec<f32> {
    (0..N * K).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect()
}

pub fn activations(m: usize) -> Vec<f32> {
    (0..m * K).map(|i| ((i * 13 % 29) as f32 - 14.0) / 8.0).collect()
}

/// `gemv run` on the host backend.
pub fn run_args(weights: &Path, name: &str, x: &Path, out: &str) -> Vec<String> {
    let (weights, x) = (weights.to_string_lossy(), x.to_string_lossy());
    ["run", "--weights", &weights, "--name", name, "--input", &x, "--output", out, "--backend", "host"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Runs `gemv run` on the host and returns Y's header and bits.
pub fn run_ok(
    weights: &Path,
    name: &str,
    x: &Path,
    out: &Path,
    input_name: Option<&str>,
) -> (serde_json::Value, Vec<u16>) {
    let mut args = run_args(weights, name, x, out.to_str().unwrap());
    if let Some(input_name) = input_name {
        args.extend(["--input-name".to_string(), input_name.to_string()]);
    }
    let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{args:?}: {stderr}");
    let (header, bits) = read_y(out);
    (serde_json::from_str(&header).expect("JSON header"), bits)
}
