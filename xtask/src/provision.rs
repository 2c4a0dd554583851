//! Installs what the tests need on a fresh machine, only when it is missing.

use crate::util::{has, run};

/// rustfmt and clippy through rustup.
pub fn rust_components() -> Result<(), String> {
    for (probe, component) in [("cargo-fmt", "rustfmt"), ("cargo-clippy", "clippy")] {
        if !has(probe, &["--version"]) {
            run("rustup", &["component", "add", component])?;
        }
    }
    Ok(())
}
