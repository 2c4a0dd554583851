//! `gemv quantize` on safetensors files: ModelOpt's recipe on F32, BF16 and F16, shared scales of
//! fused projections, the head left alone, the serving config, sharded checkpoints in and out,
//! and the result run against the host contract.

mod support;

use gemv_core::codec::f32_to_bf16;
use gemv_core::{gemv_contract, quantize_f32};
use std::path::Path;
use support::*;

#[test]
fn quantize_then_run_matches_the_host_contract_for_any_m() {
    let dir = Dir::new("roundtrip");
    let (model, quantized) = (dir.path("model.safetensors"), dir.path("nvfp4.safetensors"));
    let bias: Vec<f32> = (0..N).map(|i| i as f32).collect();
    write_safetensors(
        &model,
        &[
            ("layers.0.up.weight", "F32", vec![N, K], f32_bytes(&weights())),
            ("layers.0.up.bias", "F32", vec![N], f32_bytes(&bias)),
        ],
    );
    let (code, stderr) =
        gemv(&["quantize", "--input", model.to_str().unwrap(), "--output", quantized.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("quantized layers.0.up.weight [24, 48]"), "{stderr}");
    let expected_matrix = quantize_f32(&weights(), N, K).expect("quantizes");
    for m in [1, 5, 40] {
        let (x, y) = (dir.path(&format!("x{m}.safetensors")), dir.path(&format!("y{m}.safetensors")));
        write_safetensors(&x, &[("x", "BF16", vec![m, K], bf16_bytes(&activations(m)))]);
        let args = run_args(&quantized, "layers.0.up", &x, y.to_str().unwrap());
        let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 0, "M = {m}: {stderr}");
        assert!(!stderr.contains("note:"), "BF16 X needs no conversion: {stderr}");
        let (header, found) = read_y(&y);
        let header: serde_json::Value = serde_json::from_str(&header).expect("JSON header");
        assert_eq!(header["y"]["dtype"], "BF16", "{header}");
        assert_eq!(header["y"]["shape"], serde_json::json!([m, N]), "{header}");
        let x_bits: Vec<u16> = activations(m).iter().map(|&v| f32_to_bf16(v)).collect();
        let mut expected = vec![0u16; m * N];
        gemv_contract(&expected_matrix.view(), &x_bits, m, &mut expected, 1).expect("contract");
        assert_eq!(found, expected, "M = {m}");
    }
}

/// f16 bits of a value f16 represents exactly as a normal number or zero (the test data's
/// multiples of 1/136 .. 1/8 in [-3, 3] are), written independently of the code under test.
fn f16_bits_exact(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    if value == 0.0 {
        return sign;
    }
    let exponent = ((bits >> 23) & 0xFF) as i32 - 127;
    assert!((-14..=15).contains(&exponent) && bits & 0x1FFF == 0, "{value} is not exact in f16");
    sign | (((exponent + 15) as u16) << 10) | ((bits >> 13) & 0x3FF) as u16
}

fn f16_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|&v| f16_bits_exact(v).to_le_bytes()).collect()
}

/// Weights every input dtype represents exactly (multiples of 1/8 in [-6, 6]).
fn exact_weights() -> Vec<f32> {
    (0..N * K).map(|i| ((i * 37 % 97) as f32 - 48.0) / 8.0).collect()
}

#[test]
fn quantize_reads_bf16_and_f16_like_f32_and_run_reads_f16_activations() {
    let dir = Dir::new("dtypes");
    let weights = exact_weights();
    let expected_matrix = quantize_f32(&weights, N, K).expect("quantizes");
    let x_bits: Vec<u16> = activations(3).iter().map(|&v| f32_to_bf16(v)).collect();
    let mut expected = vec![0u16; 3 * N];
    gemv_contract(&expected_matrix.view(), &x_bits, 3, &mut expected, 1).expect("contract");
    for (dtype, bytes) in [("F32", f32_bytes(&weights)), ("BF16", bf16_bytes(&weights)), ("F16", f16_bytes(&weights))] {
        let (model, quantized) =
            (dir.path(&format!("{dtype}.safetensors")), dir.path(&format!("{dtype}-q.safetensors")));
        write_safetensors(&model, &[("proj.weight", dtype, vec![N, K], bytes)]);
        let (code, stderr) =
            gemv(&["quantize", "--input", model.to_str().unwrap(), "--output", quantized.to_str().unwrap()]);
        assert_eq!(code, 0, "{dtype}: {stderr}");
        for (x_dtype, x_bytes) in [("BF16", bf16_bytes(&activations(3))), ("F16", f16_bytes(&activations(3)))] {
            let (x, y) = (dir.path(&format!("x-{dtype}-{x_dtype}")), dir.path(&format!("y-{dtype}-{x_dtype}")));
            write_safetensors(&x, &[("x", x_dtype, vec![3, K], x_bytes)]);
            let args = run_args(&quantized, "proj", &x, y.to_str().unwrap());
            let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(code, 0, "{dtype} weights, {x_dtype} X: {stderr}");
            assert_eq!(read_y(&y).1, expected, "{dtype} weights, {x_dtype} X");
        }
    }
}

/// The F32 scalar `name` of a safetensors file, read independently.
fn read_scalar(path: &Path, name: &str) -> f32 {
    let bytes = std::fs::read(path).expect("output exists");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).expect("JSON header");
    let begin = header[name]["data_offsets"][0].as_u64().unwrap_or_else(|| panic!("no {name} in {header}")) as usize;
    let at = 8 + header_len + begin;
    f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

#[test]
fn quantize_shares_fused_scales_leaves_the_head_alone_and_writes_the_serving_config() {
    let dir = Dir::new("modelopt");
    let model = dir.path("model.safetensors");
    let scaled = |s: f32| -> Vec<u8> { f32_bytes(&weights().iter().map(|v| v * s).collect::<Vec<_>>()) };
    let attention = "model.layers.0.self_attn";
    let (q, k, v, o) = (
        format!("{attention}.q_proj.weight"),
        format!("{attention}.k_proj.weight"),
        format!("{attention}.v_proj.weight"),
        format!("{attention}.o_proj.weight"),
    );
    write_safetensors(
        &model,
        &[
            (&q, "F32", vec![N, K], scaled(1.0)),
            (&k, "F32", vec![N, K], scaled(4.0)),
            (&v, "F32", vec![N, K], scaled(0.5)),
            (&o, "F32", vec![N, K], scaled(2.0)),
            ("model.embed_tokens.weight", "F32", vec![N, K], scaled(1.0)),
            ("lm_head.weight", "F32", vec![N, K], scaled(1.0)),
            ("model.layers.0.mlp.gate.weight", "F32", vec![N, K], scaled(1.0)),
        ],
    );
    let amax = weights().iter().fold(0f32, |a, v| a.max(v.abs()));
    let quantize = |out: &Path, extra: &[&str]| {
        let mut args = vec!["quantize", "--input", model.to_str().unwrap(), "--output", out.to_str().unwrap()];
        args.extend(extra);
        gemv(&args)
    };

    let out = dir.path("nvfp4.safetensors");
    let (code, stderr) = quantize(&out, &["--exclude", "*.mlp.gate.*", "--hf-quant-config"]);
    assert_eq!(code, 0, "{stderr}");
    // q, k and v share the global scale of the largest of them (k: 4 x amax); o keeps its own.
    for name in [&q, &k, &v] {
        assert_eq!(read_scalar(&out, &format!("{name}_scale_2")), 4.0 * amax / (6.0 * 448.0), "{name}");
    }
    assert_eq!(read_scalar(&out, &format!("{o}_scale_2")), 2.0 * amax / (6.0 * 448.0));
    let (header, _) = read_y(&out);
    let header: serde_json::Value = serde_json::from_str(&header).expect("JSON header");
    for kept in ["lm_head.weight", "model.embed_tokens.weight", "model.layers.0.mlp.gate.weight"] {
        assert_eq!(header[kept]["dtype"], "F32", "{kept} must stay unquantized: {header}");
        assert!(header.get(format!("{kept}_scale")).is_none(), "{kept}");
    }
    assert!(stderr.contains("left unquantized: "), "{stderr}");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path("hf_quant_config.json")).expect("config written"))
            .expect("JSON config");
    assert_eq!(config["quantization"]["quant_algo"], "W4A16_NVFP4", "weight-only: no activation scales");
    assert_eq!(config["quantization"]["group_size"], 16);
    let excluded = config["quantization"]["exclude_modules"].as_array().expect("a list");
    for module in ["lm_head", "model.embed_tokens", "model.layers.0.mlp.gate"] {
        assert!(excluded.iter().any(|m| m == module), "{module} not in {excluded:?}");
    }
    // A second run would overwrite the config: refused before any work, no output written.
    let again = dir.path("again.safetensors");
    let (code, stderr) = quantize(&again, &["--hf-quant-config"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("hf_quant_config.json") && stderr.contains("already exists"), "{stderr}");
    assert!(!again.exists());

    // --no-shared-scale: every projection keeps its own global scale.
    let own = dir.path("own.safetensors");
    let (code, stderr) = quantize(&own, &["--no-shared-scale"]);
    assert_eq!(code, 0, "{stderr}");
    for (name, scale) in [(&q, 1.0), (&k, 4.0), (&v, 0.5)] {
        assert_eq!(read_scalar(&own, &format!("{name}_scale_2")), scale * amax / (6.0 * 448.0), "{name}");
    }
}

#[test]
fn a_sharded_checkpoint_quantizes_into_matching_shards_with_an_index() {
    let dir = Dir::new("quantize-sharded");
    let scaled = |s: f32| -> Vec<u8> { f32_bytes(&weights().iter().map(|v| v * s).collect::<Vec<_>>()) };
    let attention = "model.layers.0.self_attn";
    let (q, k, o) = (
        format!("{attention}.q_proj.weight"),
        format!("{attention}.k_proj.weight"),
        format!("{attention}.o_proj.weight"),
    );
    // q and k (one fused group) live in different shards; the norm is copied.
    let tensors = [
        (q.as_str(), "F32", vec![N, K], scaled(1.0)),
        ("model.norm.weight", "F32", vec![2], f32_bytes(&[1.0, 2.0])),
        (k.as_str(), "F32", vec![N, K], scaled(3.0)),
        (o.as_str(), "F32", vec![N, K], scaled(0.5)),
    ];
    let single = dir.path("single.safetensors");
    write_safetensors(&single, &tensors);
    let shards = dir.path("model");
    std::fs::create_dir_all(&shards).expect("dir");
    let (first, second) = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors");
    write_safetensors(&shards.join(first), &tensors[..2]);
    write_safetensors(&shards.join(second), &tensors[2..]);
    std::fs::write(
        shards.join("model.safetensors.index.json"),
        format!(r#"{{"weight_map": {{"{q}": "{first}", "model.norm.weight": "{first}", "{k}": "{second}", "{o}": "{second}"}}}}"#),
    )
    .expect("index");

    let reference = dir.path("reference.safetensors");
    let (code, stderr) =
        gemv(&["quantize", "--input", single.to_str().unwrap(), "--output", reference.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let out = dir.path("nvfp4");
    let (code, stderr) = gemv(&[
        "quantize",
        "--input",
        shards.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--hf-quant-config",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("2 shards"), "{stderr}");
    assert!(stderr.contains("quantize: 3/3 tensors"), "progress names what it counts: {stderr}");
    assert!(out.join("hf_quant_config.json").is_file(), "the serving config goes into the directory");

    // Every tensor is in the shard that held its source, with the bytes of the single-file run
    // (so the fused group's scale was shared across shards), and the index says where.
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("model.safetensors.index.json")).expect("index")).expect("JSON");
    let reference_bytes = std::fs::read(&reference).expect("reference");
    let reference = safetensors::SafeTensors::deserialize(&reference_bytes).expect("reference parses");
    let mut total = 0;
    for (file, names) in [(first, vec![q.clone(), "model.norm.weight".into()]), (second, vec![k.clone(), o.clone()])] {
        let bytes = std::fs::read(out.join(file)).expect("shard written");
        let shard = safetensors::SafeTensors::deserialize(&bytes).expect("shard parses");
        let expected: Vec<String> = names
            .iter()
            .flat_map(|n| {
                if n.ends_with("norm.weight") {
                    vec![n.clone()]
                } else {
                    vec![n.clone(), format!("{n}_scale"), format!("{n}_scale_2")]
                }
            })
            .collect();
        let mut found: Vec<String> = shard.names().into_iter().map(String::from).collect();
        found.sort();
        let mut sorted = expected.clone();
        sorted.sort();
        assert_eq!(found, sorted, "{file}");
        for name in &expected {
            assert_eq!(index["weight_map"][name], *file, "{name}");
            let (ours, theirs) = (shard.tensor(name).expect("ours"), reference.tensor(name).expect("reference"));
            assert_eq!(
                (ours.dtype(), ours.shape(), ours.data()),
                (theirs.dtype(), theirs.shape(), theirs.data()),
                "{name}"
            );
            total += ours.data().len();
        }
    }
    assert_eq!(index["metadata"]["total_size"], total);

    // The output opens as one checkpoint, and runs.
    let x = dir.path("x.safetensors");
    write_safetensors(&x, &[("x", "BF16", vec![2, K], bf16_bytes(&activations(2)))]);
    let (_, from_shards) = run_ok(&out, &k, &x, &dir.path("y_shards.safetensors"), None);
    let (_, from_single) = run_ok(&dir.path("reference.safetensors"), &k, &x, &dir.path("y_single.safetensors"), None);
    assert_eq!(from_shards, from_single);

    // An existing directory is refused before any work; a bad --names leaves nothing behind.
    let (code, stderr) = gemv(&["quantize", "--input", shards.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    let fresh = dir.path("fresh");
    let (code, stderr) = gemv(&[
        "quantize",
        "--input",
        shards.to_str().unwrap(),
        "--output",
        fresh.to_str().unwrap(),
        "--names",
        "model.norm.weight",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(!fresh.exists(), "nothing created for a refused run");
}

/// Every 2-D `*.weight` of a quantized output either has its NVFP4 tensors (U8 with an F8_E4M3
/// `_scale` and an F32 `_scale_2`) or is listed in `hf_quant_config.json`'s `exclude_modules`, so
/// an engine loading the output never expects NVFP4 tensors for a layer that is float.
fn assert_config_matches_tensors(output: &Path, config: &Path) {
    let (header, _) = read_y(output);
    let header: serde_json::Value = serde_json::from_str(&header).expect("JSON header");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(config).expect("config written")).expect("JSON config");
    let excluded: Vec<&str> = config["quantization"]["exclude_modules"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|m| m.as_str().expect("a module name"))
        .collect();
    let tensors = header.as_object().expect("a header object");
    for (name, tensor) in tensors {
        let Some(module) = name.strip_suffix(".weight") else { continue };
        let quantized = tensor["dtype"] == "U8"
            && tensors.get(&format!("{name}_scale")).is_some_and(|s| s["dtype"] == "F8_E4M3")
            && tensors.get(&format!("{name}_scale_2")).is_some_and(|s| s["dtype"] == "F32");
        let is_linear = tensor["shape"].as_array().is_some_and(|s| s.len() == 2);
        if is_linear && !quantized {
            assert!(excluded.contains(&module), "{name} is {} but not excluded: {excluded:?}", tensor["dtype"]);
        }
        if quantized {
            assert!(!excluded.contains(&module), "{name} is NVFP4 but excluded");
        }
    }
}

#[test]
fn layers_left_unquantized_are_named_with_their_reason_and_excluded_in_the_config() {
    let dir = Dir::new("odd-shapes");
    let model = dir.path("model.safetensors");
    let odd_k = 1000;
    let odd: Vec<f32> = (0..N * odd_k).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect();
    write_safetensors(
        &model,
        &[
            ("model.layers.0.mlp.up_proj.weight", "F32", vec![N, K], f32_bytes(&weights())),
            ("model.layers.0.mlp.gate_proj.weight", "F32", vec![N, odd_k], f32_bytes(&odd)),
            ("model.layers.0.input_layernorm.weight", "F32", vec![2], f32_bytes(&[1.0, 2.0])),
            ("lm_head.weight", "F32", vec![N, K], f32_bytes(&weights())),
        ],
    );
    let out = dir.path("nvfp4.safetensors");
    let (code, stderr) =
        gemv(&["quantize", "--input", model.to_str().unwrap(), "--output", out.to_str().unwrap(), "--hf-quant-config"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("(1 tensor quantized, 3 copied, 2 left unquantized)"), "{stderr}");
    assert!(
        stderr.contains(
            "left unquantized: model.layers.0.mlp.gate_proj.weight (K = 1000 is not a positive multiple of 16)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("left unquantized: lm_head.weight (matches *lm_head*)"), "{stderr}");
    assert_config_matches_tensors(&out, &dir.path("hf_quant_config.json"));

    // Quantizing the output again is refused in one line, before any work ...
    let again = dir.path("again.safetensors");
    let (code, stderr) = gemv(&["quantize", "--input", out.to_str().unwrap(), "--output", again.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("already holds NVFP4 tensors (model.layers.0.mlp.up_proj.weight with"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!again.exists());
    // ... unless the tensors to quantize are named.
    let (code, stderr) = gemv(&[
        "quantize",
        "--input",
        out.to_str().unwrap(),
        "--output",
        again.to_str().unwrap(),
        "--names",
        "lm_head.weight",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("quantized lm_head.weight [24, 48] F32 -> NVFP4"), "{stderr}");
}

/// A mixture-of-experts checkpoint as Hugging Face and ModelOpt name it: per-expert projections
/// quantized under their own names, each expert's gate and up sharing a global scale (not the
/// experts of a layer), down its own, the router and the shared expert's gate left float and
/// excluded in the serving config; then `gemv run --routing` over the experts gives each pair its
/// expert's contract.
#[test]
fn an_moe_checkpoint_keeps_modelopt_names_and_shared_scales_and_runs_routed() {
    let dir = Dir::new("quantize-moe");
    let model = dir.path("model.safetensors");
    let mlp = "model.layers.0.mlp";
    let experts = 3;
    let scaled = |s: f32| -> Vec<f32> { weights().iter().map(|v| v * s).collect() };
    // Expert e: gate (1 + e) x, up 2 (1 + e) x, down 3 x.
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for e in 0..experts {
        let factor = 1.0 + e as f32;
        for (leaf, s) in [("gate_proj", factor), ("up_proj", 2.0 * factor), ("down_proj", 3.0)] {
            tensors.push((format!("{mlp}.experts.{e}.{leaf}.weight"), vec![N, K], scaled(s)));
        }
    }
    tensors.push((format!("{mlp}.gate.weight"), vec![experts, K], scaled(1.0)[..experts * K].to_vec()));
    tensors.push((format!("{mlp}.shared_expert_gate.weight"), vec![1, K], scaled(1.0)[..K].to_vec()));
    tensors.push((format!("{mlp}.shared_expert.up_proj.weight"), vec![N, K], scaled(0.5)));
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|(_, _, v)| f32_bytes(v)).collect();
    let listed: Vec<(&str, &str, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, shape, _), bytes)| (name.as_str(), "F32", shape.clone(), bytes.clone()))
        .collect();
    write_safetensors(&model, &listed);
    let out = dir.path("nvfp4.safetensors");
    let (code, stderr) =
        gemv(&["quantize", "--input", model.to_str().unwrap(), "--output", out.to_str().unwrap(), "--hf-quant-config"]);
    assert_eq!(code, 0, "{stderr}");
    let amax = weights().iter().fold(0f32, |a, v| a.max(v.abs()));
    let global = |s: f32| s * amax / (6.0 * 448.0);
    for e in 0..experts {
        let factor = 1.0 + e as f32;
        let scale_of = |leaf: &str| read_scalar(&out, &format!("{mlp}.experts.{e}.{leaf}.weight_scale_2"));
        assert_eq!(scale_of("gate_proj"), global(2.0 * factor), "expert {e}'s gate shares its up's scale");
        assert_eq!(scale_of("up_proj"), global(2.0 * factor), "expert {e}");
        assert_eq!(scale_of("down_proj"), global(3.0), "expert {e}'s down keeps its own");
    }
    let (header, _) = read_y(&out);
    let header: serde_json::Value = serde_json::from_str(&header).expect("JSON header");
    for router in [format!("{mlp}.gate.weight"), format!("{mlp}.shared_expert_gate.weight")] {
        assert_eq!(header[&router]["dtype"], "F32", "{router} stays float: {header}");
    }
    assert_eq!(header[format!("{mlp}.shared_expert.up_proj.weight")]["dtype"], "U8", "the shared expert is quantized");
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path("hf_quant_config.json")).expect("config")).expect("JSON");
    let excluded = config["quantization"]["exclude_modules"].as_array().expect("a list");
    for module in [format!("{mlp}.gate"), format!("{mlp}.shared_expert_gate")] {
        assert!(excluded.iter().any(|m| *m == module), "{module} not in {excluded:?}");
    }

    // The experts' up projections as a routed layer: two tokens, two experts each.
    let (m, top_k) = (2, 2);
    let x = dir.path("x.safetensors");
    write_safetensors(&x, &[("x", "BF16", vec![m, K], bf16_bytes(&activations(m)))]);
    let ids: [i64; 4] = [2, 0, 1, 2];
    let routing = dir.path("routing.safetensors");
    let id_bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    write_safetensors(&routing, &[("routing", "I64", vec![m, top_k], id_bytes)]);
    let y = dir.path("y.safetensors");
    let mut args = run_args(&out, &format!("{mlp}.experts.{{i}}.up_proj"), &x, y.to_str().unwrap());
    args.extend(["--routing".to_string(), routing.to_string_lossy().into_owned()]);
    let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    let x_bits: Vec<u16> = activations(m).iter().map(|&v| f32_to_bf16(v)).collect();
    let mut expected = Vec::new();
    for (pair, &e) in ids.iter().enumerate() {
        let factor = 1.0 + e as f32;
        // The expert's up projection as the quantizer made it, with the shared global scale.
        let up =
            gemv_core::quantize_f32_with_amax(&scaled(2.0 * factor), N, K, 2.0 * factor * amax).expect("quantizes");
        let mut row = vec![0u16; N];
        gemv_contract(&up.view(), &x_bits[(pair / top_k) * K..][..K], 1, &mut row, 1).expect("contract");
        expected.extend(row);
    }
    let (header, found) = read_y(&y);
    assert!(header.contains(&format!("\"shape\":[{m},{top_k},{N}]")), "{header}");
    assert_eq!(found, expected, "each pair its expert's contract");
}
