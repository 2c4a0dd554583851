//! Running commands and finding the workspace.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Runs a command in the workspace root, echoing it; fails on a non-zero exit.
pub fn run(program: &str, args: &[&str]) -> Result<(), String> {
    run_with_env(program, args, &[])
}

/// [`run`] with extra environment variables.
pub fn run_with_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask: $ {}{program} {}", shown.concat(), args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .status()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("`{program} {}` failed ({status})", args.join(" "))) }
}

/// Whether a program can be started (`program --version` exits 0).
pub fn has(program: &str, args: &[&str]) -> bool {
    Command::new(program).args(args).output().is_ok_and(|o| o.status.success())
}

/// A venv at `dir` (under the workspace) with exactly `packages` installed from PyPI: made and
/// installed on first use, and again whenever the package list changes (a marker file records
/// it). Returns the venv's directory.
pub fn pinned_venv(dir: &str, packages: &[&str]) -> Result<PathBuf, String> {
    let venv = root().join(dir);
    let marker = venv.join(".installed");
    let wanted = packages.join("\n");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
        run("python3", &["-m", "venv", &venv.to_string_lossy()])?;
        let mut install = vec!["-m", "pip", "install", "--quiet", "--disable-pip-version-check"];
        install.extend(packages);
        run(&venv.join("bin/python").to_string_lossy(), &install)?;
        std::fs::write(&marker, &wanted).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    }
    Ok(venv)
}

/// `relative` under the venv's `site-packages` (whatever its python version), if `probe` (a
/// path below it) exists there.
pub fn site_package(venv: &std::path::Path, relative: &str, probe: &str) -> Result<PathBuf, String> {
    let lib = venv.join("lib");
    std::fs::read_dir(&lib)
        .map_err(|e| format!("cannot read {}: {e}", lib.display()))?
        .flatten()
        .map(|entry| entry.path().join("site-packages").join(relative))
        .find(|path| path.join(probe).exists())
        .ok_or_else(|| format!("{relative}/{probe} not found under {}", lib.display()))
}

/// Runs `cargo ARGS` (with `--message-format=json` among them) and returns the path of the
/// executable it reports for the target `target_name`.
pub fn cargo_json_executable(args: &[&str], env: &[(&str, String)], target_name: &str) -> Result<String, String> {
    let output = Command::new("cargo")
        .args(args)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo {} failed:\n{}", args.join(" "), String::from_utf8_lossy(&output.stderr)));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .rev()
        .filter(|line| line.contains(&format!("\"name\":\"{target_name}\"")) && line.contains("\"executable\":\""))
        .find_map(|line| line.split("\"executable\":\"").nth(1)?.split('"').next().map(str::to_string))
        .ok_or(format!("cargo did not report an executable for {target_name}"))
}

/// Writes a generated artifact (`relative` to the root), or with `check` fails when the committed
/// one differs from `fresh`, naming the command that regenerates it.
pub fn write_or_check(relative: &str, fresh: &str, check: bool, command: &str) -> Result<(), String> {
    let path = root().join(relative);
    if check {
        if std::fs::read_to_string(&path).ok().as_deref() != Some(fresh) {
            return Err(format!("{relative} is stale: run `cargo xtask {command}`"));
        }
        return Ok(());
    }
    std::fs::write(&path, fresh).map_err(|e| format!("cannot write {relative}: {e}"))?;
    eprintln!("xtask: wrote {relative}");
    Ok(())
}
