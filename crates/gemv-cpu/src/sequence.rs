//! A fixed pseudo-random sequence (xorshift64) for the data the backend makes itself: the pair
//! kernel's probe cases and the calibration's sample matrix. Reproducible, not for statistics.

/// The sequence from `seed` (nonzero), a value per call.
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
