//! Deterministic grayscale test images (one byte per pixel, row-major), for the image
//! convolution disklet of the Active Disks paper (Figure 1) and later applications.
//! Image `i` depends only on `i` and its side, so the host can regenerate any of them.
use crate::store::DiskStore;
use crate::{Result, StorageError, io_err};
use std::io::Write;

/// Largest side accepted, pixels.
pub const MAX_SIDE: u32 = 8192;

/// Path of image `index` relative to a disk's `files/` directory.
pub fn path(index: u32) -> String {
    format!("images/img-{index:05}.gray")
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Pixels of image `index`: smooth gradients and rings plus seeded noise.
pub fn generate(index: u32, side: u32) -> Vec<u8> {
    let side = side as u64;
    let mut out = Vec::with_capacity((side * side) as usize);
    let (cx, cy) = (
        (mix(u64::from(index)) % side) as i64,
        (mix(u64::from(index) + 7) % side) as i64,
    );
    for y in 0..side {
        for x in 0..side {
            let gradient = (x * (u64::from(index) % 3 + 1) + y * 2) / 4;
            let (dx, dy) = (x as i64 - cx, y as i64 - cy);
            let ring = ((dx * dx + dy * dy) / 97 % 64) as u64;
            let noise = mix((u64::from(index) << 40) ^ (y << 20) ^ x) & 0x1f;
            out.push(((gradient + ring + noise) & 0xff) as u8);
        }
    }
    out
}

/// Writes image `index` into the store's `files/` (temporary file, fsync, rename).
///
/// # Errors
/// A side of 0 or above [`MAX_SIDE`], or I/O errors.
pub fn write(store: &DiskStore, index: u32, side: u32) -> Result<u64> {
    if side == 0 || side > MAX_SIDE {
        return Err(StorageError::Invalid(format!(
            "image side {side} must be 1..={MAX_SIDE}"
        )));
    }
    let target = store.file_path(&path(index))?;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .map_err(io_err(format!("creating {}", parent.display())))?;
    }
    let pixels = generate(index, side);
    let tmp = target.with_extension("tmp");
    let mut f =
        std::fs::File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    f.write_all(&pixels)
        .map_err(io_err(format!("writing {}", tmp.display())))?;
    f.sync_all()
        .map_err(io_err(format!("syncing {}", tmp.display())))?;
    std::fs::rename(&tmp, &target).map_err(io_err(format!("renaming {}", tmp.display())))?;
    Ok(pixels.len() as u64)
}

/// Files under `files/<prefix>` (recursively), with their sizes, sorted by path.
///
/// # Errors
/// A prefix escaping `files/`.
pub fn list(store: &DiskStore, prefix: &str) -> Result<Vec<(String, u64)>> {
    let root = store.files_dir();
    let start = if prefix.is_empty() {
        root.clone()
    } else {
        store.file_path(prefix)?
    };
    let mut out = Vec::new();
    let mut stack = vec![start];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        } else if p.extension().is_none_or(|x| x != "tmp") {
            if let Ok(rel) = p.strip_prefix(&root) {
                out.push((rel.to_string_lossy().to_string(), meta.len()));
            }
        }
        if out.len() >= 100_000 {
            break;
        }
    }
    out.sort();
    Ok(out)
}

/// The 3×3 convolution of the example disklet, as a host-side reference: interior pixels are
/// `clamp(Σ kernel·pixel / divisor, 0, 255)` (integer division toward zero), border pixels copied.
pub fn convolve(pixels: &[u8], side: usize, kernel: &[i32; 9], divisor: i32) -> Vec<u8> {
    let mut out = pixels.to_vec();
    for y in 1..side.saturating_sub(1) {
        for x in 1..side - 1 {
            let mut sum = 0i32;
            for ky in 0..3 {
                for kx in 0..3 {
                    sum +=
                        kernel[ky * 3 + kx] * i32::from(pixels[(y + ky - 1) * side + x + kx - 1]);
                }
            }
            out[y * side + x] = (sum / divisor).clamp(0, 255) as u8;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn images_are_deterministic_and_distinct() {
        assert_eq!(super::generate(3, 64), super::generate(3, 64));
        assert_ne!(super::generate(3, 64), super::generate(4, 64));
        let img = super::generate(1, 16);
        let same = super::convolve(&img, 16, &[0, 0, 0, 0, 1, 0, 0, 0, 0], 1);
        assert_eq!(img, same);
    }
}
