//! What the integration tests share: an independent safetensors writer (so the tests do not
//! trust the code under test), sparse files for sizes no disk holds, scratch directories.

#![allow(dead_code)]

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

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
