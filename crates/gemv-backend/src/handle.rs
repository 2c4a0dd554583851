//! Kernel handles: the registry index plus one, so that 0 always means "not resolved" and every
//! backend agrees on what a handle names.

use gemv_core::{KERNELS, KernelSpec};

/// A resolved kernel, or [`KernelHandle::NONE`] (0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct KernelHandle(u64);

impl KernelHandle {
    /// Not resolved.
    pub const NONE: Self = Self(0);

    /// The handle of `KERNELS[index]`.
    pub fn for_registry_index(index: usize) -> Self {
        if index < KERNELS.len() { Self(index as u64 + 1) } else { Self::NONE }
    }

    /// The handle of the kernel named `name`, or NONE when it is not in the registry.
    pub fn for_name(name: &str) -> Self {
        gemv_core::kernel_index(name).map_or(Self::NONE, Self::for_registry_index)
    }

    /// The raw value (0 = not resolved).
    pub fn raw(self) -> u64 {
        self.0
    }

    /// Whether this names a kernel.
    pub fn is_resolved(self) -> bool {
        self.registry_index().is_some()
    }

    /// Index into [`KERNELS`].
    pub fn registry_index(self) -> Option<usize> {
        let index = usize::try_from(self.0).ok()?.checked_sub(1)?;
        (index < KERNELS.len()).then_some(index)
    }

    /// The kernel's registry entry.
    pub fn spec(self) -> Option<&'static KernelSpec> {
        self.registry_index().map(|index| &KERNELS[index])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_every_registry_index_and_nothing_past_it() {
        for (index, spec) in KERNELS.iter().enumerate() {
            let handle = KernelHandle::for_registry_index(index);
            assert_eq!((handle.raw(), handle.registry_index()), (index as u64 + 1, Some(index)));
            assert_eq!(KernelHandle::for_name(spec.name), handle);
        }
        for past in [KERNELS.len(), KERNELS.len() + 1, usize::MAX] {
            assert_eq!(KernelHandle::for_registry_index(past), KernelHandle::NONE, "index {past}");
        }
        assert!(!KernelHandle::NONE.is_resolved() && KernelHandle::for_name("w4a16_gemv_batch9") == KernelHandle::NONE);
        // A raw value one past the registry (say, from another build) names nothing.
        let stale = KernelHandle(KERNELS.len() as u64 + 1);
        assert_eq!((stale.registry_index(), stale.spec().map(|s| s.name)), (None, None));
    }
}
