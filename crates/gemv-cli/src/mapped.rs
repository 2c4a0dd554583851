//! Checkpoints opened without reading them whole: every safetensors file is memory-mapped, its
//! header validated by the `safetensors` crate (the format's reference implementation: offsets
//! contiguous from 0, no overlap and no gap, covering the data exactly; dtypes and shapes
//! matching the byte counts; metadata of strings only), duplicate names refused, and only the
//! tensors a command asks for are copied out. So `gemv run` on one layer of a many-gigabyte
//! checkpoint reads that layer's bytes, not the file.
//!
//! A sharded checkpoint (a directory holding one `*.safetensors.index.json`, or that index
//! itself) opens as one set of tensors: the index's `weight_map` says which shard holds each
//! name, and every shard it names is opened and validated up front (headers only).

use crate::error::CliError;
use memmap2::Mmap;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// One memory-mapped, validated safetensors file.
struct Shard {
    path: PathBuf,
    map: Mmap,
    /// Where the data section starts in the file.
    data_start: usize,
    metadata: safetensors::tensor::Metadata,
}

/// One file of a checkpoint, as [`MappedCheckpoint::files`] lists it.
pub struct CheckpointFile<'a> {
    /// Its path.
    pub path: &'a Path,
    /// The tensors it holds, sorted.
    pub names: Vec<&'a str>,
    /// Its `__metadata__`.
    pub metadata: Option<&'a HashMap<String, String>>,
}

/// A checkpoint: one safetensors file or a sharded set, tensors copied out on request.
pub struct MappedCheckpoint {
    /// What the user named (file, index or directory), for messages.
    path: PathBuf,
    shards: Vec<Shard>,
    /// Every tensor name and the shard that holds it, sorted by name.
    names: BTreeMap<String, usize>,
}

fn bad(path: &Path, reason: String) -> CliError {
    CliError::BadFile { path: path.to_path_buf(), reason }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::Io { path: path.to_path_buf(), error: e.to_string() }
}

/// Opens `path` only if it is a regular file (a FIFO or a device would block or never end).
fn open_regular(path: &Path) -> Result<std::fs::File, CliError> {
    if !std::fs::metadata(path).map_err(io(path))?.is_file() {
        return Err(bad(path, "not a regular file".into()));
    }
    std::fs::File::open(path).map_err(io(path))
}

/// The header's top-level keys in file order (values skipped), to find duplicates: a JSON
/// object with a repeated key is not a valid safetensors header.
struct HeaderKeys(Vec<String>);

impl<'de> serde::Deserialize<'de> for HeaderKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = HeaderKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<HeaderKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(HeaderKeys(keys))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// Explains the reference implementation's refusal in this tool's words.
fn describe(error: safetensors::SafeTensorError, file_len: usize, header_len: Option<u64>) -> String {
    use safetensors::SafeTensorError as E;
    match error {
        E::HeaderTooSmall => format!("truncated: {file_len} bytes, shorter than the 8-byte header length"),
        E::InvalidHeaderLength => format!(
            "truncated: the header claims {} bytes but the file has {}",
            header_len.unwrap_or(0),
            file_len.saturating_sub(8)
        ),
        E::HeaderTooLarge => format!("the header claims {} bytes, over the format's limit", header_len.unwrap_or(0)),
        E::MetadataIncompleteBuffer => {
            "truncated or padded: the tensors' data_offsets do not end where the file ends".into()
        }
        E::InvalidOffset(name) => format!(
            "tensor {name:?}: its data_offsets overlap another tensor's or leave a gap (each tensor must start \
             where the previous one ends)"
        ),
        E::TensorInvalidInfo => "a tensor's data_offsets do not hold exactly its dtype x shape bytes".into(),
        other => other.to_string(),
    }
}

impl Shard {
    fn open(path: &Path) -> Result<Shard, CliError> {
        let file = open_regular(path)?;
        // SAFETY: the map is read-only and private to this process. Another process truncating
        // or rewriting the file while it is mapped would make reads fault or change under us;
        // checkpoints are not written while being read, the same assumption every safetensors
        // reader that maps files makes.
        let map = unsafe { Mmap::map(&file) }.map_err(io(path))?;
        let header_len = map.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        // Repeated names first: the reference parser keeps the last one and may accept the file.
        let header =
            header_len.and_then(|len| usize::try_from(len).ok()).and_then(|len| map.get(8..8usize.checked_add(len)?));
        if let Some(Ok(HeaderKeys(keys))) = header.map(serde_json::from_slice::<HeaderKeys>) {
            let mut seen = std::collections::HashSet::new();
            if let Some(name) = keys.iter().find(|k| !seen.insert(k.as_str())) {
                return Err(bad(path, format!("the header names {name:?} twice")));
            }
        }
        let (header_size, metadata) =
            safetensors::SafeTensors::read_metadata(&map).map_err(|e| bad(path, describe(e, map.len(), header_len)))?;
        Ok(Shard { path: path.to_path_buf(), map, data_start: 8 + header_size, metadata })
    }

    /// The mapped bytes of a tensor.
    fn data(&self, name: &str) -> Option<(usize, &[u8])> {
        let (begin, end) = self.metadata.info(name)?.data_offsets;
        // Validated by read_metadata: the offsets lie inside the data section.
        Some((self.data_start + begin, self.map.get(self.data_start + begin..self.data_start + end)?))
    }

    /// Hands the pages of `len` bytes at `offset` back once copied, so reading tensor after
    /// tensor of a large file keeps one piece resident, not the file.
    fn release(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        // SAFETY: the map is a read-only private mapping of a file nobody writes (see `open`) and
        // no borrow of these bytes outlives the copy the caller made; dropped pages read back
        // unchanged from the file on the next access.
        let _ = unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
        #[cfg(not(unix))]
        let _ = (offset, len);
    }
}

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(serde::Deserialize)]
struct Index {
    weight_map: HashMap<String, String>,
}

impl MappedCheckpoint {
    /// Opens a safetensors file, a sharded checkpoint's index, or a directory holding one index
    /// (or exactly one safetensors file).
    pub fn open(path: &Path) -> Result<MappedCheckpoint, CliError> {
        let meta = std::fs::metadata(path).map_err(io(path))?;
        if meta.is_dir() {
            return Self::open_directory(path);
        }
        if path.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".index.json")) {
            return Self::open_index(path);
        }
        let shard = Shard::open(path)?;
        let names = shard.metadata.tensors().into_keys().map(|name| (name, 0)).collect();
        Ok(MappedCheckpoint { path: path.to_path_buf(), shards: vec![shard], names })
    }

    fn open_directory(dir: &Path) -> Result<MappedCheckpoint, CliError> {
        let mut indexes = Vec::new();
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".safetensors.index.json") {
                indexes.push(entry.path());
            } else if name.ends_with(".safetensors") {
                files.push(entry.path());
            }
        }
        match (indexes.as_slice(), files.as_slice()) {
            ([index], _) => Self::open_index(index),
            ([], [file]) => Self::open(file),
            ([], []) => Err(bad(dir, "the directory holds no *.safetensors.index.json and no *.safetensors".into())),
            ([], _) => Err(bad(
                dir,
                format!("the directory holds {} safetensors files and no index: name one file", files.len()),
            )),
            (_, _) => Err(bad(dir, format!("the directory holds {} index files: name one", indexes.len()))),
        }
    }

    fn open_index(index_path: &Path) -> Result<MappedCheckpoint, CliError> {
        let file = open_regular(index_path)?;
        let index: Index = serde_json::from_reader(std::io::BufReader::new(file))
            .map_err(|e| bad(index_path, format!("not a safetensors index (a weight_map of names to files): {e}")))?;
        let dir = index_path.parent().unwrap_or(Path::new("."));
        let mut shard_of_file: BTreeMap<&str, usize> = BTreeMap::new();
        for file in index.weight_map.values() {
            // Shards live beside the index: a plain file name, never a path out of the directory.
            let plain = Path::new(file).file_name().is_some_and(|n| n == file.as_str());
            if !plain {
                return Err(bad(index_path, format!("weight_map names {file:?}: shards must be plain file names")));
            }
            let next = shard_of_file.len();
            shard_of_file.entry(file).or_insert(next);
        }
        let mut shards: Vec<Option<Shard>> = (0..shard_of_file.len()).map(|_| None).collect();
        for (file, &i) in &shard_of_file {
            shards[i] = Some(Shard::open(&dir.join(file))?);
        }
        let shards: Vec<Shard> = shards.into_iter().flatten().collect();
        let mut names = BTreeMap::new();
        for (name, file) in &index.weight_map {
            let i = shard_of_file[file.as_str()];
            if shards[i].metadata.info(name).is_none() {
                return Err(bad(index_path, format!("weight_map puts {name:?} in {file}, which holds no such tensor")));
            }
            names.insert(name.clone(), i);
        }
        Ok(MappedCheckpoint { path: index_path.to_path_buf(), shards, names })
    }

    /// What the user named, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a tensor of this name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(String::as_str)
    }

    /// How many tensors.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// A copy of `range` of a tensor's bytes, or None when the tensor or the range is not there.
    pub fn bytes(&self, name: &str, range: std::ops::Range<usize>) -> Option<Vec<u8>> {
        let shard = &self.shards[*self.names.get(name)?];
        let (offset, bytes) = shard.data(name)?;
        let copy = bytes.get(range.clone())?.to_vec();
        shard.release(offset + range.start, copy.len());
        Some(copy)
    }

    /// Hands a tensor's bytes to `each` in pieces of at most `piece` bytes (the last may be
    /// shorter), in order, holding none of them; None when there is no such tensor.
    pub fn for_each_piece(
        &self,
        name: &str,
        piece: usize,
        mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Option<std::io::Result<()>> {
        let shard = &self.shards[*self.names.get(name)?];
        let (offset, bytes) = shard.data(name)?;
        let mut done = 0;
        for chunk in bytes.chunks(piece.max(1)) {
            let result = each(chunk);
            shard.release(offset + done, chunk.len());
            done += chunk.len();
            if result.is_err() {
                return Some(result);
            }
        }
        Some(Ok(()))
    }

    /// A tensor's dtype name, shape and byte count, without reading its bytes.
    pub fn layout(&self, name: &str) -> Option<crate::safetensors::TensorLayout> {
        let info = self.shards[*self.names.get(name)?].metadata.info(name)?;
        Some(crate::safetensors::TensorLayout {
            name: name.to_string(),
            dtype: info.dtype.to_string(),
            shape: info.shape.clone(),
            len: info.data_offsets.1 - info.data_offsets.0,
        })
    }

    /// The file that holds `name` (the shard, for a sharded checkpoint).
    pub fn file_of(&self, name: &str) -> &Path {
        self.names.get(name).map_or(&self.path, |&i| &self.shards[i].path)
    }

    /// The files of the checkpoint in order (one for a single file), each with the names it
    /// holds (sorted) and its `__metadata__`.
    pub fn files(&self) -> Vec<CheckpointFile<'_>> {
        self.shards
            .iter()
            .enumerate()
            .map(|(i, shard)| CheckpointFile {
                path: &shard.path,
                names: self.names.iter().filter(|(_, s)| **s == i).map(|(name, _)| name.as_str()).collect(),
                metadata: shard.metadata.metadata().as_ref(),
            })
            .collect()
    }

    /// `__metadata__` of a single-file checkpoint (string values only, as the format requires).
    pub fn metadata(&self) -> Option<&HashMap<String, String>> {
        match self.shards.as_slice() {
            [shard] => shard.metadata.metadata().as_ref(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activations::locate_activations;
    use crate::checkpoint::locate_weights;

    fn lcg(state: &mut u64) -> u64 {
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *state >> 33
    }

    /// A valid single-file checkpoint: a ModelOpt layer [4, 32] and X [2, 32].
    fn valid_file() -> Vec<u8> {
        let (n, k) = (4usize, 32usize);
        let header = format!(
            r#"{{"__metadata__":{{"format":"pt"}},"w.weight":{{"dtype":"U8","shape":[{n},{}],"data_offsets":[0,{}]}},"w.weight_scale":{{"dtype":"F8_E4M3","shape":[{n},{}],"data_offsets":[{},{}]}},"w.weight_scale_2":{{"dtype":"F32","shape":[],"data_offsets":[{},{}]}},"x":{{"dtype":"BF16","shape":[2,{k}],"data_offsets":[{},{}]}}}}"#,
            k / 2,
            n * k / 2,
            k / 16,
            n * k / 2,
            n * k / 2 + n * k / 16,
            n * k / 2 + n * k / 16,
            n * k / 2 + n * k / 16 + 4,
            n * k / 2 + n * k / 16 + 4,
            n * k / 2 + n * k / 16 + 4 + 4 * k,
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend((0..n * k / 2).map(|i| i as u8));
        bytes.extend(std::iter::repeat_n(0x38u8, n * k / 16));
        bytes.extend(0.5f32.to_le_bytes());
        bytes.extend((0..2 * k).flat_map(|i| (0x3F80u16 + i as u16).to_le_bytes()));
        bytes
    }

    /// Thousands of corrupted files (bytes flipped in the header and the data, digits changed,
    /// truncations, lengths lied about): opening and reading each gives Ok or a typed error,
    /// never a panic. The valid file itself reads back.
    #[test]
    fn corrupted_checkpoints_never_panic() {
        let dir = std::env::temp_dir().join(format!("gemv-mapped-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let valid = valid_file();
        let path = dir.join("case.safetensors");
        std::fs::write(&path, &valid).expect("write");
        let file = MappedCheckpoint::open(&path).expect("the valid file opens");
        let matrix = locate_weights(&file, "w", None).and_then(|w| w.read(&file)).expect("the valid layer reads");
        assert_eq!((matrix.n(), matrix.k()), (4, 32));
        let x = locate_activations(&file, None, 32).expect("x reads");
        assert_eq!((x.m, x.rows(&file, 0..2).expect("rows").len()), (2, 64));

        let header_end = 8 + u64::from_le_bytes(valid[..8].try_into().expect("8 bytes")) as usize;
        let mut state = 0x5eed;
        let (mut opened, mut refused) = (0, 0);
        for case in 0..3000 {
            let mut bytes = valid.clone();
            match case % 5 {
                0 => {
                    let at = lcg(&mut state) as usize % header_end;
                    bytes[at] ^= 1 << (lcg(&mut state) % 8);
                }
                1 => {
                    // A digit of the header replaced by another: shapes and offsets that lie.
                    let digits: Vec<usize> = (8..header_end).filter(|&i| bytes[i].is_ascii_digit()).collect();
                    let at = digits[lcg(&mut state) as usize % digits.len()];
                    bytes[at] = b'0' + (lcg(&mut state) % 10) as u8;
                }
                2 => bytes.truncate(lcg(&mut state) as usize % bytes.len()),
                3 => {
                    let claimed = lcg(&mut state) << (lcg(&mut state) % 32);
                    bytes[..8].copy_from_slice(&claimed.to_le_bytes());
                }
                _ => {
                    let at = header_end + lcg(&mut state) as usize % (bytes.len() - header_end);
                    bytes[at] = lcg(&mut state) as u8;
                }
            }
            std::fs::write(&path, &bytes).expect("write");
            match MappedCheckpoint::open(&path) {
                Ok(file) => {
                    opened += 1;
                    let _ = locate_weights(&file, "w", None).and_then(|w| w.read(&file));
                    for name in [None, Some("w.weight")] {
                        let _ = locate_activations(&file, name, 32).and_then(|x| x.rows(&file, 0..x.m));
                    }
                }
                Err(error) => {
                    refused += 1;
                    assert!(!error.to_string().is_empty());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        // Both outcomes occur: the corruption reaches past the header check and the header check works.
        assert!(opened > 100 && refused > 100, "opened {opened}, refused {refused}");
    }
}
