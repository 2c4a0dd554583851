//! External references, each computed by the library that defines the behaviour, in a venv
//! under target/ with pinned packages: the codecs by ml_dtypes, `gemv quantize` by NVIDIA
//! ModelOpt's own NVFP4 export (torch and nvidia-modelopt: several GB, so not part of `test`).

use crate::util::{root, run};

const FIXTURE: &str = "crates/gemv-core/tests/fixtures/codecs.tsv";
const SCRIPT: &str = "xtask/scripts/codec_fixture.py";
/// Pinned so that the fixture is reproducible.
const PACKAGES: [&str; 2] = ["ml_dtypes==0.6.0", "numpy==2.4.6"];

/// The pinned venv at `dir` with `packages`; its python.
fn venv_python(dir: &str, packages: &[&str]) -> Result<std::path::PathBuf, String> {
    Ok(crate::util::pinned_venv(dir, packages)?.join("bin/python"))
}

/// Regenerates the fixture, or with `check` compares a fresh one with the committed file.
pub fn regenerate(check: bool) -> Result<(), String> {
    let python = venv_python("target/fixtures-venv", &PACKAGES)?;
    let fresh = root().join("target/codecs.tsv");
    run(&python.to_string_lossy(), &[SCRIPT, &fresh.to_string_lossy()])?;
    let committed = root().join(FIXTURE);
    if check {
        let (a, b) = (std::fs::read(&fresh).map_err(|e| e.to_string())?, std::fs::read(&committed).unwrap_or_default());
        if a != b {
            return Err(format!("{FIXTURE} is stale: run `cargo xtask fixtures`"));
        }
        eprintln!("xtask: {FIXTURE} is fresh");
    } else {
        std::fs::copy(&fresh, &committed).map_err(|e| format!("cannot write {FIXTURE}: {e}"))?;
        eprintln!("xtask: wrote {FIXTURE}");
    }
    Ok(())
}

const MODELOPT_DIR: &str = "crates/gemv-cli/tests/fixtures/modelopt";
const MODELOPT_SCRIPT: &str = "xtask/scripts/modelopt_fixture.py";
const MODELOPT_FILES: [&str; 3] = ["input.safetensors", "expected.safetensors", "quantization_config.json"];
/// Pinned: the fixture is ModelOpt 0.47's export. ModelOpt imports requests and huggingface_hub
/// without declaring them.
const MODELOPT_PACKAGES: [&str; 6] = [
    "torch==2.9.1",
    "nvidia-modelopt==0.47.0",
    "safetensors==0.8.0",
    "numpy==2.4.6",
    "requests==2.34.2",
    "huggingface_hub==2.4.0",
];

/// Regenerates the ModelOpt fixture of `gemv quantize`, or with `check` compares a fresh one with
/// the committed files.
pub fn regenerate_modelopt(check: bool) -> Result<(), String> {
    let python = venv_python("target/modelopt-venv", &MODELOPT_PACKAGES)?;
    let fresh = root().join("target/modelopt-fixture");
    std::fs::create_dir_all(&fresh).map_err(|e| format!("cannot create {}: {e}", fresh.display()))?;
    run(&python.to_string_lossy(), &[MODELOPT_SCRIPT, &fresh.to_string_lossy()])?;
    for file in MODELOPT_FILES {
        let (new, committed) = (fresh.join(file), root().join(MODELOPT_DIR).join(file));
        if check {
            let a = std::fs::read(&new).map_err(|e| e.to_string())?;
            if a != std::fs::read(&committed).unwrap_or_default() {
                return Err(format!("{MODELOPT_DIR}/{file} is stale: run `cargo xtask fixtures --modelopt`"));
            }
        } else {
            std::fs::copy(&new, &committed).map_err(|e| format!("cannot write {}: {e}", committed.display()))?;
        }
    }
    eprintln!("xtask: {MODELOPT_DIR} is {}", if check { "fresh" } else { "written" });
    Ok(())
}
