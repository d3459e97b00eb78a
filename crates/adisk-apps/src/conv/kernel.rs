//! Image convolution with any k×k kernel (acharya §4, Figure 1; uysal §5): the fast kernel
//! the disklets run, and a plain reference written separately for the check.
//!
//! Semantics (those of the C example `sdk/c/examples/convolve.c`, generalized): the kernel's
//! anchor is at row and column `(k − 1) / 2`; a pixel whose whole k×k neighbourhood lies in
//! the image becomes `clamp(Σ kernel·pixels / divisor, 0, 255)` (integer division toward
//! zero); the other pixels (a border of the anchor's width above and left, `k − 1 − anchor`
//! below and right) are copied.
use crate::AppError;

/// Largest kernel side.
pub const MAX_K: usize = 64;

/// A square convolution kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// Side k.
    pub k: usize,
    /// k² weights, row-major.
    pub weights: Vec<i32>,
    /// Divisor (non-zero).
    pub divisor: i32,
}

impl Kernel {
    /// A kernel from k² weights.
    ///
    /// # Errors
    /// A weight count that is not a square (or is 0), a side past [`MAX_K`], a zero divisor,
    /// weights whose `Σ|w| · 255` exceeds `i32::MAX`.
    pub fn new(weights: Vec<i32>, divisor: i32) -> Result<Self, AppError> {
        let k = (weights.len() as f64).sqrt().round() as usize;
        if k == 0 || k * k != weights.len() {
            return Err(AppError::Invalid(format!(
                "the kernel is not square: {} weights (a k×k kernel has k² of them)",
                weights.len()
            )));
        }
        if k > MAX_K {
            return Err(AppError::Invalid(format!(
                "kernels go up to {MAX_K}×{MAX_K}"
            )));
        }
        if divisor == 0 {
            return Err(AppError::Invalid("the divisor must not be 0".into()));
        }
        // The fast path sums in i32: the largest |Σ w·p| must fit.
        let reach = weights.iter().map(|w| i64::from(*w).abs()).sum::<i64>() * 255;
        if reach > i64::from(i32::MAX) {
            return Err(AppError::Invalid(format!(
                "the kernel's weights are too large: Σ|w| · 255 = {reach} exceeds {}",
                i32::MAX
            )));
        }
        Ok(Kernel {
            k,
            weights,
            divisor,
        })
    }

    /// The k×k box blur (all weights 1, divisor k²).
    ///
    /// # Errors
    /// k = 0 or past [`MAX_K`].
    pub fn boxed(k: usize) -> Result<Self, AppError> {
        Kernel::new(vec![1; k * k], (k * k) as i32)
    }

    /// Rows/columns of copied border before the anchor.
    pub fn anchor(&self) -> usize {
        (self.k - 1) / 2
    }
}

/// Convolves a `side`×`side` image (the fast path: row slices, no bounds checks in the
/// inner loop beyond the slices'). `out` gets the result.
pub fn convolve_into(pixels: &[u8], side: usize, kernel: &Kernel, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(pixels);
    let (k, a) = (kernel.k, kernel.anchor());
    if side < k {
        return;
    }
    for y in a..side - (k - 1 - a) {
        let top = y - a;
        for x in a..side - (k - 1 - a) {
            let left = x - a;
            let mut sum = 0i32;
            for ky in 0..k {
                let row = &pixels[(top + ky) * side + left..(top + ky) * side + left + k];
                let w = &kernel.weights[ky * k..ky * k + k];
                sum += row
                    .iter()
                    .zip(w)
                    .map(|(p, w)| i32::from(*p) * w)
                    .sum::<i32>();
            }
            out[y * side + x] = (sum / kernel.divisor).clamp(0, 255) as u8;
        }
    }
}

/// The plain reference: pixel by pixel, with explicit bounds.
pub fn reference(pixels: &[u8], side: usize, kernel: &Kernel) -> Vec<u8> {
    let k = kernel.k as i64;
    let a = kernel.anchor() as i64;
    let s = side as i64;
    let mut out = vec![0u8; pixels.len()];
    for y in 0..s {
        for x in 0..s {
            let inside = y - a >= 0 && x - a >= 0 && y - a + k <= s && x - a + k <= s;
            let i = (y * s + x) as usize;
            if !inside {
                out[i] = pixels[i];
                continue;
            }
            let mut sum: i64 = 0;
            for ky in 0..k {
                for kx in 0..k {
                    let p = pixels[((y - a + ky) * s + (x - a + kx)) as usize];
                    sum += i64::from(kernel.weights[(ky * k + kx) as usize]) * i64::from(p);
                }
            }
            let v = sum / i64::from(kernel.divisor);
            out[i] = v.clamp(0, 255) as u8;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_equals_reference_and_the_example() {
        let side = 40;
        let img = adisk_storage::images::generate(2, side as u32);
        for kernel in [
            Kernel::new(vec![1, 2, 1, 2, 4, 2, 1, 2, 1], 16).unwrap(),
            Kernel::boxed(5).unwrap(),
            Kernel::boxed(16).unwrap(),
            Kernel::new(vec![0, -1, 0, -1, 5, -1, 0, -1, 0], 1).unwrap(),
        ] {
            let mut fast = Vec::new();
            convolve_into(&img, side, &kernel, &mut fast);
            assert_eq!(fast, reference(&img, side, &kernel), "k = {}", kernel.k);
        }
        // The 3×3 case equals the storage crate's reference of the WebAssembly example.
        let k3 = [1, 2, 1, 2, 4, 2, 1, 2, 1];
        let mut fast = Vec::new();
        convolve_into(
            &img,
            side,
            &Kernel::new(k3.to_vec(), 16).unwrap(),
            &mut fast,
        );
        assert_eq!(fast, adisk_storage::images::convolve(&img, side, &k3, 16));
    }

    #[test]
    fn bad_kernels_are_refused() {
        assert!(Kernel::new(vec![1, 2, 3], 1).is_err());
        assert!(Kernel::new(vec![], 1).is_err());
        assert!(Kernel::new(vec![1; 9], 0).is_err());
        assert!(Kernel::boxed(65).is_err());
        assert!(Kernel::new(vec![i32::MAX; 9], 1).is_err());
        assert!(Kernel::new(vec![-(i32::MAX / 255) - 1], 1).is_err());
        assert!(Kernel::new(vec![i32::MAX / 255], 1).is_ok());
    }

    #[test]
    fn the_kernel_is_not_flipped_and_division_truncates_toward_zero() {
        // A 3×3 image and a kernel with a single weight at its top-left corner: the centre
        // pixel takes the pixel up and to the left (a correlation), not the one down and to
        // the right (which a flipped kernel, a true convolution, would take).
        let image = [10, 20, 30, 40, 50, 60, 70, 80, 91];
        let corner = Kernel::new(vec![1, 0, 0, 0, 0, 0, 0, 0, 0], 1).unwrap();
        let mut out = Vec::new();
        convolve_into(&image, 3, &corner, &mut out);
        assert_eq!(out[4], 10);
        assert_eq!(reference(&image, 3, &corner)[4], 10);
        // 91 / 2 = 45.5 → 45; a negative divisor gives a negative value → clamped to 0; a
        // negative sum over a negative divisor is positive: -91 / -2 = 45.
        let last = |weights: Vec<i32>, divisor: i32| {
            let k = Kernel::new(weights, divisor).unwrap();
            let mut out = Vec::new();
            convolve_into(&image, 3, &k, &mut out);
            assert_eq!(out, reference(&image, 3, &k));
            out[4]
        };
        assert_eq!(last(vec![0, 0, 0, 0, 0, 0, 0, 0, 1], 2), 45);
        assert_eq!(last(vec![0, 0, 0, 0, 0, 0, 0, 0, 1], -2), 0);
        assert_eq!(last(vec![0, 0, 0, 0, 0, 0, 0, 0, -1], -2), 45);
        assert_eq!(last(vec![0, 0, 0, 0, 0, 0, 0, 0, 9], 2), 255);
    }
}
