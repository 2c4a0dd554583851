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

/// g++ builds the CUDA kernels for the emulator; Debian's package when it is missing.
pub fn host_compiler() -> Result<(), String> {
    if has("g++", &["--version"]) {
        return Ok(());
    }
    apt_install(&["g++"])
}

/// ccache for the kernel mutation pass: a mutant changes one kernel source, so the emulator's
/// other compilation units (its runtime, the other family, the test kernels) come from the
/// cache. Debian's package when it is missing and apt-get exists; whether it is there now.
pub fn compiler_cache() -> bool {
    if has("ccache", &["--version"]) {
        return true;
    }
    if !has("apt-get", &["--version"]) {
        return false;
    }
    match apt_install(&["ccache"]) {
        Ok(()) => has("ccache", &["--version"]),
        Err(error) => {
            eprintln!("xtask: ccache not installed ({error}); every mutant recompiles every unit");
            false
        }
    }
}

/// `apt-get install -y` (with sudo when not root), after one `apt-get update`.
pub fn apt_install(packages: &[&str]) -> Result<(), String> {
    let root = std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"));
    let (program, prefix): (&str, Vec<&str>) = if root { ("apt-get", vec![]) } else { ("sudo", vec!["apt-get"]) };
    let mut update = prefix.clone();
    update.extend(["update", "-q"]);
    run(program, &update)?;
    let mut install = prefix;
    install.extend(["install", "-y", "-q", "--no-install-recommends"]);
    install.extend(packages);
    run(program, &install)
}

/// lavapipe (Debian's mesa-vulkan-drivers) and the Vulkan loader, so the wgpu tests have an
/// adapter on a machine without a GPU. Installed only where apt-get exists and it is missing.
pub fn vulkan_software_driver() -> Result<(), String> {
    let icd_dirs = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"];
    let has_lavapipe = icd_dirs.iter().any(|dir| {
        std::fs::read_dir(dir)
            .is_ok_and(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd")))
    });
    let has_loader = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libvulkan.so.1").exists()
        || std::path::Path::new("/usr/lib/aarch64-linux-gnu/libvulkan.so.1").exists();
    if has_lavapipe && has_loader {
        return Ok(());
    }
    if !has("apt-get", &["--version"]) {
        eprintln!("xtask: no lavapipe and no apt-get: the wgpu tests will skip unless GEMV_REQUIRE_WGPU is set");
        return Ok(());
    }
    apt_install(&["mesa-vulkan-drivers", "libvulkan1"])
}
