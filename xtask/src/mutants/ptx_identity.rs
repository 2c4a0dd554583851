//! Equivalence by PTX: a mutant whose every build compiles to the committed PTX (or to the PTX of
//! a mutant already missed) runs the same program on a GPU.

use crate::kernels::emulated_capability;
use std::path::{Path, PathBuf};

/// The PTX of each build of a source, in `kernels::builds_of` order (None: NVRTC rejected it).
pub(super) type BuildsPtx = Vec<Option<Vec<u8>>>;

/// Each build of a source with whether it compiles to its committed PTX.
pub(super) type BuildsIdentical = Vec<(&'static gemv_core::ModuleBuild, bool)>;

/// What the judge needs to compare a mutant's PTX: with the committed PTX, and with the mutants
/// this pass missed.
pub(super) struct PtxCheck<'a> {
    pub(super) identity: &'a PtxIdentity,
    pub(super) source: &'a Path,
    pub(super) missed: &'a MissedPtx,
}

/// The PTX of the mutants this pass judged `Missed`, kept in memory (about 9 MB a mutant of the
/// exact family): a later mutant compiling to the same PTX is the same program on a GPU. Only
/// within one pass: the snapshot, its tests and its committed PTX are fixed for the pass's length,
/// so an earlier verdict was reached by the same judges.
#[derive(Default)]
pub(super) struct MissedPtx(Vec<(usize, BuildsPtx)>);

impl MissedPtx {
    /// The first missed mutant whose every build's PTX equals `builds`.
    pub(super) fn same_ptx(&self, builds: &BuildsPtx) -> Option<usize> {
        self.0.iter().find(|(_, ptx)| ptx == builds).map(|&(index, _)| index)
    }

    pub(super) fn record(&mut self, index: usize, builds: BuildsPtx) {
        self.0.push((index, builds));
    }
}

/// Whether a source's every build compiles to the PTX committed in the snapshot: what the GPU runs.
/// The committed PTX is the unmutated sources' (CI's `cargo xtask kernels --check`; the pass
/// checks it again before judging).
pub(super) struct PtxIdentity {
    pub(super) nvrtc: crate::kernels::Nvrtc,
    pub(super) committed: PathBuf,
    pub(super) out: PathBuf,
}

impl PtxIdentity {
    pub(super) fn new(tree: &Path, work: &Path) -> Result<Self, String> {
        let out = work.join("ptx");
        std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
        Ok(Self {
            nvrtc: crate::kernels::Nvrtc::find_or_install()?,
            committed: tree.join(crate::kernels::PTX_DIR),
            out,
        })
    }

    /// Whether every build of `source` compiles to its committed PTX.
    pub(super) fn identical(&self, source: &Path) -> Result<bool, String> {
        Ok(self.compile_builds(source)?.0.iter().all(|&(_, same)| same))
    }

    /// Each build of every source `file` reaches (itself, or for a header every source beside
    /// it) with whether it compiles to its committed PTX (a build NVRTC rejects does not), and
    /// the PTX each build compiled to.
    pub(super) fn compile_builds(&self, file: &Path) -> Result<(BuildsIdentical, BuildsPtx), String> {
        let mut identical = Vec::new();
        let mut compiled = Vec::new();
        for source in crate::kernels::sources_affected_by(file)? {
            let (same, ptx) = self.compile_source_builds(&source)?;
            identical.extend(same);
            compiled.extend(ptx);
        }
        Ok((identical, compiled))
    }

    fn compile_source_builds(&self, source: &Path) -> Result<(BuildsIdentical, BuildsPtx), String> {
        let mut identical = Vec::new();
        let mut compiled = Vec::new();
        for build in crate::kernels::builds_of(source)? {
            let out = self.out.join(format!("{}.ptx", build.ptx));
            let _ = std::fs::remove_file(&out);
            let ptx = crate::kernels::compile(&self.nvrtc, source, build, &out, &[])
                .ok()
                .and_then(|()| std::fs::read(&out).ok());
            let committed = self.committed.join(format!("{}.ptx", build.ptx));
            let committed =
                std::fs::read(&committed).map_err(|e| format!("cannot read {}: {e}", committed.display()))?;
            identical.push((build, ptx.as_ref() == Some(&committed)));
            compiled.push(ptx);
        }
        Ok((identical, compiled))
    }
}

/// The capabilities gate 7 must judge a mutant on: those of the builds whose PTX changed. A build
/// that compiles to its committed PTX runs the code the unmutated kernels ran through gate 7
/// already (the argument of the judge's `Outcome::IdenticalPtx`, build by build), so a mutant in code only
/// one build compiles (the sm_75 build's scale table, the sm_89 build's conversions) meets gate 7
/// on that build alone, with both cores. The builds for programmatic dependent launch meet no
/// gate (the emulator's tests judge them), so their changes add none.
pub(super) fn builds_that_changed(builds: &[(&gemv_core::ModuleBuild, bool)]) -> Vec<String> {
    builds
        .iter()
        .filter(|&&(build, same)| !same && !build.dependent_launch)
        .map(|&(build, _)| emulated_capability(build))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutant_shares_a_verdict_only_with_ptx_equal_in_every_build() {
        let mut missed = MissedPtx::default();
        let ptx = |text: &str| Some(text.as_bytes().to_vec());
        missed.record(7, vec![ptx("a"), ptx("b")]);
        missed.record(9, vec![ptx("a"), None]);
        assert_eq!(missed.same_ptx(&vec![ptx("a"), ptx("b")]), Some(7));
        assert_eq!(missed.same_ptx(&vec![ptx("a"), None]), Some(9), "a build NVRTC rejects must be rejected alike");
        assert_eq!(missed.same_ptx(&vec![ptx("a"), ptx("c")]), None, "one build differing is another program");
        assert_eq!(missed.same_ptx(&vec![ptx("a")]), None);
    }
}
