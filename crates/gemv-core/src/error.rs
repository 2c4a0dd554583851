//! The one error type of gemv-core: every message names the shape or tensor it is about.

/// What was wrong with a shape, a buffer length, a matrix or a dispatch request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// N (output columns, weight rows) was zero.
    #[error("invalid shape: N must be >= 1 (got N = 0, K = {k})")]
    ZeroN {
        /// The K that came with it.
        k: usize,
    },
    /// K was not a positive multiple of 16.
    #[error("invalid shape: K must be a positive multiple of 16 (got K = {k}, N = {n})")]
    InvalidK {
        /// The rejected K.
        k: usize,
        /// The N that came with it.
        n: usize,
    },
    /// M (rows of X) was zero.
    #[error("invalid shape: M must be >= 1 (got M = 0, N = {n}, K = {k})")]
    ZeroM {
        /// The N that came with it.
        n: usize,
        /// The K that came with it.
        k: usize,
    },
    /// A row stride smaller than the row it steps over.
    #[error("{what}: row stride {stride} is smaller than a row ({width} elements)")]
    RowStrideTooSmall {
        /// Which operand (`x` or `y`).
        what: &'static str,
        /// The stride given, in elements.
        stride: usize,
        /// Elements per row (K for X, N for Y).
        width: usize,
    },
    /// An operand's memory smaller than the launch needs.
    #[error("{what}: range holds {len} bytes but M = {m}, N = {n}, K = {k} needs {needed}")]
    RangeTooSmall {
        /// Which operand.
        what: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        needed: usize,
        /// Rows.
        m: usize,
        /// Weight rows.
        n: usize,
        /// Weight columns.
        k: usize,
    },
    /// A bf16 operand not on a 2-byte boundary.
    #[error("{what}: offset {offset} is not a multiple of {align}")]
    Misaligned {
        /// Which operand.
        what: &'static str,
        /// Byte offset.
        offset: usize,
        /// Required alignment.
        align: usize,
    },
    /// More rows than the kernel's tier covers.
    #[error("kernel {kernel}: M = {m} exceeds its width {width}")]
    MExceedsWidth {
        /// Kernel name.
        kernel: &'static str,
        /// Rows requested.
        m: usize,
        /// The kernel's width.
        width: usize,
    },
    /// A buffer's length did not match the shape.
    #[error("{what}: expected {expected} elements for M = {m}, N = {n}, K = {k}, got {found}")]
    LengthMismatch {
        /// Which buffer (`packed`, `scales`, `x`, `y`, `values`).
        what: &'static str,
        /// Elements the shape needs.
        expected: usize,
        /// Elements given.
        found: usize,
        /// Rows of X (0 when not applicable).
        m: usize,
        /// Weight rows.
        n: usize,
        /// Weight columns.
        k: usize,
    },
    /// A shape whose byte size does not fit in `usize`.
    #[error("invalid shape: {what} size overflows (M = {m}, N = {n}, K = {k})")]
    SizeOverflow {
        /// Which size overflowed.
        what: &'static str,
        /// Rows of X.
        m: usize,
        /// Weight rows.
        n: usize,
        /// Weight columns.
        k: usize,
    },
    /// The quantizer met a NaN or infinite weight.
    #[error("cannot quantize: weight [{row}, {col}] is {value} (not finite)")]
    NonFiniteWeight {
        /// Row of the weight.
        row: usize,
        /// Column of the weight.
        col: usize,
        /// The value.
        value: f32,
    },
    /// A width cap below 1.
    #[error("invalid width cap {cap}: a dispatch plan needs a cap >= 1")]
    InvalidWidthCap {
        /// The rejected cap.
        cap: usize,
    },
    /// A family was asked for on a device that lacks it.
    #[error("the {family} kernel family is not available on this device (the fast family needs CUDA sm_80 or newer)")]
    FamilyUnavailable {
        /// The family asked for.
        family: &'static str,
    },
    /// A count that must be at least 1 (experts, tokens, top-k) was zero.
    #[error("invalid shape: {what} must be >= 1 (got 0)")]
    ZeroCount {
        /// What was counted.
        what: &'static str,
    },
    /// A routing id past the layer's experts.
    #[error("routing: token {token} slot {slot} names expert {id}, but the layer has {experts} experts")]
    ExpertOutOfRange {
        /// The token.
        token: usize,
        /// Its slot (0 .. top_k).
        slot: usize,
        /// The id given.
        id: u64,
        /// Experts in the layer.
        experts: usize,
    },
    /// No present, allowed tier within the cap: the caller must fall back.
    #[error("no kernel available for M = {m} within width cap {cap} (present tiers: {present})")]
    NoTierAvailable {
        /// Rows requested.
        m: usize,
        /// The caller's width cap.
        cap: usize,
        /// Widths that were present, for the message.
        present: String,
    },
}

/// Result alias for gemv-core.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;
