//! The figures the README reports for `gemv bench`, and the closing line that sets this
//! machine's numbers beside them: the README's machines are not the reader's, so the line says
//! what differs and which column compares like with like.

use super::Measurement;
use super::report::percent;
use gemv_backend::{DeviceInfo, DeviceKind};

/// What a figure's percentage divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// The device's nominal peak bandwidth (`% peak`).
    Peak,
    /// A memory copy timed in the same run (`% copy`).
    Copy,
}

/// One figure of the README: a family's dispatch plan on one shape and M.
#[derive(Debug, Clone, Copy)]
pub struct ReadmeFigure {
    /// The backend that measured it (`cuda`, `cpu`).
    pub backend: &'static str,
    /// The bench arm it is: `plan` (the exact family's plan) or `fast` (the fast family's).
    pub tier: &'static str,
    /// The machine, as the README names it.
    pub machine: &'static str,
    /// A word of the device's name that identifies the same model here (`H200`); `None` where
    /// the device's name does not carry its model (the CPU backend names its SIMD path).
    pub model: Option<&'static str>,
    /// When.
    pub date: &'static str,
    /// The bench's shape label.
    pub shape: &'static str,
    /// Rows.
    pub m: usize,
    /// Median time of one launch, microseconds.
    pub micros: f64,
    /// The percentage the README prints beside it.
    pub percent: f64,
    /// What that percentage divides by.
    pub share: Share,
}

const H200: (&str, Option<&str>, &str) = ("an NVIDIA H200", Some("H200"), "2026-12-04");
const EPYC: (&str, Option<&str>, &str) = ("a 2-core AMD EPYC (Zen 5) VM", None, "2026-12-05");

const fn gpu(tier: &'static str, shape: &'static str, m: usize, micros: f64, percent: f64) -> ReadmeFigure {
    ReadmeFigure {
        backend: "cuda",
        tier,
        machine: H200.0,
        model: H200.1,
        date: H200.2,
        shape,
        m,
        micros,
        percent,
        share: Share::Peak,
    }
}

const fn cpu(m: usize, micros: f64, percent: f64) -> ReadmeFigure {
    ReadmeFigure {
        backend: "cpu",
        tier: "plan",
        machine: EPYC.0,
        model: EPYC.1,
        date: EPYC.2,
        shape: "qkv/o",
        m,
        micros,
        percent,
        share: Share::Copy,
    }
}

/// Every figure of the README's "What the main job measures" (a test reads the README and
/// checks each one is printed there as it is here).
pub const README_FIGURES: &[ReadmeFigure] = &[
    gpu("plan", "qkv/o", 1, 14.0, 22.0),
    gpu("plan", "ffn-up", 1, 30.9, 33.8),
    gpu("plan", "ffn-down", 1, 36.0, 29.1),
    gpu("plan", "qkv/o", 2, 20.8, 14.8),
    gpu("plan", "ffn-up", 2, 47.3, 22.1),
    gpu("plan", "ffn-down", 2, 61.3, 17.1),
    gpu("plan", "qkv/o", 4, 26.5, 11.6),
    gpu("plan", "ffn-up", 4, 61.6, 17.0),
    gpu("plan", "ffn-down", 4, 86.7, 12.1),
    gpu("plan", "qkv/o", 8, 38.0, 8.2),
    gpu("plan", "ffn-up", 8, 85.3, 12.3),
    gpu("plan", "ffn-down", 8, 128.1, 8.2),
    gpu("fast", "ffn-up", 1, 28.6, 36.5),
    gpu("fast", "ffn-down", 1, 33.7, 31.0),
    gpu("fast", "ffn-up", 8, 32.7, 32.1),
    gpu("fast", "ffn-down", 8, 40.6, 25.9),
    cpu(1, 355.3, 105.3),
    cpu(8, 719.6, 52.5),
];

/// The closing line: each row of this run that the README also reports, there and here, and
/// what to expect from a different machine. `None` where the backend is not one the README
/// measures a speed for (the host reference, the emulator, a software GPU).
pub fn closing_line(info: &DeviceInfo, rows: &[Measurement]) -> Option<String> {
    if matches!(info.kind, DeviceKind::Reference | DeviceKind::Emulator | DeviceKind::SoftwareGpu) {
        return None;
    }
    let figures: Vec<&ReadmeFigure> = README_FIGURES.iter().filter(|f| f.backend == info.backend).collect();
    let Some(first) = figures.first() else {
        let machines: Vec<String> = README_FIGURES.iter().fold(Vec::new(), |mut seen, f| {
            let entry = format!("{} on {}", f.backend, f.machine);
            if !seen.contains(&entry) {
                seen.push(entry);
            }
            seen
        });
        return Some(format!(
            "the README reports no {} figures to compare with (it has {})",
            info.backend,
            machines.join(" and ")
        ));
    };
    let column = match first.share {
        Share::Peak => "% peak",
        Share::Copy => "% copy",
    };
    let pairs: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let figure = figures.iter().find(|f| f.tier == row.tier && f.shape == row.shape && f.m == row.m)?;
            let here = match figure.share {
                Share::Peak => row.percent_peak,
                Share::Copy => row.percent_copy,
            };
            Some(format!(
                "{}{} M = {}: {:.1} us there ({:.1}%), {:.1} us here ({})",
                row.shape,
                if row.tier == "fast" { " fast" } else { "" },
                row.m,
                figure.micros,
                figure.percent,
                row.micros,
                percent(here)
            ))
        })
        .collect();
    let source = format!("the README's {} figures ({}, {})", info.backend, first.machine, first.date);
    if pairs.is_empty() {
        let mut covered: Vec<String> = figures.iter().map(|f| format!("{} M = {}", f.shape, f.m)).collect();
        covered.dedup();
        return Some(format!(
            "{source} cover {}; none of them ran here, so there is nothing to compare",
            covered.join(", ")
        ));
    }
    let same_model = first.model.is_some_and(|model| info.name.contains(model));
    let expectation = match (same_model, first.share) {
        (true, _) => "the same model: expect times within a few percent of the README's".to_string(),
        (false, Share::Peak) => format!(
            "another GPU ({}): times follow its memory bandwidth; {column} compares each with its own memory's peak",
            info.name
        ),
        (false, Share::Copy) => format!(
            "on another CPU times follow its memory bandwidth and cores; {column} compares each with its own memory's \
             copy speed"
        ),
    };
    Some(format!("compared with {source}: {}; {expectation}", pairs.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemv_backend::{MultiplyAdd, TimerKind};

    const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));

    /// The README's GPU table: the cell of `shape` in the row of M and the arm's family.
    fn gpu_cell(tier: &str, shape: &str, m: usize) -> Option<String> {
        let family = if tier == "fast" { "fast" } else { "exact" };
        let header = README.lines().find(|line| line.starts_with("| M |"))?;
        let column = header.split('|').position(|cell| cell.trim().starts_with(shape))?;
        let row = README.lines().find(|line| line.starts_with(&format!("| {m}, {family} |")))?;
        row.split('|').nth(column).map(|cell| cell.trim().to_string())
    }

    #[test]
    fn every_figure_is_the_one_the_readme_prints() {
        for f in README_FIGURES {
            match f.share {
                Share::Peak => {
                    assert_eq!(
                        gpu_cell(f.tier, f.shape, f.m),
                        Some(format!("{:.1} us ({:.1}%)", f.micros, f.percent)),
                        "{f:?}"
                    )
                }
                Share::Copy => {
                    let text = format!("M = {} in {:.1} us ({:.1}%", f.m, f.micros, f.percent);
                    assert!(README.replace('\n', " ").contains(&text), "the README lacks {text:?}");
                }
            }
            assert!(README.contains(f.date) && f.model.is_none_or(|model| README.contains(model)), "{f:?}");
        }
    }

    fn device(backend: &'static str, name: &str, kind: DeviceKind) -> DeviceInfo {
        DeviceInfo {
            backend,
            name: name.into(),
            architecture: "x86_64".into(),
            kind,
            peak_bandwidth_gbps: None,
            timer: TimerKind::HostClock,
            multiply_add: MultiplyAdd::Fused,
        }
    }

    fn row(shape: &str, tier: &str, m: usize, micros: f64, copy: f64) -> Measurement {
        Measurement {
            shape: shape.into(),
            n: 5120,
            k: 5120,
            tier: tier.into(),
            kernels: "w4a16_gemv".into(),
            m,
            micros,
            gbps: 1.0,
            percent_peak: None,
            percent_copy: Some(copy),
        }
    }

    #[test]
    fn a_cpu_run_is_set_beside_the_readme_with_what_differs() {
        let info = device("cpu", "Intel Xeon (Emerald Rapids)", DeviceKind::Cpu);
        let rows = [
            row("qkv/o", "plan", 1, 401.25, 93.04),
            row("qkv/o", "plan", 2, 500.0, 80.0),
            row("qkv/o", "w4a16_gemv_batch8", 8, 900.0, 40.0),
            row("qkv/o", "plan", 8, 802.0, 47.1),
        ];
        assert_eq!(
            closing_line(&info, &rows).as_deref(),
            Some(
                "compared with the README's cpu figures (a 2-core AMD EPYC (Zen 5) VM, 2026-12-05): qkv/o M = 1: \
                 355.3 us there (105.3%), 401.2 us here (93.0%); qkv/o M = 8: 719.6 us there (52.5%), 802.0 us here \
                 (47.1%); on another CPU times follow its memory bandwidth and cores; % copy compares each with its \
                 own memory's copy speed"
            )
        );
    }

    #[test]
    fn a_run_the_readme_does_not_cover_says_so() {
        let cpu = device("cpu", "host CPU (avx512, 2 threads)", DeviceKind::Cpu);
        let line = closing_line(&cpu, &[row("1024x1024", "plan", 1, 10.0, 50.0)]).expect("a line");
        assert!(
            line.ends_with("cover qkv/o M = 1, qkv/o M = 8; none of them ran here, so there is nothing to compare")
        );
        let mut h200 = device("cuda", "NVIDIA H200", DeviceKind::Gpu);
        let mut at_peak = row("ffn-up", "plan", 1, 31.0, 0.0);
        at_peak.percent_peak = Some(33.7);
        let same = closing_line(&h200, std::slice::from_ref(&at_peak)).expect("a line");
        assert!(same.contains("ffn-up M = 1: 30.9 us there (33.8%), 31.0 us here (33.7%)"), "{same}");
        assert!(same.ends_with("the same model: expect times within a few percent of the README's"), "{same}");
        // The fast family's rows meet the fast figures only.
        let mut fast = row("ffn-up", "fast", 1, 28.0, 0.0);
        fast.percent_peak = Some(37.3);
        let fast_line = closing_line(&h200, std::slice::from_ref(&fast)).expect("a line");
        assert!(fast_line.contains("ffn-up fast M = 1: 28.6 us there (36.5%), 28.0 us here (37.3%)"), "{fast_line}");
        assert!(!fast_line.contains("30.9 us"), "{fast_line}");
        h200.name = "NVIDIA H100 80GB HBM3".into();
        let other = closing_line(&h200, &[at_peak]).expect("a line");
        assert!(other.ends_with("another GPU (NVIDIA H100 80GB HBM3): times follow its memory bandwidth; % peak compares each with its own memory's peak"), "{other}");
        let wgpu = device("wgpu", "NVIDIA RTX 4090", DeviceKind::Gpu);
        assert_eq!(
            closing_line(&wgpu, &[]).as_deref(),
            Some(
                "the README reports no wgpu figures to compare with (it has cuda on an NVIDIA H200 and cpu on a \
                 2-core AMD EPYC (Zen 5) VM)"
            )
        );
        for kind in [DeviceKind::Reference, DeviceKind::Emulator, DeviceKind::SoftwareGpu] {
            assert_eq!(closing_line(&device("host", "host", kind), &[]), None);
        }
    }
}
