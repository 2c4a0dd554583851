//! A routed layer's routing from a checkpoint file: an integer tensor `[..., top_k]` of expert
//! ids (I64, I32, U32, I16 or U8, as a router's top-k writes them), one row per token of X, read
//! whole and checked: every id in 0..E (a negative or too-large id names its token and slot).

use crate::checkpoint::header;
use crate::error::CliError;
use crate::mapped::MappedCheckpoint;

/// The routing, validated against M tokens and E experts: ids `[M][top_k]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingTensor {
    /// The tensor's name.
    pub name: String,
    /// Slots per token.
    pub top_k: usize,
    /// The ids, token after token.
    pub ids: Vec<u32>,
}

/// One little-endian id's value.
type Decode = fn(&[u8]) -> i128;

/// Bytes per id, and how to read one, for the integer dtypes a routing may use.
fn integer_dtype(dtype: &str) -> Option<(usize, Decode)> {
    Some(match dtype {
        "I64" => (8, |b| i64::from_le_bytes(b.try_into().expect("8 bytes")) as i128),
        "I32" => (4, |b| i32::from_le_bytes(b.try_into().expect("4 bytes")) as i128),
        "U32" => (4, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as i128),
        "I16" => (2, |b| i16::from_le_bytes(b.try_into().expect("2 bytes")) as i128),
        "U8" => (1, |b| b[0] as i128),
        _ => return None,
    })
}

/// Reads routing tensor `name` (default: `routing`, or the file's only tensor) for `m` tokens of
/// a layer of `experts` experts.
pub fn read_routing(
    file: &MappedCheckpoint,
    name: Option<&str>,
    m: usize,
    experts: usize,
) -> Result<RoutingTensor, CliError> {
    let name = match name {
        Some(name) => name.to_string(),
        None if file.contains("routing") || file.len() != 1 => "routing".to_string(),
        None => file.names().next().unwrap_or("routing").to_string(),
    };
    let path = file.file_of(&name).to_path_buf();
    let tensor = header(file, &name, "the routing [M, top_k]; --routing-name names another")?;
    let layout = file.layout(&name).ok_or_else(|| CliError::Io {
        path: path.clone(),
        error: format!("tensor {name:?} could not be read (the file changed while open?)"),
    })?;
    let expected = format!("an integer tensor (I64, I32, U32, I16 or U8) [{m}, top_k] or [..., top_k] with {m} rows");
    let bad = |found: String| CliError::BadTensor {
        path: path.clone(),
        name: name.clone(),
        expected: expected.clone(),
        found,
    };
    let (width, value) =
        integer_dtype(&layout.dtype).ok_or_else(|| bad(format!("{} {:?}", layout.dtype, tensor.shape)))?;
    let Some((&top_k, leading)) = tensor.shape.split_last() else {
        return Err(bad(format!("a scalar {:?}", tensor.shape)));
    };
    if top_k == 0 || leading.iter().product::<usize>() != m {
        return Err(bad(format!("{} {:?}", layout.dtype, tensor.shape)));
    }
    let bytes = file.bytes(&name, 0..m * top_k * width).ok_or_else(|| bad("fewer bytes than its shape".into()))?;
    let ids = bytes
        .chunks_exact(width)
        .enumerate()
        .map(|(p, id)| {
            let id = value(id);
            u32::try_from(id).ok().filter(|&id| (id as usize) < experts).ok_or_else(|| {
                bad(format!(
                    "token {} slot {} names expert {id}, but the layer has {experts} experts",
                    p / top_k,
                    p % top_k
                ))
            })
        })
        .collect::<Result<Vec<u32>, CliError>>()?;
    Ok(RoutingTensor { name, top_k, ids })
}
