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
        KERNELS.iter().position(|spec| spec.name == name).map_or(Self::NONE, Self::for_registry_index)
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
