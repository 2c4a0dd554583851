//! One launch, described once for every backend and for the plan: M rows of X and Y, an N x K
//! NVFP4 weight, and X's and Y's row strides; the bytes and alignment each operand needs, and the
//! checks on what a caller hands over. Backends check their own memory (bounds inside a buffer,
//! overlap) against these needs, and never restate them.
//!
//! X and Y are row-major with row strides in elements (`x_row_stride >= K`, `y_row_stride >= N`):
//! an engine's activations are often rows of a wider buffer. Elements between rows are neither
//! read (X) nor written (Y).

use crate::plan::Launch;
use crate::shape::{GROUP_SIZE, GemvShape};
use crate::tiers::KernelSpec;
use crate::{CoreError, Result, YFormat};

/// An operand of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The activations, bf16 `[M][K]` at X's row stride.
    X,
    /// The packed E2M1 weights `[N][K/2]`.
    Packed,
    /// The E4M3 block scales `[N][K/16]`.
    Scales,
    /// The output, bf16 `[M][N]` at Y's row stride.
    Y,
}

impl Operand {
    /// Every operand, inputs first.
    pub const ALL: [Operand; 4] = [Operand::X, Operand::Packed, Operand::Scales, Operand::Y];

    /// Its name in errors: `x`, `packed`, `scales`, `y`.
    pub fn name(self) -> &'static str {
        match self {
            Operand::X => "x",
            Operand::Packed => "packed",
            Operand::Scales => "scales",
            Operand::Y => "y",
        }
    }
}

/// Elements a strided `[rows][width]` operand spans: `(rows - 1) * stride + width` (0 rows: 0),
/// saturating (a span past `usize::MAX` fits no buffer, and the checks say so).
pub fn strided_span(rows: usize, width: usize, stride: usize) -> usize {
    if rows == 0 { 0 } else { (rows - 1).saturating_mul(stride).saturating_add(width) }
}

/// A launch's shape: validated M, N, K and row strides that cover their rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchShape {
    shape: GemvShape,
    x_row_stride: usize,
    y_row_stride: usize,
    y_format: YFormat,
}

impl LaunchShape {
    /// Validates M, N, K ([`GemvShape::new`]) and that the strides cover a row
    /// (`x_row_stride >= K`, `y_row_stride >= N`: [`CoreError::RowStrideTooSmall`] otherwise).
    pub fn new(m: usize, n: usize, k: usize, x_row_stride: usize, y_row_stride: usize) -> Result<Self> {
        let shape = GemvShape::new(m, n, k)?;
        for (what, stride, width) in [("x", x_row_stride, k), ("y", y_row_stride, n)] {
            if stride < width {
                return Err(CoreError::RowStrideTooSmall { what, stride, width });
            }
        }
        Ok(Self { shape, x_row_stride, y_row_stride, y_format: YFormat::Bf16 })
    }

    /// Contiguous rows: strides K and N.
    pub fn contiguous(m: usize, n: usize, k: usize) -> Result<Self> {
        Self::new(m, n, k, k, n)
    }

    /// M, N and K.
    pub fn shape(&self) -> GemvShape {
        self.shape
    }

    /// Elements from one row of X to the next.
    pub fn x_row_stride(&self) -> usize {
        self.x_row_stride
    }

    /// Elements from one row of Y to the next.
    pub fn y_row_stride(&self) -> usize {
        self.y_row_stride
    }

    /// This launch writing Y as `format`.
    pub fn with_y_format(self, format: YFormat) -> Self {
        Self { y_format: format, ..self }
    }

    /// Y's element type.
    pub fn y_format(&self) -> YFormat {
        self.y_format
    }

    /// The byte alignment `operand`'s offset needs: X's and Y's element size (Y's by its format),
    /// 1 for the weights' bytes.
    pub fn alignment(&self, operand: Operand) -> usize {
        match operand {
            Operand::X => 2,
            Operand::Y => self.y_format.element_bytes(),
            Operand::Packed | Operand::Scales => 1,
        }
    }

    /// The bytes `operand` spans: for X and Y from the first row's first element to the last
    /// row's last (saturating).
    pub fn bytes(&self, operand: Operand) -> usize {
        let GemvShape { m, n, k } = self.shape;
        match operand {
            Operand::X => strided_span(m, k, self.x_row_stride).saturating_mul(2),
            Operand::Packed => n * k / 2,
            Operand::Scales => n * k / GROUP_SIZE,
            Operand::Y => strided_span(m, n, self.y_row_stride).saturating_mul(self.y_format.element_bytes()),
        }
    }

    /// Refuses a kernel narrower than M ([`CoreError::MExceedsWidth`]).
    pub fn check_width(&self, kernel: &KernelSpec) -> Result<()> {
        if self.shape.m > kernel.max_m {
            return Err(CoreError::MExceedsWidth { kernel: kernel.name, m: self.shape.m, width: kernel.max_m });
        }
        Ok(())
    }

    /// Checks what a caller hands over for `operand`: `len` bytes at byte `offset` of its memory
    /// must hold [`Self::bytes`] ([`CoreError::RangeTooSmall`]) and start at the operand's
    /// alignment ([`CoreError::Misaligned`]).
    pub fn check_operand(&self, operand: Operand, offset: usize, len: usize) -> Result<()> {
        let GemvShape { m, n, k } = self.shape;
        let (what, needed, align) = (operand.name(), self.bytes(operand), self.alignment(operand));
        if len < needed {
            return Err(CoreError::RangeTooSmall { what, len, needed, m, n, k });
        }
        if !offset.is_multiple_of(align) {
            return Err(CoreError::Misaligned { what, offset, align });
        }
        Ok(())
    }

    /// One launch of a plan over this shape: its shape (M = the launch's rows, the same strides)
    /// and the element offsets of its first rows of X and Y.
    pub fn part(&self, launch: &Launch) -> Result<(LaunchShape, usize, usize)> {
        let GemvShape { n, k, .. } = self.shape;
        let part = Self::new(launch.rows, n, k, self.x_row_stride, self.y_row_stride)?.with_y_format(self.y_format);
        Ok((part, launch.row_offset * self.x_row_stride, launch.row_offset * self.y_row_stride))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_spec;

    #[test]
    fn a_launch_needs_its_rows_at_their_strides_and_nothing_past_them() {
        let shape = LaunchShape::new(3, 32, 48, 50, 40).expect("valid");
        assert_eq!(shape.bytes(Operand::X), 2 * (2 * 50 + 48));
        assert_eq!(shape.bytes(Operand::Y), 2 * (2 * 40 + 32));
        assert_eq!((shape.bytes(Operand::Packed), shape.bytes(Operand::Scales)), (32 * 24, 32 * 3));
        assert!(shape.check_operand(Operand::X, 2, 2 * 148).is_ok());
        let short = shape.check_operand(Operand::X, 0, 2 * 148 - 1);
        assert!(matches!(short, Err(CoreError::RangeTooSmall { what: "x", needed: 296, .. })), "{short:?}");
        let odd = shape.check_operand(Operand::Y, 1, 1 << 20);
        assert!(matches!(odd, Err(CoreError::Misaligned { what: "y", offset: 1, align: 2 })), "{odd:?}");
        assert!(shape.check_operand(Operand::Scales, 1, 96).is_ok(), "byte operands need no alignment");

        let narrow = LaunchShape::new(2, 32, 48, 47, 32);
        assert!(matches!(narrow, Err(CoreError::RowStrideTooSmall { what: "x", stride: 47, width: 48 })));
        assert!(matches!(LaunchShape::contiguous(0, 32, 48), Err(CoreError::ZeroM { .. })));

        let batch4 = kernel_spec("w4a16_gemv_batch4").expect("registered");
        assert!(LaunchShape::contiguous(4, 32, 48).expect("valid").check_width(batch4).is_ok());
        let wide = LaunchShape::contiguous(5, 32, 48).expect("valid").check_width(batch4);
        assert!(matches!(wide, Err(CoreError::MExceedsWidth { m: 5, width: 4, .. })), "{wide:?}");

        // A plan's second launch starts at its first row's elements, with the same strides.
        let (part, x_start, y_start) =
            shape.part(&Launch { tier: 0, row_offset: 2, rows: 1 }).expect("a launch of the plan");
        assert_eq!((part.shape().m, x_start, y_start), (1, 100, 80));
        assert_eq!(part.bytes(Operand::X), 2 * 48);
        assert_eq!(strided_span(0, 48, 50), 0);
        assert_eq!(strided_span(usize::MAX, 2, 2), usize::MAX);
    }

    #[test]
    fn an_f32_y_takes_four_bytes_an_element_and_four_byte_alignment() {
        let shape = LaunchShape::new(2, 64, 32, 32, 70).expect("wide rows").with_y_format(YFormat::F32);
        assert_eq!(shape.y_format(), YFormat::F32);
        assert_eq!(shape.bytes(Operand::Y), 4 * (70 + 64));
        assert_eq!(shape.bytes(Operand::X), 2 * 2 * 32, "X stays bf16");
        assert!(shape.check_operand(Operand::Y, 4, 4 * (70 + 64)).is_ok());
        assert!(matches!(
            shape.check_operand(Operand::Y, 2, 4 * (70 + 64)),
            Err(CoreError::Misaligned { what: "y", offset: 2, align: 4 })
        ));
        assert!(matches!(
            shape.check_operand(Operand::Y, 0, 2 * (70 + 64)),
            Err(CoreError::RangeTooSmall { what: "y", .. })
        ));
        let launch = Launch { tier: 0, row_offset: 1, rows: 1 };
        let (part, _, y_at) = shape.part(&launch).expect("a launch of the plan");
        assert_eq!((part.y_format(), y_at), (YFormat::F32, 70), "a part keeps the format; offsets count elements");
    }
}
