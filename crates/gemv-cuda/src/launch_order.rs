//! How the CUDA paths enqueue their kernels on a stream: one after the other, or as programmatic
//! dependents of the kernel before them (sm_90 and newer).

use crate::ptx::{self, ModuleBuild};

/// Whether a launch may start before the kernel before it on the stream has finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LaunchOrder {
    /// CUDA's default: a launch starts once everything before it on the stream has finished.
    #[default]
    Serialized,
    /// Programmatic dependent launch (sm_90 and newer): a launch may start once every block of the
    /// kernel before it has started and signalled (`griddepcontrol.launch_dependents`, which every
    /// gemv kernel does at its start) or ended. Its kernels, from their module's build for such
    /// launches, start streaming their weights at once and wait for the previous kernel to finish
    /// (its writes visible) before they read X or the routing or write Y. The previous kernel may
    /// be anyone's: the wait covers all of it. The bits are those of a serialized launch.
    ProgrammaticDependent,
}

impl LaunchOrder {
    /// The build of `module` that launches in this order run on a device of compute capability
    /// `capability`: `None` where the device cannot run the module, or (dependent launches)
    /// below sm_90.
    pub fn module_build(self, module: &str, capability: (i32, i32)) -> Option<&'static ModuleBuild> {
        match self {
            LaunchOrder::Serialized => ptx::module_build(module, capability),
            LaunchOrder::ProgrammaticDependent => ptx::dependent_module_build(module, capability),
        }
    }

    /// [`gemv_backend::Error::Unsupported`] where a device of compute capability `capability`
    /// cannot launch in this order.
    pub fn check(self, capability: (i32, i32)) -> gemv_backend::Result<()> {
        // The builds table decides where such launches exist: where the exact family has a build
        // for them.
        match self {
            LaunchOrder::ProgrammaticDependent if self.module_build(gemv_core::MODULE_NAME, capability).is_none() => {
                Err(gemv_backend::Error::Unsupported {
                    backend: "cuda",
                    what: "programmatic dependent launches below sm_90",
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependent_launches_run_the_dependent_builds_from_sm_90_only() {
        let exact = gemv_core::MODULE_NAME;
        assert!(LaunchOrder::ProgrammaticDependent.check((8, 9)).is_err());
        assert!(LaunchOrder::ProgrammaticDependent.check((9, 0)).is_ok());
        assert!(LaunchOrder::Serialized.check((7, 5)).is_ok());
        assert_eq!(LaunchOrder::ProgrammaticDependent.module_build(exact, (8, 9)), None);
        let dependent = LaunchOrder::ProgrammaticDependent.module_build(exact, (9, 0)).expect("sm_90");
        assert!(dependent.dependent_launch);
        let serialized = LaunchOrder::Serialized.module_build(exact, (9, 0)).expect("sm_90");
        assert!(!serialized.dependent_launch);
    }
}
