//! `gemv quantize` against NVIDIA ModelOpt's own NVFP4 export, byte for byte.
//!
//! `tests/fixtures/modelopt/` holds a small model (`input.safetensors`: fused q/k/v and gate/up
//! of different magnitudes, BF16, F16 and F32 weights, projections full of edge cases, a norm,
//! the embeddings and the head) and what nvidia-modelopt 0.47 (torch 2.9.1) exports for it
//! (`expected.safetensors`), both written by `xtask/scripts/modelopt_fixture.py`
//! (`cargo xtask fixtures --modelopt`). The edge cases: all-zero blocks (scale 1.0), negative
//! zeros (positive code), blocks far below the maximum (scale clamped to 2^-9), E4M3-subnormal
//! scales, tiny negative values rounding to a signed zero, E2M1 ties, one-value blocks. Beside
//! them, `quantization_config.json`: what ModelOpt's converter puts into `config.json` for a
//! weight-only NVFP4 model.

use safetensors::SafeTensors;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/modelopt").join(name)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn quantize_matches_modelopt_export_byte_for_byte() {
    let dir = std::env::temp_dir().join(format!("gemv-modelopt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let output = dir.join("nvfp4.safetensors");
    let run = Command::new(env!("CARGO_BIN_EXE_gemv"))
        .args(["quantize", "--input"])
        .arg(fixture("input.safetensors"))
        .arg("--output")
        .arg(&output)
        .output()
        .expect("gemv runs");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));

    let (input_bytes, expected_bytes, found_bytes) =
        (read(&fixture("input.safetensors")), read(&fixture("expected.safetensors")), read(&output));
    let _ = std::fs::remove_dir_all(&dir);
    let input = SafeTensors::deserialize(&input_bytes).expect("input fixture");
    let expected = SafeTensors::deserialize(&expected_bytes).expect("expected fixture");
    let found = SafeTensors::deserialize(&found_bytes).expect("our output reads back");

    let mut mismatches = Vec::new();
    for (name, want) in expected.tensors() {
        let got = found.tensor(&name).unwrap_or_else(|_| panic!("{name} missing from our output"));
        assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()), "{name}");
        for (i, (a, b)) in want.data().iter().zip(got.data()).enumerate() {
            if a != b {
                mismatches.push(format!("{name} byte {i}: ModelOpt {a:#04x}, gemv {b:#04x}"));
            }
        }
    }
    assert!(mismatches.is_empty(), "{} bytes differ:\n{}", mismatches.len(), mismatches.join("\n"));

    // Every input tensor ModelOpt leaves alone (norm, embeddings, head) is copied unchanged.
    let quantized: Vec<String> = expected.names().into_iter().map(String::from).collect();
    for (name, tensor) in input.tensors() {
        if quantized.contains(&name) {
            continue;
        }
        let copy = found.tensor(&name).unwrap_or_else(|_| panic!("{name} not copied"));
        assert_eq!(
            (copy.dtype(), copy.shape(), copy.data()),
            (tensor.dtype(), tensor.shape(), tensor.data()),
            "{name}"
        );
    }
    assert_eq!(
        found.len(),
        input.len() + 2 * quantized.len() / 3,
        "the quantized weights and the copies, nothing else"
    );
}

/// A directory output with `--hf-quant-config` gets the model's `config.json` with the
/// `quantization_config` ModelOpt's export writes for a weight-only NVFP4 model (fixture from
/// ModelOpt's own converter), everything else in the config kept.
#[test]
fn the_serving_config_is_modelopts_for_weight_only_nvfp4() {
    let dir = std::env::temp_dir().join(format!("gemv-modelopt-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let model = dir.join("model");
    std::fs::create_dir_all(&model).expect("temp dir");
    std::fs::copy(fixture("input.safetensors"), model.join("model.safetensors")).expect("copy");
    std::fs::write(model.join("config.json"), r#"{"model_type": "llama", "hidden_size": 64}"#).expect("config");
    let output = dir.join("nvfp4");
    let run = Command::new(env!("CARGO_BIN_EXE_gemv"))
        .args(["quantize", "--hf-quant-config", "--input"])
        .arg(&model)
        .arg("--output")
        .arg(&output)
        .output()
        .expect("gemv runs");
    let json = |path: PathBuf| -> serde_json::Value {
        serde_json::from_slice(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let (config, hf_quant_config) = (json(output.join("config.json")), json(output.join("hf_quant_config.json")));
    let _ = std::fs::remove_dir_all(&dir);

    let mut quantization_config = config["quantization_config"].clone();
    assert_eq!(quantization_config["producer"]["name"], "gemv");
    quantization_config.as_object_mut().expect("an object").remove("producer");
    assert_eq!(quantization_config, json(fixture("quantization_config.json")), "as ModelOpt's converter writes it");
    assert_eq!((&config["model_type"], &config["hidden_size"]), (&"llama".into(), &64.into()), "the rest kept");
    assert_eq!(hf_quant_config["quantization"]["quant_algo"], "W4A16_NVFP4");
    assert_eq!(hf_quant_config["quantization"]["exclude_modules"], quantization_config["ignore"]);
}
