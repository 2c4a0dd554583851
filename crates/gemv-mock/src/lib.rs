//! gemv-mock: the host reference backend.
//!
//! It executes the exact numeric contract ([`gemv_core::gemv_contract`]) on the CPU, threaded over
//! N. All tiers share that one implementation; a tier only caps M. Tests choose which kernels are
//! "present" (to simulate a target missing tiers) and read a log of which kernel ran for which M.
//! The independent f64 reference lives beside the contract in gemv-core
//! ([`gemv_core::f64_reference`]) and is re-exported here.
#![warn(missing_docs)]

mod backend;

pub use backend::{GROUPED, GroupedHook, LaunchHook, LaunchRecord, MockBackend, UnknownKernel};
pub use gemv_core::{ReferenceOutput, f64_reference};

/// The README's code, compiled as a doctest (its engine call is marked `ignore`: it needs a GPU).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExample;

/// docs/api.md's convenience-path example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/api.md")]
struct ApiExample;
