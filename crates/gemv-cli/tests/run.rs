//! `gemv run` on safetensors files: both checkpoint layouts, sharded checkpoints, X of any rank,
//! expert tensors, and every bad input: a clear error naming the tensor, exit status 2, and no
//! output file.

mod support;

use gemv_core::codec::{bf16_to_f32, f32_to_bf16};
use gemv_core::{gemv_contract, quantize_f32};
use std::path::Path;
use support::*;

#[test]
fn compressed_tensors_layout_inverts_the_global_scale() {
    let dir = Dir::new("ct");
    let matrix = quantize_f32(&weights(), N, K).expect("quantizes");
    let view = matrix.view();
    let ct = dir.path("ct.safetensors");
    write_safetensors(
        &ct,
        &[
            ("proj.weight_packed", "U8", vec![N, K / 2], view.packed().to_vec()),
            ("proj.weight_scale", "F8_E4M3", vec![N, K / 16], view.scales().to_vec()),
            ("proj.weight_global_scale", "F32", vec![], f32_bytes(&[1.0 / view.global_scale()])),
        ],
    );
    let (x, y) = (dir.path("x.safetensors"), dir.path("y.safetensors"));
    write_safetensors(&x, &[("x", "F32", vec![2, K], f32_bytes(&activations(2)))]);
    let args = run_args(&ct, "proj", &x, y.to_str().unwrap());
    let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("CompressedTensors"), "{stderr}");
    assert!(stderr.contains("note: X is F32; it was rounded to BF16 (to nearest even)"), "{stderr}");
    let (_, found) = read_y(&y);
    let x_bits: Vec<u16> = activations(2).iter().map(|&v| f32_to_bf16(v)).collect();
    // The divisor, inverted, is not bit-identical to the multiplier in general: compare within
    // one bf16 ulp of the ModelOpt result rather than bit for bit.
    let mut reference = vec![0u16; 2 * N];
    gemv_contract(&view, &x_bits, 2, &mut reference, 1).expect("contract");
    for (a, b) in reference.iter().zip(&found) {
        let (a, b) = (bf16_to_f32(*a), bf16_to_f32(*b));
        assert!((a - b).abs() <= a.abs() / 64.0 + 1e-30, "{a} vs {b}");
    }
}

/// Each bad input: the args, words the message must contain.
#[test]
fn every_bad_input_is_a_clear_error_with_exit_code_2_and_no_output() {
    let dir = Dir::new("bad");
    let matrix = quantize_f32(&weights(), N, K).expect("quantizes");
    let view = matrix.view();
    let weights_ok = dir.path("ok.safetensors");
    write_safetensors(&weights_ok, &nvfp4_tensors(&view, vec![N, K / 2], "F8_E4M3", vec![N, K / 16]));
    let x_ok = dir.path("x.safetensors");
    write_safetensors(&x_ok, &[("x", "BF16", vec![3, K], bf16_bytes(&activations(3)))]);

    let truncated = dir.path("truncated.safetensors");
    let bytes = std::fs::read(&weights_ok).expect("read");
    std::fs::write(&truncated, &bytes[..bytes.len() - 10]).expect("write");
    let tiny = dir.path("tiny.safetensors");
    std::fs::write(&tiny, [1, 2, 3]).expect("write");
    let wrong_dtype = dir.path("wrong_dtype.safetensors");
    write_safetensors(&wrong_dtype, &nvfp4_tensors(&view, vec![N, K / 2], "U8", vec![N, K / 16]));
    let wrong_scale_shape = dir.path("scale_shape.safetensors");
    write_safetensors(&wrong_scale_shape, &nvfp4_tensors(&view, vec![N, K / 2], "F8_E4M3", vec![N / 2, K / 8]));
    let rank3 = dir.path("rank3.safetensors");
    write_safetensors(&rank3, &nvfp4_tensors(&view, vec![2, N / 2, K / 2], "F8_E4M3", vec![N, K / 16]));
    let k_not_16 = dir.path("k24.safetensors");
    write_safetensors(
        &k_not_16,
        &[
            ("w.weight", "U8", vec![N * 2, 12], view.packed().to_vec()),
            ("w.weight_scale", "F8_E4M3", vec![N, K / 16], view.scales().to_vec()),
            ("w.weight_scale_2", "F32", vec![], f32_bytes(&[1.0])),
        ],
    );
    let x_wrong_k = dir.path("x_wrong_k.safetensors");
    write_safetensors(
        &x_wrong_k,
        &[(
            "x",
            "BF16",
            vec![2, K + 16],
            bf16_bytes(&activations(2))[..].iter().chain(&vec![0u8; 64]).copied().collect(),
        )],
    );
    let unquantized = dir.path("unquantized.safetensors");
    write_safetensors(&unquantized, &[("w.weight", "F32", vec![N, K], f32_bytes(&weights()))]);
    let x_scalar = dir.path("x_scalar.safetensors");
    write_safetensors(&x_scalar, &[("x", "F32", vec![], f32_bytes(&[1.0]))]);
    let x_int = dir.path("x_int.safetensors");
    write_safetensors(&x_int, &[("x", "U8", vec![1, K], vec![0; K])]);
    let existing = dir.path("existing.safetensors");
    std::fs::write(&existing, b"keep me").expect("write");

    let out = dir.path("out.safetensors");
    let out_s = out.to_str().unwrap().to_string();
    let no_such_dir = dir.path("no/such/dir/y.safetensors");
    let quantize_args = |input: &Path, output: &str, names: &str| -> Vec<String> {
        let input = input.to_string_lossy().into_owned();
        ["quantize", "--input", &input, "--output", output, "--names", names].map(String::from).to_vec()
    };
    let mut cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        // A directory is a checkpoint only with one index or one safetensors file.
        (run_args(&dir.0, "w", &x_ok, &out_s), vec!["safetensors files and no index: name one file"]),
        // A missing output directory is found before any work, naming the output, not a temp file.
        (run_args(&weights_ok, "w", &x_ok, no_such_dir.to_str().unwrap()), vec!["y.safetensors", "cannot be used"]),
        (quantize_args(&x_ok, no_such_dir.to_str().unwrap(), "x"), vec!["y.safetensors", "cannot be used"]),
        // Once printed "18446744073709551615 copied".
        (quantize_args(&x_ok, &out_s, "x,x"), vec!["--names", "\"x\" is named twice"]),
        (run_args(&truncated, "w", &x_ok, &out_s), vec!["truncated"]),
        (run_args(&tiny, "w", &x_ok, &out_s), vec!["truncated", "8-byte"]),
        (run_args(&wrong_dtype, "w", &x_ok, &out_s), vec!["w.weight_scale", "F8_E4M3", "found U8"]),
        (run_args(&wrong_scale_shape, "w", &x_ok, &out_s), vec!["w.weight_scale", "[24, 3]", "[12, 6]"]),
        (run_args(&rank3, "w", &x_ok, &out_s), vec!["w.weight", "holds 2 experts: pick one with --expert"]),
        (run_args(&k_not_16, "w", &x_ok, &out_s), vec!["w.weight", "multiple of 16", "K = 24"]),
        (run_args(&weights_ok, "missing", &x_ok, &out_s), vec!["missing.weight", "no tensor"]),
        (run_args(&unquantized, "w", &x_ok, &out_s), vec!["w.weight", "still F32", "`gemv quantize --input"]),
        (run_args(&weights_ok, "w", &x_wrong_k, &out_s), vec!["\"x\"", "[M, 48]", "[2, 64]"]),
        (run_args(&weights_ok, "w", &x_scalar, &out_s), vec!["\"x\"", "a scalar"]),
        (run_args(&weights_ok, "w", &x_int, &out_s), vec!["\"x\"", "found U8"]),
        (run_args(&weights_ok, "w", &x_ok, existing.to_str().unwrap()), vec!["already exists"]),
        (
            vec![
                "quantize".into(),
                "--input".into(),
                weights_ok.to_str().unwrap().into(),
                "--output".into(),
                out_s.clone(),
                "--names".into(),
                "w.weight".into(),
            ],
            vec!["w.weight", "BF16, F16 or F32"],
        ),
        (
            vec![
                "quantize".into(),
                "--input".into(),
                x_ok.to_str().unwrap().into(),
                "--output".into(),
                out_s.clone(),
                "--names".into(),
                "nope".into(),
            ],
            vec!["\"nope\"", "no tensor"],
        ),
    ];
    // Only regular files are opened: a FIFO once blocked `gemv run` forever.
    #[cfg(unix)]
    {
        let fifo = dir.path("fifo.safetensors");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success(), "mkfifo failed");
        cases.push((run_args(&weights_ok, "w", &fifo, &out_s), vec!["fifo.safetensors", "not a regular file"]));
    }
    for (args, needles) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = gemv(&args);
        assert_eq!(code, 2, "{args:?}\n{stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "{args:?}: missing {needle:?} in\n{stderr}");
        }
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(!stderr.contains(".tmp"), "{args:?}: the error names a temporary file: {stderr}");
        assert!(!out.exists(), "{args:?} left an output file");
        let leftovers: Vec<_> = std::fs::read_dir(&dir.0)
            .expect("dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{args:?} left a temporary file");
    }
    assert_eq!(std::fs::read(&existing).expect("read"), b"keep me", "an existing output must be untouched");
}

/// ModelOpt tensors `w.*` of `view`, with the shapes and scale dtype a case needs.
fn nvfp4_tensors(
    view: &gemv_core::Nvfp4View<'_>,
    packed_shape: Vec<usize>,
    scale_dtype: &'static str,
    scale_shape: Vec<usize>,
) -> Vec<(&'static str, &'static str, Vec<usize>, Vec<u8>)> {
    vec![
        ("w.weight", "U8", packed_shape, view.packed().to_vec()),
        ("w.weight_scale", scale_dtype, scale_shape, view.scales().to_vec()),
        ("w.weight_scale_2", "F32", vec![], f32_bytes(&[view.global_scale()])),
    ]
}

/// A file with a hand-written header, for the malformed cases the writer above cannot produce.
fn write_raw(path: &Path, header: &str, data: &[u8]) {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(path, bytes).expect("write fixture");
}

#[test]
fn a_sharded_checkpoint_opens_as_one_by_directory_or_index_and_gives_the_same_bits() {
    let dir = Dir::new("sharded");
    let matrix = quantize_f32(&weights(), N, K).expect("quantizes");
    let view = matrix.view();
    let single = dir.path("single.safetensors");
    write_safetensors(&single, &nvfp4_tensors(&view, vec![N, K / 2], "F8_E4M3", vec![N, K / 16]));
    // The layer's tensors split over two shards, next to an unrelated tensor.
    let shards = dir.path("model");
    std::fs::create_dir_all(&shards).expect("dir");
    let [packed, scale, global] = nvfp4_tensors(&view, vec![N, K / 2], "F8_E4M3", vec![N, K / 16])
        .try_into()
        .unwrap_or_else(|_| panic!("three tensors"));
    write_safetensors(
        &shards.join("model-00001-of-00002.safetensors"),
        &[packed, ("other.bias", "F32", vec![2], f32_bytes(&[1.0, 2.0]))],
    );
    write_safetensors(&shards.join("model-00002-of-00002.safetensors"), &[scale, global]);
    let index = shards.join("model.safetensors.index.json");
    std::fs::write(
        &index,
        r#"{"metadata": {"total_size": 1}, "weight_map": {
            "w.weight": "model-00001-of-00002.safetensors",
            "other.bias": "model-00001-of-00002.safetensors",
            "w.weight_scale": "model-00002-of-00002.safetensors",
            "w.weight_scale_2": "model-00002-of-00002.safetensors"}}"#,
    )
    .expect("index");
    let x = dir.path("x.safetensors");
    write_safetensors(&x, &[("x", "BF16", vec![3, K], bf16_bytes(&activations(3)))]);

    let (_, expected) = run_ok(&single, "w", &x, &dir.path("y_single.safetensors"), None);
    let (_, by_dir) = run_ok(&shards, "w", &x, &dir.path("y_dir.safetensors"), None);
    let (_, by_index) = run_ok(&index, "w", &x, &dir.path("y_index.safetensors"), None);
    assert_eq!(by_dir, expected, "sharded by directory");
    assert_eq!(by_index, expected, "sharded by index");

    // An index that points at a shard without the tensor, or out of its directory, is refused.
    let bad_index = dir.path("bad.safetensors.index.json");
    std::fs::copy(shards.join("model-00001-of-00002.safetensors"), dir.path("a.safetensors")).expect("copy");
    std::fs::write(&bad_index, r#"{"weight_map": {"w.weight_scale": "a.safetensors"}}"#).expect("index");
    let (code, stderr) = gemv(&run_args(&bad_index, "w", &x, "unused").iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("puts \"w.weight_scale\" in a.safetensors, which holds no such tensor"), "{stderr}");
    std::fs::write(&bad_index, r#"{"weight_map": {"w.weight": "../single.safetensors"}}"#).expect("index");
    let (code, stderr) = gemv(&run_args(&bad_index, "w", &x, "unused").iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("shards must be plain file names"), "{stderr}");
}

#[test]
fn files_the_format_forbids_are_refused_like_the_reference_library_refuses_them() {
    let dir = Dir::new("strict");
    let x = dir.path("x.safetensors");
    write_safetensors(&x, &[("x", "BF16", vec![1, K], bf16_bytes(&activations(1)))]);
    let eight = [0u8; 8];
    let cases = [
        // Two tensors sharing bytes: the scales would be read from the packed weights.
        (
            "overlap",
            r#"{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}"#,
            &eight[..],
            "overlap another tensor's or leave a gap",
        ),
        (
            "gap",
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}}"#,
            &eight[..],
            "overlap another tensor's or leave a gap",
        ),
        (
            "uncovered",
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#,
            &eight[..],
            "do not end where the file ends",
        ),
        (
            "duplicate",
            // Valid if the second "a" simply replaced the first, as a JSON map would have it.
            r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}"#,
            &eight[..],
            "the header names \"a\" twice",
        ),
        (
            "metadata",
            r#"{"__metadata__":{"format":1},"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}"#,
            &eight[..],
            "expected a string",
        ),
        (
            "shape",
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}"#,
            &eight[..],
            "do not hold exactly its dtype x shape bytes",
        ),
    ];
    for (tag, header, data, needle) in cases {
        let path = dir.path(&format!("{tag}.safetensors"));
        write_raw(&path, header, data);
        let out = dir.path("out.safetensors");
        for args in [
            run_args(&path, "a", &x, out.to_str().unwrap()),
            ["quantize", "--input", path.to_str().unwrap(), "--output", out.to_str().unwrap()]
                .map(String::from)
                .to_vec(),
        ] {
            let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(code, 2, "{tag}: {stderr}");
            assert!(stderr.contains("not a valid safetensors file") && stderr.contains(needle), "{tag}: {stderr}");
            assert!(!out.exists(), "{tag}: an output was written");
        }
    }
}

#[test]
fn x_may_be_one_token_or_have_leading_dimensions_and_the_weight_name_may_be_given_whole() {
    let dir = Dir::new("xshapes");
    let matrix = quantize_f32(&weights(), N, K).expect("quantizes");
    let weights_file = dir.path("w.safetensors");
    write_safetensors(&weights_file, &nvfp4_tensors(&matrix.view(), vec![N, K / 2], "F8_E4M3", vec![N, K / 16]));
    let flat = dir.path("flat.safetensors");
    write_safetensors(&flat, &[("x", "BF16", vec![6, K], bf16_bytes(&activations(6)))]);
    let (header, expected) = run_ok(&weights_file, "w", &flat, &dir.path("y_flat.safetensors"), None);
    assert_eq!(header["y"]["shape"], serde_json::json!([6, N]));

    // [2, 3, K] under another name, the file's only tensor: Y is [2, 3, N], the same bits.
    let batched = dir.path("batched.safetensors");
    write_safetensors(&batched, &[("hidden", "BF16", vec![2, 3, K], bf16_bytes(&activations(6)))]);
    let (header, found) = run_ok(&weights_file, "w.weight", &batched, &dir.path("y_batched.safetensors"), None);
    assert_eq!(header["y"]["shape"], serde_json::json!([2, 3, N]));
    assert_eq!(found, expected);

    // [K]: one token, Y is [N] and equals the first row.
    let token = dir.path("token.safetensors");
    write_safetensors(
        &token,
        &[("t", "BF16", vec![K], bf16_bytes(&activations(1))), ("other", "F32", vec![1], f32_bytes(&[0.0]))],
    );
    let (header, found) = run_ok(&weights_file, "w", &token, &dir.path("y_token.safetensors"), Some("t"));
    assert_eq!(header["y"]["shape"], serde_json::json!([N]));
    assert_eq!(found, expected[..N]);
    // With two tensors and no `x`, the name is needed, and the error lists what is there.
    let (code, stderr) =
        gemv(&run_args(&weights_file, "w", &token, "unused").iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no tensor \"x\"") && stderr.contains("--input-name") && stderr.contains("other, t"),
        "{stderr}"
    );
}

#[test]
fn a_3d_expert_tensor_runs_one_expert_or_all_like_separate_layers() {
    let dir = Dir::new("experts");
    // Three experts of [N, K]: different weights and global scales.
    let experts: Vec<gemv_core::Nvfp4Matrix> = (0..3)
        .map(|e| {
            let w: Vec<f32> = weights().iter().map(|v| v * (e as f32 + 1.0) - e as f32 * 0.1).collect();
            quantize_f32(&w, N, K).expect("quantizes")
        })
        .collect();
    let cat = |part: &dyn Fn(&gemv_core::Nvfp4View<'_>) -> Vec<u8>| -> Vec<u8> {
        experts.iter().flat_map(|m| part(&m.view())).collect()
    };
    let stacked = dir.path("moe.safetensors");
    write_safetensors(
        &stacked,
        &[
            ("moe.experts.weight", "U8", vec![3, N, K / 2], cat(&|v| v.packed().to_vec())),
            ("moe.experts.weight_scale", "F8_E4M3", vec![3, N, K / 16], cat(&|v| v.scales().to_vec())),
            ("moe.experts.weight_scale_2", "F32", vec![3], cat(&|v| v.global_scale().to_le_bytes().to_vec())),
        ],
    );
    let x = dir.path("x.safetensors");
    write_safetensors(&x, &[("x", "BF16", vec![2, K], bf16_bytes(&activations(2)))]);
    let x_bits: Vec<u16> = activations(2).iter().map(|&v| f32_to_bf16(v)).collect();
    let expected: Vec<Vec<u16>> = experts
        .iter()
        .map(|m| {
            let mut y = vec![0u16; 2 * N];
            gemv_contract(&m.view(), &x_bits, 2, &mut y, 1).expect("contract");
            y
        })
        .collect();
    let run = |expert: &str, out: &str| {
        let mut args = run_args(&stacked, "moe.experts", &x, dir.path(out).to_str().unwrap());
        args.extend(["--expert".to_string(), expert.to_string()]);
        let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
        (code, stderr, dir.path(out))
    };
    let (code, stderr, out) = run("1", "y1.safetensors");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read_y(&out).1, expected[1], "expert 1");
    let (code, stderr, out) = run("all", "yall.safetensors");
    assert_eq!(code, 0, "{stderr}");
    let (header, found) = read_y(&out);
    assert!(header.contains("\"shape\":[3,2,24]"), "{header}");
    assert_eq!(found, expected.concat(), "all experts");
    for (expert, needle) in [("3", "expert 3 of a tensor of 3 experts"), ("x", "expected an expert number or `all`")] {
        let (code, stderr, _) = run(expert, "ybad.safetensors");
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(needle), "--expert {expert}: {stderr}");
    }
    // Without --expert, the error says how many experts there are and how to pick one.
    let args = run_args(&stacked, "moe.experts", &x, dir.path("ynone.safetensors").to_str().unwrap());
    let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("holds 3 experts: pick one with --expert"), "{stderr}");
}

#[test]
fn a_routed_layer_runs_each_token_through_its_experts_from_either_layout() {
    let dir = Dir::new("routed");
    let experts: Vec<gemv_core::Nvfp4Matrix> = (0..4)
        .map(|e| {
            let w: Vec<f32> = weights().iter().map(|v| v * (e as f32 + 1.0) - e as f32 * 0.2).collect();
            quantize_f32(&w, N, K).expect("quantizes")
        })
        .collect();
    // The 3-D layout and ModelOpt's per-expert tensors, the same experts.
    let cat = |part: &dyn Fn(&gemv_core::Nvfp4View<'_>) -> Vec<u8>| -> Vec<u8> {
        experts.iter().flat_map(|m| part(&m.view())).collect()
    };
    let stacked = dir.path("stacked.safetensors");
    write_safetensors(
        &stacked,
        &[
            ("mlp.experts.weight", "U8", vec![4, N, K / 2], cat(&|v| v.packed().to_vec())),
            ("mlp.experts.weight_scale", "F8_E4M3", vec![4, N, K / 16], cat(&|v| v.scales().to_vec())),
            ("mlp.experts.weight_scale_2", "F32", vec![4], cat(&|v| v.global_scale().to_le_bytes().to_vec())),
        ],
    );
    let names: Vec<[String; 3]> = (0..4)
        .map(|i| ["weight", "weight_scale", "weight_scale_2"].map(|t| format!("mlp.experts.{i}.down_proj.{t}")))
        .collect();
    let tensors: Vec<(&str, &str, Vec<usize>, Vec<u8>)> = experts
        .iter()
        .zip(&names)
        .flat_map(|(m, [w, s, g])| {
            let v = m.view();
            [
                (w.as_str(), "U8", vec![N, K / 2], v.packed().to_vec()),
                (s.as_str(), "F8_E4M3", vec![N, K / 16], v.scales().to_vec()),
                (g.as_str(), "F32", vec![], v.global_scale().to_le_bytes().to_vec()),
            ]
        })
        .collect();
    let per_expert = dir.path("per_expert.safetensors");
    write_safetensors(&per_expert, &tensors);
    // Three tokens, two experts each (token 1 names expert 2 twice), as I64 [3, 2].
    let x = dir.path("x.safetensors");
    write_safetensors(&x, &[("x", "BF16", vec![3, K], bf16_bytes(&activations(3)))]);
    let ids: [i64; 6] = [3, 0, 2, 2, 1, 3];
    let routing = dir.path("routing.safetensors");
    let id_bytes = |ids: &[i64]| ids.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>();
    write_safetensors(&routing, &[("routing", "I64", vec![3, 2], id_bytes(&ids))]);
    let x_bits: Vec<u16> = activations(3).iter().map(|&v| f32_to_bf16(v)).collect();
    let expected: Vec<u16> = ids
        .iter()
        .enumerate()
        .flat_map(|(p, &e)| {
            let mut y = vec![0u16; N];
            gemv_contract(&experts[e as usize].view(), &x_bits[(p / 2) * K..][..K], 1, &mut y, 1).expect("contract");
            y
        })
        .collect();
    let run = |weights: &Path, name: &str, routing: &Path, out: &str| {
        let mut args = run_args(weights, name, &x, dir.path(out).to_str().unwrap());
        args.extend(["--routing".to_string(), routing.to_string_lossy().into_owned()]);
        let (code, stderr) = gemv(&args.iter().map(String::as_str).collect::<Vec<_>>());
        (code, stderr, dir.path(out))
    };
    for (weights, name, out) in
        [(&stacked, "mlp.experts", "y3d.safetensors"), (&per_expert, "mlp.experts.{i}.down_proj", "yper.safetensors")]
    {
        let (code, stderr, out) = run(weights, name, &routing, out);
        assert_eq!(code, 0, "{name}: {stderr}");
        let (header, found) = read_y(&out);
        assert!(header.contains(&format!("\"shape\":[3,2,{N}]")), "{header}");
        assert_eq!(found, expected, "{name}: each pair its expert's contract");
    }
    // Ids past the experts or negative, the wrong row count, and a 2-D weight are clear errors.
    let bad = |name: &str, dtype: &str, shape: Vec<usize>, bytes: Vec<u8>| {
        let path = dir.path(name);
        write_safetensors(&path, &[("routing", dtype, shape, bytes)]);
        path
    };
    let cases = [
        (bad("r4.safetensors", "I64", vec![3, 2], id_bytes(&[0, 1, 2, 3, 4, 0])), "token 2 slot 0 names expert 4"),
        (
            bad(
                "rneg.safetensors",
                "I32",
                vec![3, 2],
                [0i32, -1, 0, 0, 0, 0].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
            "token 0 slot 1 names expert -1",
        ),
        (bad("rrows.safetensors", "I64", vec![2, 2], id_bytes(&[0, 1, 2, 3])), "with 3 rows"),
        (bad("rf32.safetensors", "F32", vec![3, 2], vec![0; 24]), "an integer tensor"),
    ];
    for (path, needle) in cases {
        let (code, stderr, _) = run(&stacked, "mlp.experts", &path, "ybad.safetensors");
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    let two_d = dir.path("two_d.safetensors");
    write_safetensors(
        &two_d,
        &[
            ("w.weight", "U8", vec![N, K / 2], experts[0].view().packed().to_vec()),
            ("w.weight_scale", "F8_E4M3", vec![N, K / 16], experts[0].view().scales().to_vec()),
            ("w.weight_scale_2", "F32", vec![], experts[0].global_scale().to_le_bytes().to_vec()),
        ],
    );
    let (code, stderr, _) = run(&two_d, "w", &routing, "y2d.safetensors");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is a 2-D weight: a routed layer needs"), "{stderr}");
}
