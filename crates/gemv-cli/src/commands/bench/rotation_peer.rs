//! What the rotation needs of a peer: a row per M it covers, timed among the kernels in every
//! round.

use std::time::Duration;

/// A peer with one row per M, timed in every round among the kernels (the same cold weights,
/// launches and rounds), so a machine that slows down for part of the run slows both alike.
pub trait RotationPeer {
    /// The row's label, e.g. `ggml q4_0 (repacked 8x8)`.
    fn name(&self) -> &str;

    /// Bytes one run over `m` tokens moves at least: the weights in the peer's format, X and Y as
    /// the peer holds them.
    fn bytes_moved(&self, m: usize) -> u64;

    /// Runs `launches` times at `m` (each run on the next cold copy of the weights) and returns
    /// the span.
    fn time(&mut self, m: usize, launches: usize) -> Result<Duration, String>;

    /// Whether the peer has a row at `m` (one that runs only some M is timed and shown only
    /// there).
    fn covers(&self, m: usize) -> bool {
        let _ = m;
        true
    }

    /// Called after each of its timings: its threads stop spinning, so they do not take the CPU
    /// from whatever is timed next.
    fn rest(&mut self) {}
}

/// The (peer, M) pairs the rotation times: index `p` of `peers` at `ms[i]`, for every M each
/// peer covers.
pub fn peer_steps(peers: &[Box<dyn RotationPeer>], ms: &[usize]) -> Vec<(usize, usize)> {
    (0..peers.len()).flat_map(|p| (0..ms.len()).filter(move |&i| peers[p].covers(ms[i])).map(move |i| (p, i))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer with rows at some M only.
    struct Only(Vec<usize>);

    impl RotationPeer for Only {
        fn name(&self) -> &str {
            "only"
        }
        fn bytes_moved(&self, _m: usize) -> u64 {
            0
        }
        fn time(&mut self, _m: usize, _launches: usize) -> Result<Duration, String> {
            Ok(Duration::ZERO)
        }
        fn covers(&self, m: usize) -> bool {
            self.0.contains(&m)
        }
    }

    #[test]
    fn a_peer_is_timed_only_at_the_m_it_covers() {
        let peers: Vec<Box<dyn RotationPeer>> = vec![Box::new(Only(vec![1, 2, 4])), Box::new(Only(vec![1]))];
        assert_eq!(peer_steps(&peers, &[1, 2, 4]), [(0, 0), (0, 1), (0, 2), (1, 0)]);
        assert_eq!(peer_steps(&peers, &[2, 4]), [(0, 0), (0, 1)]);
        assert!(peer_steps(&[], &[1]).is_empty());
    }
}
