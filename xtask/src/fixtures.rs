//! The external codec reference: ml_dtypes (PyPI) run in a venv under target/.

use crate::util::{root, run};

const FIXTURE: &str = "crates/gemv-core/tests/fixtures/codecs.tsv";
const SCRIPT: &str = "xtask/scripts/codec_fixture.py";
/// Pinned so that the fixture is reproducible.
const PACKAGES: [&str; 2] = ["ml_dtypes==0.6.0", "numpy==2.4.6"];

/// Regenerates the fixture, or with `check` compares a fresh one with the committed file.
pub fn regenerate(check: bool) -> Result<(), String> {
    let venv = root().join("target/fixtures-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        run("python3", &["-m", "venv", &venv.to_string_lossy()])?;
    }
    let mut install = vec!["-m", "pip", "install", "--quiet"];
    install.extend(PACKAGES);
    run(&python.to_string_lossy(), &install)?;
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
