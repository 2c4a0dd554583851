//! The command fails safe: outputs appear whole or not at all (a sharded quantize killed
//! mid-write included), sizes are checked before anything is allocated (sparse files stand in
//! for inputs no disk holds), every write to standard output is checked, names the format
//! reserves are refused, a quantized model directory is loadable as written, and options that
//! do not apply are refused. Each exits as `gemv --help` says.

mod support;

use gemv_conformance::skip::{Requirement, skip};
use std::path::Path;
use std::process::{Command, Stdio};
use support::{Dir, f32_bytes, write_safetensors, write_sparse};

fn gemv(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_gemv")).args(args).output().expect("gemv runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).expect("list").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// A one-layer ModelOpt checkpoint `w.*` [N, K] of zeros and X `[M, K]`, both sparse.
fn sparse_layer(dir: &Dir, n: u64, k: u64, m: u64) -> (std::path::PathBuf, std::path::PathBuf) {
    let (weights, x) = (dir.path("w.safetensors"), dir.path("x.safetensors"));
    write_sparse(
        &weights,
        &[
            ("w.weight", "U8", vec![n, k / 2], n * k / 2),
            ("w.weight_scale", "F8_E4M3", vec![n, k / 16], n * k / 16),
            ("w.weight_scale_2", "F32", vec![], 4),
        ],
        &[("w.weight_scale_2", 1f32.to_le_bytes().to_vec())],
    );
    write_sparse(&x, &[("x", "BF16", vec![m, k], m * k * 2)], &[]);
    (weights, x)
}

/// `gemv run` on the host, refused: exit 2, the message holds `needle`, no output.
fn run_refused(dir: &Dir, weights: &Path, x: &Path, needle: &str) {
    let y = dir.path("y.safetensors");
    let args = ["run", "--weights", text(weights), "--name", "w", "--input", text(x), "--output", text(&y)];
    let (code, _, stderr) = gemv(&[&args[..], &["--backend", "host"]].concat());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(needle) && stderr.trim().lines().count() == 1, "{stderr}");
    assert!(!y.exists() && entries(&dir.0).iter().all(|n| !n.starts_with('.')), "{:?}", entries(&dir.0));
}

/// Each of these once aborted the process ("memory allocation of N bytes failed"); now each is
/// refused before anything is allocated, naming the size and what the machine has.
#[cfg(target_os = "linux")]
#[test]
fn sizes_are_checked_before_anything_is_allocated() {
    // A 10^6 x 10^6 layer: 562 GB of weights, copied to the host backend's buffers.
    let dir = Dir::new("huge-layer");
    let (weights, x) = sparse_layer(&dir, 1_000_000, 1_000_000, 1);
    run_refused(&dir, &weights, &x, "of memory and");

    // X [2^33, 64] against 2^16 rows: Y would be 2^50 bytes (X is streamed, Y sized on disk).
    let dir = Dir::new("huge-x");
    let (weights, x) = sparse_layer(&dir, 1 << 16, 64, 1 << 33);
    run_refused(&dir, &weights, &x, "of disk and");

    // Y of 2^21 x 2^21 from an input of 82 MB: 8 TiB.
    let dir = Dir::new("huge-y");
    let (weights, x) = sparse_layer(&dir, 1 << 21, 16, 1 << 21);
    run_refused(&dir, &weights, &x, "needs 8.0 TiB of disk");

    // An 8 TiB F32 tensor to quantize: read a piece at a time, and its 1.1 TiB output is refused
    // by the disk check before any work.
    let dir = Dir::new("huge-quantize");
    let model = dir.path("model.safetensors");
    write_sparse(&model, &[("big.weight", "F32", vec![1 << 20, 1 << 21], 1 << 43)], &[]);
    let out = dir.path("nvfp4.safetensors");
    let (code, _, stderr) = gemv(&["quantize", "--input", text(&model), "--output", text(&out)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("needs 1.1 TiB of disk"), "{stderr}");
    assert_eq!(entries(&dir.0), ["model.safetensors"]);
}

/// Input pieces and output pieces: a run whose X is split into several pieces of rows gives the
/// bits of the same run read whole (each row's result depends on that row alone).
#[test]
fn a_run_in_pieces_gives_the_bits_of_the_whole() {
    let dir = Dir::new("pieces");
    let (n, k, m) = (16usize, 1 << 20, 20usize);
    // K = 2^20: one piece holds 16 rows of X, so M = 20 takes two.
    let (weights, x) = (dir.path("w.safetensors"), dir.path("x.safetensors"));
    let packed: Vec<u8> = (0..n * k / 2).map(|i| (i * 7 % 251) as u8).collect();
    let scales: Vec<u8> = (0..n * k / 16).map(|i| 0x30 + (i % 9) as u8).collect();
    write_safetensors(
        &weights,
        &[
            ("w.weight", "U8", vec![n, k / 2], packed.clone()),
            ("w.weight_scale", "F8_E4M3", vec![n, k / 16], scales.clone()),
            ("w.weight_scale_2", "F32", vec![], f32_bytes(&[0.5])),
        ],
    );
    let bits: Vec<u16> = (0..m * k).map(|i| 0x3c00 + (i * 13 % 61) as u16).collect();
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    write_safetensors(&x, &[("x", "BF16", vec![m, k], bytes)]);
    let y = dir.path("y.safetensors");
    let args = ["run", "--weights", text(&weights), "--name", "w", "--input", text(&x), "--output", text(&y)];
    let (code, _, stderr) = gemv(&[&args[..], &["--backend", "cpu"]].concat());
    assert_eq!(code, 0, "{stderr}");
    let found = std::fs::read(&y).expect("Y");
    let found = safetensors::SafeTensors::deserialize(&found).expect("parses");
    let found: Vec<u16> =
        found.tensor("y").expect("y").data().chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    let matrix = gemv_core::Nvfp4Matrix::from_parts(packed, scales, 0.5, n, k).expect("valid");
    let mut expected = vec![0u16; m * n];
    gemv_core::gemv_contract(&matrix.view(), &bits, m, &mut expected, 2).expect("contract");
    assert_eq!(found, expected);
}

/// A sharded quantize killed mid-write (SIGINT, SIGTERM, SIGKILL) leaves nothing under the final
/// name and no temporary, and a rerun to the same output is not refused.
#[cfg(target_os = "linux")]
#[test]
fn a_killed_sharded_quantize_leaves_nothing_behind() {
    use std::os::unix::process::CommandExt;
    let dir = Dir::new("killed");
    let model = dir.path("model");
    std::fs::create_dir(&model).expect("model dir");
    let shards = 8;
    let mut weight_map = Vec::new();
    for s in 0..shards {
        let file = format!("model-{s:05}-of-{shards:05}.safetensors");
        let name = format!("layers.{s}.mlp.down_proj.weight");
        write_sparse(&model.join(&file), &[(&name, "F32", vec![1024, 8192], 1024 * 8192 * 4)], &[]);
        weight_map.push(format!("\"{name}\": \"{file}\""));
    }
    let index = format!("{{\"weight_map\": {{{}}}}}", weight_map.join(", "));
    std::fs::write(model.join("model.safetensors.index.json"), index).expect("index");
    let out = dir.path("nvfp4");
    for (signal, number) in [("INT", libc::SIGINT), ("TERM", libc::SIGTERM), ("KILL", libc::SIGKILL)] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gemv"));
        command.args(["quantize", "--input", text(&model), "--output", text(&out)]).stderr(Stdio::null());
        // A process started in the background by a shell without job control inherits SIGINT
        // ignored; the child gets each signal's default action, as from a terminal.
        // SAFETY: between fork and exec the closure only calls `signal`, which is
        // async-signal-safe, and allocates nothing.
        unsafe {
            command.pre_exec(|| {
                for signal in [libc::SIGINT, libc::SIGTERM] {
                    libc::signal(signal, libc::SIG_DFL);
                }
                Ok(())
            })
        };
        let mut child = command.spawn().expect("gemv starts");
        // Mid-write: more than one shard's bytes written (the first complete, the next begun).
        let shard_bytes = 1024 * 8192 * 9 / 16;
        let io = format!("/proc/{}/io", child.id());
        let written = || {
            let io = std::fs::read_to_string(&io).unwrap_or_default();
            let wchar = io.lines().find_map(|l| l.strip_prefix("wchar:")).map(str::trim).map(str::parse::<u64>);
            wchar.and_then(Result::ok).unwrap_or(0)
        };
        let started = std::time::Instant::now();
        while written() < shard_bytes * 3 / 2 {
            assert!(child.try_wait().expect("wait").is_none(), "{signal}: gemv ended before it was killed");
            assert!(started.elapsed().as_secs() < 120, "{signal}: no shard written in 2 minutes");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // Sent at once, without a shell's start-up in between.
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        // SAFETY: `kill` only sends a signal to the child this test started and still waits for.
        let killed = unsafe { libc::kill(pid, number) };
        assert_eq!(killed, 0, "{signal}: {}", std::io::Error::last_os_error());
        let status = child.wait().expect("gemv ends");
        assert!(!status.success(), "{signal}: {status:?}");
        let left = entries(&dir.0);
        // Only a SIGKILL where unnamed files are unavailable can leave the hidden staging
        // directory; the next run removes it.
        let staged = |name: &String| name.starts_with(".nvfp4.gemv-") && name.ends_with(".tmp");
        let expected: Vec<&str> = if signal == "KILL" && left.iter().any(staged) {
            vec![left.iter().find(|n| staged(n)).map_or("", String::as_str), "model"]
        } else {
            vec!["model"]
        };
        assert_eq!(left, expected, "{signal}: something was left");
    }
    let (code, _, stderr) = gemv(&["quantize", "--input", text(&model), "--output", text(&out)]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(entries(&out).len(), shards + 2, "{:?}", entries(&out));
    assert_eq!(entries(&dir.0), ["model", "nvfp4"]);
}

/// `/dev/full` as standard output: one line, exit 2, for every command that prints; a closed
/// pipe ends the output quietly.
#[cfg(target_os = "linux")]
#[test]
fn every_write_to_standard_output_is_checked() {
    let full = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_gemv"))
            .args(args)
            .stdout(std::fs::File::create("/dev/full").expect("/dev/full"))
            .output()
            .expect("gemv runs");
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let bench = ["bench", "--backend", "host", "--shape", "256x256", "--m", "1", "--rounds", "1", "--launches", "1"];
    for args in [
        &["info", "--backend", "host"][..],
        &["check", "--backend", "host", "--gate", "2"],
        &bench,
        &[&bench[..], &["--json", "--cold-mb", "1"]].concat(),
    ] {
        let (code, stderr) = full(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        let last = stderr.trim().lines().last().unwrap_or_default();
        assert!(last.contains("writing standard output: No space left on device"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // The reader leaves before anything is read: no message, the usual status.
    let mut child = Command::new(env!("CARGO_BIN_EXE_gemv"))
        .args(["check", "--backend", "host", "--gate", "2", "--all-cases"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gemv runs");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("gemv ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("standard output") && !stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_name_the_format_reserves_is_refused_before_work() {
    let dir = Dir::new("reserved");
    let (weights, x) = sparse_layer(&dir, 16, 16, 1);
    let y = dir.path("y.safetensors");
    for name in ["__metadata__", ""] {
        let args = ["run", "--weights", text(&weights), "--name", "w", "--input", text(&x), "--output", text(&y)];
        let (code, _, stderr) = gemv(&[&args[..], &["--backend", "host", "--output-name", name]].concat());
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("--output-name:"), "{stderr}");
        assert!(!y.exists());
    }
}

/// A model directory quantized with default options is what ModelOpt's export writes: the
/// configs engines read and the tokenizer beside the weights; `--no-model-files` leaves them out.
#[test]
fn a_quantized_model_directory_is_loadable_as_written() {
    let dir = Dir::new("loadable");
    let model = dir.path("model");
    std::fs::create_dir(&model).expect("model dir");
    let weights: Vec<f32> = (0..32 * 64).map(|i| (i % 13) as f32 - 6.0).collect();
    write_safetensors(
        &model.join("model.safetensors"),
        &[
            ("model.layers.0.mlp.up_proj.weight", "F32", vec![32, 64], f32_bytes(&weights)),
            ("lm_head.weight", "F32", vec![32, 64], f32_bytes(&weights)),
        ],
    );
    let config = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}"#;
    for (name, contents) in [
        ("config.json", config),
        ("tokenizer.json", "{\"version\": \"1.0\"}"),
        ("tokenizer_config.json", "{}"),
        ("generation_config.json", "{\"do_sample\": true}"),
        ("pytorch_model.bin", "old weights"),
        (".cache", "hidden"),
    ] {
        std::fs::write(model.join(name), contents).expect("model file");
    }
    let out = dir.path("nvfp4");
    let (code, _, stderr) = gemv(&["quantize", "--input", text(&model), "--output", text(&out)]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        entries(&out),
        [
            "config.json",
            "generation_config.json",
            "hf_quant_config.json",
            "model.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    let read_json = |name: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(out.join(name)).expect(name)).expect("JSON")
    };
    let written = read_json("config.json");
    assert_eq!(written["architectures"][0], "LlamaForCausalLM", "the input's config is kept");
    assert_eq!(written["quantization_config"]["quant_method"], "modelopt");
    assert_eq!(written["quantization_config"]["ignore"], serde_json::json!(["lm_head"]));
    assert_eq!(read_json("hf_quant_config.json")["quantization"]["quant_algo"], "W4A16_NVFP4");
    assert_eq!(std::fs::read(out.join("tokenizer.json")).expect("copied"), b"{\"version\": \"1.0\"}");

    let bare = dir.path("bare");
    let (code, _, stderr) = gemv(&["quantize", "--input", text(&model), "--output", text(&bare), "--no-model-files"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(entries(&bare), ["model.safetensors", "model.safetensors.index.json"]);
    // A single file has no directory to hold them.
    let single = dir.path("single.safetensors");
    let (code, _, stderr) = gemv(&["quantize", "--input", text(&model), "--output", text(&single), "--no-model-files"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--no-model-files: applies to a directory output"), "{stderr}");
}

/// Options the command would ignore are refused, checks come before work, messages say what is
/// supported, and the exit status follows one rule.
#[test]
fn rough_edges_are_smoothed() {
    let dir = Dir::new("edges");
    let (weights, x) = sparse_layer(&dir, 16, 16, 1);
    let model = dir.path("model.safetensors");
    write_safetensors(&model, &[("a.weight", "F32", vec![1, 16], f32_bytes(&[1e-42; 16]))]);
    let quantize = ["quantize", "--input", text(&model), "--output"];
    let y = dir.path("y.safetensors");
    let run = ["run", "--weights", text(&weights), "--name", "w", "--input", text(&x), "--output", text(&y)];
    let refused: Vec<(Vec<&str>, &str)> = vec![
        (vec!["info", "--emulate", "1.0"], "the emulator runs compute capabilities 7.5 to 12.9"),
        (vec!["info", "--emulate", "100.0"], "the emulator runs compute capabilities 7.5 to 12.9"),
        (vec!["check", "--backend", "cpu", "--device", "0"], "--device: backend cpu has one device"),
        (vec!["check", "--backend", "host", "--emulate", "8.0"], "--emulate: applies to --backend cuda-emu"),
        // quantize runs no backend: its help does not list the device options, and its parser
        // does not take them.
        ([&quantize[..], &["o.safetensors", "--device", "1"]].concat(), "unexpected argument '--device'"),
        ([&quantize[..], &["o.safetensors", "--emulate", "8.0"]].concat(), "unexpected argument '--emulate'"),
        (
            vec!["bench", "--backend", "host", "--family", "fast", "--tier", "w4a16_gemv_batch8"],
            "--family: chooses the family of the dispatch plan",
        ),
        ([&quantize[..], &["o.safetensors", "--names", "a.weight", "--exclude", "*b*"]].concat(), "--exclude:"),
        (vec!["bench", "--backend", "host", "--plot", "/nonexistent-dir/plot.svg"], "--plot: its directory"),
    ];
    for (args, needle) in refused {
        let (code, _, stderr) = gemv(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("proving"), "{args:?}: refused only after work began: {stderr}");
    }
    // Each command's help lists only the options it takes.
    let quantize_help = gemv(&["quantize", "--help"]).1;
    assert!(!quantize_help.contains("--device") && !quantize_help.contains("--emulate"), "{quantize_help}");
    for command in ["bench", "check", "info", "run"] {
        let help = gemv(&[command, "--help"]).1;
        assert!(help.contains("--device") && help.contains("--emulate"), "{command}: {help}");
    }
    // The options that apply are still taken.
    #[cfg(feature = "emulator")]
    {
        let (code, _, stderr) = gemv(&["info", "--backend", "cuda-emu", "--emulate", "12.1"]);
        assert_eq!(code, 0, "{stderr}");
    }

    // A backend not available here is exit 2 for every command (run once said 1).
    if gemv_cuda::driver_present() {
        skip(Requirement::NoCudaDriver, "this machine has a CUDA driver");
    } else {
        let run_on_cuda = [&run[..], &["--backend", "cuda"]].concat();
        for args in [&run_on_cuda[..], &["check", "--backend", "cuda"], &["bench", "--backend", "cuda"]] {
            let (code, _, stderr) = gemv(args);
            assert_eq!(code, 2, "{args:?}: {stderr}");
            assert!(stderr.contains("no CUDA driver"), "{args:?}: {stderr}");
        }
    }

    // A tensor below the smallest representable scale: said, not silent.
    let out = dir.path("tiny.safetensors");
    let (code, _, stderr) = gemv(&[&quantize[..], &[text(&out), "--names", "a.weight"]].concat());
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning: a.weight: every value is below 2688 x 2^-149"), "{stderr}");
}
