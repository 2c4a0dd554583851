//! `cargo xtask mutants --kernels`: the pass over the kernel sources, from a snapshot of HEAD,
//! each mutant judged in turn and written to the report.

use super::judge::{Outcome, Timeouts, gates_for, judge, second_chance, warm_test_builds};
use super::mutations::mutants_of;
use super::ptx_identity::{MissedPtx, PtxCheck, PtxIdentity};
use super::verdicts::{self, Verdict};
use crate::util::{self, root};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub(super) fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| e.to_string())?.flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Which kernel mutants to judge.
pub(super) struct Selection {
    pub(super) from: usize,
    pub(super) limit: usize,
    pub(super) only: Option<Vec<usize>>,
    /// One source's mutants (its file stem), numbered within it.
    pub(super) source: Option<String>,
    /// Print the mutants, judge none.
    pub(super) list: bool,
    /// Only the mutants with no verdict in docs/mutants/ as the sources stand (`--unjudged`).
    pub(super) unjudged: bool,
}

impl Selection {
    /// The mutants to judge, of `count`: `--only`'s in the order given (so a pass can judge the
    /// lines that matter most first; each once), else from `--from` on; at most `--limit`.
    pub(super) fn indices(&self, count: usize) -> Vec<usize> {
        match &self.only {
            Some(only) => {
                let mut seen = std::collections::BTreeSet::new();
                let wanted = only.iter().copied().filter(|&i| i >= self.from && i < count && seen.insert(i));
                wanted.take(self.limit).collect()
            }
            None => (self.from..count).take(self.limit).collect(),
        }
    }
}

/// A checkout of HEAD under `work`, so the mutants are built from a fixed tree however the
/// working tree changes meanwhile (the pass takes an hour or more).
pub(super) fn snapshot(work: &Path) -> Result<PathBuf, String> {
    let tree = work.join("tree");
    let tree_arg = tree.to_string_lossy().into_owned();
    let _ = Command::new("git").args(["worktree", "remove", "--force", &tree_arg]).current_dir(root()).status();
    let _ = std::fs::remove_dir_all(&tree);
    util::run("git", &["worktree", "prune"])?;
    util::run("git", &["worktree", "add", "--detach", &tree_arg, "HEAD"])?;
    Ok(tree)
}

pub(super) fn run(selection: Selection) -> Result<(), String> {
    let work = root().join("target/kernel-mutants");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    // `--list` reads the working tree's sources and leaves the snapshot alone, so it can run while
    // a pass judges (recreating the snapshot would pull the tree from under it); the numbers are the
    // same as a pass's from HEAD as long as the kernel sources have no uncommitted change.
    let tree = if selection.list { root() } else { snapshot(&work)? };
    let source_dir = tree.join(crate::kernels::KERNEL_DIR);
    let scratch = work.join("src");
    let sources: Vec<PathBuf> = crate::kernels::files_in(&source_dir)?
        .into_iter()
        .filter(|p| selection.source.as_ref().is_none_or(|stem| p.file_stem().is_some_and(|s| s == stem.as_str())))
        .collect();
    if sources.is_empty() {
        return Err(format!("no kernel source {:?} in {}", selection.source, source_dir.display()));
    }
    let mut mutants = Vec::new();
    // Each mutant's source stem and number within it: how docs/mutants/ records it.
    let mut numbered: Vec<(String, usize)> = Vec::new();
    // The indices `--unjudged` leaves in (every one without it).
    let mut pending = std::collections::BTreeSet::new();
    for file in &sources {
        let stem = file.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let of_file = mutants_of(file)?;
        let offset = mutants.len();
        match selection.unjudged {
            true => pending.extend(verdicts::unjudged(&stem, &of_file)?.into_iter().map(|n| offset + n)),
            false => pending.extend(offset..offset + of_file.len()),
        }
        numbered.extend((0..of_file.len()).map(|number| (stem.clone(), number)));
        mutants.extend(of_file);
    }
    eprintln!("xtask: {} kernel mutants in {} source(s)", mutants.len(), sources.len());
    if selection.unjudged {
        eprintln!("xtask: {} of them without a verdict as the sources stand", pending.len());
    }
    let chosen: Vec<usize> =
        selection.indices(mutants.len()).into_iter().filter(|index| pending.contains(index)).collect();
    if selection.list {
        for index in chosen {
            let mutant = &mutants[index];
            let relative = mutant.file.strip_prefix(&source_dir).map_err(|e| e.to_string())?;
            println!(
                "#{index} {}:{} `{}` -> `{}`",
                relative.display(),
                mutant.line,
                mutant.original,
                mutant.replacement
            );
        }
        return Ok(());
    }
    let _ = super::judge::KERNEL_CCACHE.set(crate::provision::compiler_cache());
    // The unmutated sources must pass, or every mutant would look killed.
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(&source_dir, &scratch)?;
    let exact_gates = gates_for(Path::new("w4a16_gemv.cu"));
    warm_test_builds(&tree, &scratch)?;
    let identity = PtxIdentity::new(&tree, &work)?;
    // The `.cu` sources cover every build; a header's check would compile them all again.
    for source in sources.iter().filter(|s| s.extension().is_some_and(|e| e == "cu")) {
        let copy = scratch.join(source.file_name().unwrap_or_default());
        if !identity.identical(&copy)? {
            return Err(format!(
                "{} does not compile to its committed PTX: run `cargo xtask kernels`",
                source.display()
            ));
        }
    }
    let baseline = judge(&tree, &scratch, Timeouts::BASELINE, &exact_gates, None)?;
    let timeouts = match baseline.outcome {
        Outcome::Missed => Timeouts::from_baseline(baseline.times),
        other => return Err(format!("the unmutated kernels do not pass the gates ({other:?})")),
    };
    eprintln!(
        "xtask: timeouts per mutant: {:.0} s for the quick gates, {:.0} s for the emulator's tests, {:.0} s for gate 7",
        timeouts.quick.as_secs_f64(),
        timeouts.emulator_tests.as_secs_f64(),
        timeouts.large.as_secs_f64()
    );
    let second_chance_timeout = Duration::from_secs(600);
    let mut report = String::new();
    let mut missed = MissedPtx::default();
    let mut counts = std::collections::BTreeMap::new();
    let report_name = if selection.only.is_some() { "report-rejudged.txt" } else { "report.txt" };
    let judged = format!(
        "{} {}",
        command_output(&tree, "date", &["-u", "+%Y-%m-%d"])?,
        command_output(&tree, "git", &["rev-parse", "--short", "HEAD"])?
    );
    for index in chosen {
        let mutant = &mutants[index];
        let relative = mutant.file.strip_prefix(&source_dir).map_err(|e| e.to_string())?;
        let original = std::fs::read_to_string(&mutant.file).map_err(|e| e.to_string())?;
        let mutated = format!("{}{}{}", &original[..mutant.start], mutant.replacement, &original[mutant.end..]);
        let _ = std::fs::remove_dir_all(&scratch);
        copy_dir(&source_dir, &scratch)?;
        std::fs::write(scratch.join(relative), mutated).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let source = scratch.join(relative);
        let check = PtxCheck { identity: &identity, source: &source, missed: &missed };
        let judgement = judge(&tree, &scratch, timeouts, &gates_for(&mutant.file), Some(check))?;
        let mut outcome = judgement.outcome;
        if outcome == Outcome::Missed {
            outcome = second_chance(&tree, &scratch, second_chance_timeout)?;
            if let (Outcome::Missed, Some(ptx)) = (outcome, judgement.ptx) {
                missed.record(index, ptx);
            }
        }
        let line = format!(
            "#{index} {}:{} `{}` -> `{}`: {outcome:?} ({:.0} s)",
            relative.display(),
            mutant.line,
            mutant.original,
            mutant.replacement,
            started.elapsed().as_secs_f64()
        );
        eprintln!("xtask: {line}");
        report.push_str(&line);
        report.push('\n');
        let kind = match outcome {
            Outcome::SamePtxAs(_) => "SamePtxAs".to_string(),
            other => format!("{other:?}"),
        };
        *counts.entry(kind).or_insert(0usize) += 1;
        std::fs::write(work.join(report_name), &report).map_err(|e| e.to_string())?;
        let (stem, number) = &numbered[index];
        let verdict = match outcome {
            Outcome::SamePtxAs(earlier) => format!("SamePtxAs(#{})", numbered[earlier].1),
            other => format!("{other:?}"),
        };
        verdicts::record(
            stem,
            Verdict {
                mutant: *number,
                key: mutant.key.clone(),
                line: mutant.line,
                original: mutant.original.clone(),
                replacement: mutant.replacement.clone(),
                verdict,
                judged: judged.clone(),
                argument: String::new(),
            },
        )?;
    }
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    report.push_str(&format!("summary: {}\n", summary.join(", ")));
    std::fs::write(work.join(report_name), &report).map_err(|e| e.to_string())?;
    eprintln!("xtask: {}; report in target/kernel-mutants/{report_name}", summary.join(", "));
    eprintln!(
        "xtask: verdicts recorded in docs/mutants/; argue each `Missed` one there, then `cargo xtask mutants --summary`"
    );
    Ok(())
}

/// What `program args` prints in `dir`, trimmed (today's date, the snapshot's commit).
fn command_output(dir: &Path, program: &str, args: &[&str]) -> Result<String, String> {
    let output =
        Command::new(program).args(args).current_dir(dir).output().map_err(|e| format!("cannot run {program}: {e}"))?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keeps_its_order_and_every_selection_stays_in_range() {
        let selection = |from, limit, only: Option<Vec<usize>>| Selection {
            from,
            limit,
            only,
            source: None,
            list: false,
            unjudged: false,
        };
        assert_eq!(selection(0, usize::MAX, Some(vec![7, 2, 99, 5, 7])).indices(10), [7, 2, 5]);
        assert_eq!(selection(3, 1, Some(vec![2, 7, 5])).indices(10), [7]);
        assert_eq!(selection(8, usize::MAX, None).indices(10), [8, 9]);
        assert_eq!(selection(2, 3, None).indices(10), [2, 3, 4]);
    }
}
