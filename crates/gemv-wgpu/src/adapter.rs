//! Adapter choice: a name given in `GEMV_WGPU_ADAPTER` wins; otherwise a discrete GPU, then an
//! integrated one, then a virtual one, then a software adapter (lavapipe, WARP) as the fallback.

/// Picks an adapter whose name contains this (case-insensitive).
pub const ADAPTER_ENV: &str = "GEMV_WGPU_ADAPTER";

/// How to choose among the adapters found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AdapterChoice {
    /// `GEMV_WGPU_ADAPTER` if set, else the best by device type.
    #[default]
    FromEnvironment,
    /// The first adapter whose name contains this (case-insensitive).
    NameContains(String),
    /// The best by device type.
    Best,
    /// As [`AdapterChoice::FromEnvironment`], among the adapters of a real GPU only: a software
    /// adapter (lavapipe, WARP) is never opened, and where there is no other the choice fails
    /// before any device is created. For callers that fall back to a CPU path of their own.
    Hardware,
    /// The adapter at this position in the order the system lists them (0 first); the error for
    /// a position past the end lists them all.
    Index(usize),
}

impl AdapterChoice {
    pub(crate) fn name_filter(&self) -> Option<String> {
        match self {
            AdapterChoice::FromEnvironment | AdapterChoice::Hardware => {
                std::env::var(ADAPTER_ENV).ok().filter(|s| !s.is_empty())
            }
            AdapterChoice::NameContains(name) => Some(name.clone()),
            AdapterChoice::Best | AdapterChoice::Index(_) => None,
        }
    }
}

/// Lower is better.
pub(crate) fn rank(device_type: wgpu::DeviceType) -> u8 {
    match device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// Chooses from `adapters` (with their infos) per `choice`; Err lists what was found.
pub(crate) fn choose(adapters: Vec<wgpu::Adapter>, choice: &AdapterChoice) -> Result<wgpu::Adapter, String> {
    let found: Vec<String> = adapters
        .iter()
        .map(|a| format!("{} ({:?}, {:?})", a.get_info().name, a.get_info().device_type, a.get_info().backend))
        .collect();
    if let AdapterChoice::Index(index) = *choice {
        return adapters
            .into_iter()
            .nth(index)
            .ok_or_else(|| format!("no adapter {index}: {} found ({})", found.len(), list(&found)));
    }
    let adapters: Vec<wgpu::Adapter> = if *choice == AdapterChoice::Hardware {
        let hardware: Vec<wgpu::Adapter> =
            adapters.into_iter().filter(|a| a.get_info().device_type != wgpu::DeviceType::Cpu).collect();
        if hardware.is_empty() {
            return Err(format!("no hardware adapter, only software ones ({})", list(&found)));
        }
        hardware
    } else {
        adapters
    };
    if let Some(filter) = choice.name_filter() {
        let wanted = filter.to_lowercase();
        return adapters
            .into_iter()
            .find(|a| a.get_info().name.to_lowercase().contains(&wanted))
            .ok_or_else(|| format!("no adapter name contains {filter:?} (found: {})", list(&found)));
    }
    adapters
        .into_iter()
        .min_by_key(|a| rank(a.get_info().device_type))
        .ok_or_else(|| "no wgpu adapter found (no Vulkan, Metal or DX12 driver; on Debian install mesa-vulkan-drivers for lavapipe)".to_string())
}

fn list(found: &[String]) -> String {
    if found.is_empty() { "none".into() } else { found.join(", ") }
}
