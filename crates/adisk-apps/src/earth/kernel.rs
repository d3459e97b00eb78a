//! `earth`: composite satellite images from swaths of sensor values.
//!
//! The algorithm follows Acharya, Uysal and Saltz, "Active Disks: Programming Model,
//! Algorithms and Evaluation", §4 "Algorithms", *Generating composite satellite images*
//! (and its Figure 3), and Uysal, Acharya and Saltz, "An Evaluation of Architectural
//! Alternatives for Rapidly Growing Datasets: Active Disks, Clusters, SMPs", §5
//! "Applications" (`earth`): sensor values are mapped onto a two-dimensional output grid and
//! every grid point keeps a max-like composition of the values that map onto it (the AVHRR
//! Pathfinder maximum-NDVI composite). The composition is order-independent, so each disk
//! composes locally into a sub-grid that fits its memory; when a value maps outside the
//! sub-grid the disk ships the sub-image to the host and moves the sub-grid so that the new
//! value lies at its centre. The host keeps the whole image and composes every shipped
//! sub-image into it with the same per-pixel operation.
//!
//! Pieces:
//! * [`Generator`]: swath-like AVHRR-style records ([`Record`]), record `i` a function of
//!   (seed, params, `i`) only; consecutive records are spatially local (scan lines of one
//!   orbit), which is what makes the shifting sub-grid effective.
//! * [`Grid`]: the output grid and the lat/lon → pixel mapping.
//! * [`SubGrid`]: the disk-side accumulator (memory capped in bytes), [`ShippedTile`] its
//!   output.
//! * [`Canvas`] and [`compose`]: the host-side accumulator.
//! * [`reference_composite`]: the plain single-node oracle.
//!
//! **Composition rule.** A pixel keeps the largest value mapped onto it; [`NO_DATA`]
//! (`i16::MIN`) marks a pixel nothing mapped onto and is the identity of the operation. Values
//! are integers (no NaN), and two equal values are indistinguishable, so ties need no rule:
//! `max` is commutative, associative and idempotent, hence any split of the records over disks,
//! any shipping order and any duplicated shipment give the same image, byte for byte. (A
//! record whose value is `i16::MIN` therefore contributes nothing.)

use crate::rng::SplitMix64;
use thiserror::Error;

/// The value of a pixel nothing mapped onto (the identity of the composition).
pub const NO_DATA: i16 = i16::MIN;

/// The largest number of pixels a [`Grid`] may have (2^31, a 4 GiB image of `i16`).
pub const MAX_PIXELS: u64 = 1 << 31;

/// Satellite orbits per day (a NOAA polar orbiter makes about 14).
pub const ORBITS_PER_DAY: u64 = 14;

/// Width of a swath in degrees of longitude (AVHRR's ~2,700 km swath; adjacent orbits'
/// swaths overlap).
pub const SWATH_DEGREES: f64 = 50.0;

/// Errors for bad parameters or malformed tiles.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum EarthError {
    /// The grid has a zero width or height.
    #[error("grid {width}x{height} has a zero dimension")]
    ZeroGrid {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// The grid has more than [`MAX_PIXELS`] pixels.
    #[error("grid {width}x{height} exceeds {MAX_PIXELS} pixels")]
    GridTooLarge {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// The generator was asked for zero records.
    #[error("zero records requested")]
    ZeroRecords,
    /// The generator was asked for zero days.
    #[error("zero days requested")]
    ZeroDays,
    /// The memory cap cannot hold even one row of the grid.
    #[error("window cap of {cap_bytes} bytes is below one grid row ({row_bytes} bytes)")]
    WindowTooSmall {
        /// The cap given.
        cap_bytes: usize,
        /// Bytes of one grid row.
        row_bytes: usize,
    },
    /// A tile's width differs from the canvas width.
    #[error("tile width {tile} differs from canvas width {canvas}")]
    TileWidth {
        /// The tile's width.
        tile: u32,
        /// The canvas width.
        canvas: u32,
    },
    /// A tile's rows lie (partly) outside the canvas.
    #[error("tile rows {row0}..{row0}+{rows} outside canvas height {height}")]
    TileOutOfBounds {
        /// First row of the tile.
        row0: u32,
        /// Rows in the tile.
        rows: u32,
        /// Canvas height.
        height: u32,
    },
    /// A tile's pixel count differs from `rows * width`.
    #[error("tile holds {got} pixels, expected {expected}")]
    TileShape {
        /// `rows * width`.
        expected: usize,
        /// `pixels.len()`.
        got: usize,
    },
}

/// One preprocessed sensor value: where and when it was observed, and its value (e.g. a
/// vegetation index NDVI × 10,000).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Record {
    /// Day of observation, `0..days`.
    pub day: u32,
    /// Latitude in degrees, `[-90, 90]`.
    pub lat: f32,
    /// Longitude in degrees (any finite value; wrapped into `[-180, 180)` by the grid).
    pub lon: f32,
    /// The sensor value to composite.
    pub value: i16,
}

/// The output grid: an equirectangular `width × height` image, row 0 at latitude +90,
/// column 0 at longitude -180.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    width: u32,
    height: u32,
}

impl Grid {
    /// A grid of `width × height` pixels (both non-zero, at most [`MAX_PIXELS`] in all).
    pub fn new(width: u32, height: u32) -> Result<Grid, EarthError> {
        if width == 0 || height == 0 {
            return Err(EarthError::ZeroGrid { width, height });
        }
        if u64::from(width) * u64::from(height) > MAX_PIXELS {
            return Err(EarthError::GridTooLarge { width, height });
        }
        Ok(Grid { width, height })
    }

    /// Pixels per row.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Rows.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Total pixels (`width * height`).
    pub fn pixels(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// The (row, column) a location maps onto, or `None` if the latitude is outside
    /// `[-90, 90]` or either coordinate is not finite. Longitudes wrap around; the pixel
    /// containing a location is the one whose half-open cell `[lo, hi)` contains it (latitude
    /// -90 and the last column's edge are clamped into the last row and column).
    pub fn locate(&self, lat: f32, lon: f32) -> Option<(u32, u32)> {
        if !lat.is_finite() || !lon.is_finite() || !(-90.0..=90.0).contains(&lat) {
            return None;
        }
        let y = (90.0 - f64::from(lat)) / 180.0 * f64::from(self.height);
        let x = (f64::from(lon) + 180.0).rem_euclid(360.0) / 360.0 * f64::from(self.width);
        let row = (y.floor() as u32).min(self.height - 1);
        let col = (x.floor() as u32).min(self.width - 1);
        Some((row, col))
    }

    /// The row-major pixel index of a location ([`Grid::locate`]).
    pub fn pixel(&self, lat: f32, lon: f32) -> Option<usize> {
        let (row, col) = self.locate(lat, lon)?;
        Some(row as usize * self.width as usize + col as usize)
    }
}

/// The per-pixel composition: keep the larger value (see the module doc for why no tie rule is
/// needed). [`NO_DATA`] is its identity.
pub fn composite_value(a: i16, b: i16) -> i16 {
    a.max(b)
}

/// Parameters of the record generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenParams {
    /// Records in the whole data set (≥ 1).
    pub records: u64,
    /// Days the records span (≥ 1); records are spread evenly over the days.
    pub days: u32,
    /// The output grid; it sets the swath's sampling (about one sample per pixel across).
    pub grid: Grid,
    /// Seed of the data set.
    pub seed: u64,
}

/// A validated generator of swath-like records.
///
/// Layout: the records are split evenly over `days`, each day evenly over
/// [`ORBITS_PER_DAY`] orbits. An orbit is a sequence of scan lines from pole to pole
/// (alternately northwards and southwards); a scan line is `samples` values across a swath
/// [`SWATH_DEGREES`] wide, centred on the orbit's ground track. Ground tracks are spread
/// evenly around the globe and shifted from day to day, so the days together cover the globe
/// several times with overlap. Values follow a smooth vegetation field with noise and
/// cloud-depressed values (which the max composite removes).
#[derive(Clone, Debug)]
pub struct Generator {
    params: GenParams,
    samples: u64,
}

impl Generator {
    /// Validates `params` (non-zero records and days; the grid is valid by construction).
    pub fn new(params: GenParams) -> Result<Generator, EarthError> {
        if params.records == 0 {
            return Err(EarthError::ZeroRecords);
        }
        if params.days == 0 {
            return Err(EarthError::ZeroDays);
        }
        let across = f64::from(params.grid.width()) * SWATH_DEGREES / 360.0;
        let samples = (across.round() as u64).max(1);
        Ok(Generator { params, samples })
    }

    /// The parameters.
    pub fn params(&self) -> &GenParams {
        &self.params
    }

    /// Record `index`, or `None` past the end; depends only on (seed, params, index).
    pub fn record(&self, index: u64) -> Option<Record> {
        if index >= self.params.records {
            return None;
        }
        let days = u64::from(self.params.days);
        let (day, in_day, day_len) = split(index, self.params.records, days);
        let (orbit, in_orbit, orbit_len) = split(in_day, day_len, ORBITS_PER_DAY);
        let lines = orbit_len.div_ceil(self.samples).max(1);
        let (line, sample) = (in_orbit / self.samples, in_orbit % self.samples);
        let along = (line as f64 + 0.5) / lines as f64;
        let lat = if orbit % 2 == 0 {
            -90.0 + 180.0 * along
        } else {
            90.0 - 180.0 * along
        };
        let track = 360.0 * (orbit as f64 + 0.5) / ORBITS_PER_DAY as f64
            + day as f64 * 360.0 / ORBITS_PER_DAY as f64 * 0.381_966;
        let across = ((sample as f64 + 0.5) / self.samples as f64 - 0.5) * SWATH_DEGREES;
        let lon = (track + across).rem_euclid(360.0) - 180.0;
        let mut rng = SplitMix64::for_index(self.params.seed, index);
        let value = sensor_value(&mut rng, lat, lon, day as f64 / days as f64);
        Some(Record {
            day: day as u32,
            lat: lat as f32,
            lon: lon as f32,
            value,
        })
    }

    /// Records `start..end` (clamped to the data set).
    pub fn records(&self, start: u64, end: u64) -> Vec<Record> {
        let end = end.min(self.params.records);
        (start.min(end)..end)
            .filter_map(|i| self.record(i))
            .collect()
    }
}

/// Splits `0..total` into `parts` near-equal consecutive parts (part `p` starts at
/// `ceil(p * total / parts)`); returns (part of `index`, offset in it, part length).
fn split(index: u64, total: u64, parts: u64) -> (u64, u64, u64) {
    let start = |p: u64| (u128::from(p) * u128::from(total)).div_ceil(u128::from(parts)) as u64;
    let part = (u128::from(index) * u128::from(parts) / u128::from(total)) as u64;
    let first = start(part);
    (part, index - first, start(part + 1) - first)
}

/// A vegetation-index-like value (NDVI × 10,000 in `[-2000, 10000]`) at a location and time of
/// year (`season` in `[0, 1)`): a smooth field plus noise, a third of the values depressed by
/// clouds.
fn sensor_value(rng: &mut SplitMix64, lat: f64, lon: f64, season: f64) -> i16 {
    let (phi, lam) = (lat.to_radians(), lon.to_radians());
    let field = 0.35
        + 0.3 * (3.0 * phi).sin() * (2.0 * lam).cos()
        + 0.2 * phi.cos() * (std::f64::consts::PI * season).sin();
    let mut ndvi = field + rng.normal(0.0, 0.02);
    if rng.unit() < 1.0 / 3.0 {
        ndvi = ndvi * 0.3 - 0.1;
    }
    (ndvi * 10_000.0).round().clamp(-2000.0, 10_000.0) as i16
}

/// A composed sub-image shipped from a disk to the host: rows `row0..row0 + rows` of the
/// grid, full width, row-major, [`NO_DATA`] where nothing was composed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShippedTile {
    /// First grid row of the tile.
    pub row0: u32,
    /// Rows in the tile.
    pub rows: u32,
    /// Pixels per row (the grid width).
    pub width: u32,
    /// `rows * width` composed values.
    pub pixels: Vec<i16>,
}

impl ShippedTile {
    /// Bytes of the tile's pixels (what the disk ships).
    pub fn bytes(&self) -> usize {
        self.pixels.len() * std::mem::size_of::<i16>()
    }
}

/// The disk-side accumulator: a window of whole grid rows (a band) that fits a memory cap.
///
/// Policy: the window is `window_rows = min(height, cap / row_bytes)` full-width rows. The
/// first record places the window so that its row is at the centre (clamped to the grid);
/// records inside the window are composed in place. A record outside it ships the window's
/// content (only the rows actually touched) and moves the window so that the new record's
/// row is at its centre (clamped), as in Figure 3 of Acharya et al. Records whose location
/// does not map onto the grid are counted in [`SubGrid::rejected`] and otherwise ignored.
/// The window buffer is allocated once (`window_rows * width * 2` bytes ≤ cap) and reused;
/// shipped tiles are fresh allocations owned by the caller.
#[derive(Clone, Debug)]
pub struct SubGrid {
    grid: Grid,
    window_rows: u32,
    row0: Option<u32>,
    touched: Option<(u32, u32)>,
    pixels: Vec<i16>,
    shipped: u64,
    rejected: u64,
}

impl SubGrid {
    /// A sub-grid for `grid` whose window buffer stays within `cap_bytes`; fails if the cap
    /// cannot hold one grid row.
    pub fn new(grid: Grid, cap_bytes: usize) -> Result<SubGrid, EarthError> {
        let row_bytes = grid.width() as usize * std::mem::size_of::<i16>();
        let fit = cap_bytes / row_bytes;
        if fit == 0 {
            return Err(EarthError::WindowTooSmall {
                cap_bytes,
                row_bytes,
            });
        }
        let window_rows = fit.min(grid.height() as usize) as u32;
        Ok(SubGrid {
            grid,
            window_rows,
            row0: None,
            touched: None,
            pixels: Vec::new(),
            shipped: 0,
            rejected: 0,
        })
    }

    /// Rows in the window.
    pub fn window_rows(&self) -> u32 {
        self.window_rows
    }

    /// The current window as (first row, rows), if placed.
    pub fn window(&self) -> Option<(u32, u32)> {
        self.row0.map(|r| (r, self.window_rows))
    }

    /// Bytes held by the window buffer (never above the cap given to [`SubGrid::new`]).
    pub fn bytes(&self) -> usize {
        self.pixels.len() * std::mem::size_of::<i16>()
    }

    /// Tiles shipped so far (by [`SubGrid::feed`] and [`SubGrid::finish`]).
    pub fn shipped(&self) -> u64 {
        self.shipped
    }

    /// Records ignored because their location does not map onto the grid.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Composes one record; returns the previous window's content if the record fell outside
    /// it (the window then moved).
    pub fn feed(&mut self, record: &Record) -> Option<ShippedTile> {
        let Some((row, col)) = self.grid.locate(record.lat, record.lon) else {
            self.rejected += 1;
            return None;
        };
        let inside = self
            .row0
            .is_some_and(|r0| row >= r0 && row < r0 + self.window_rows);
        let tile = if inside { None } else { self.move_to(row) };
        self.compose_at(row, col, record.value);
        tile
    }

    /// Composes a batch of records, appending any shipped tiles to `out`.
    pub fn feed_batch(&mut self, records: &[Record], out: &mut Vec<ShippedTile>) {
        out.extend(records.iter().filter_map(|r| self.feed(r)));
    }

    /// Ships the current window's content (if any) and empties the window; the sub-grid can
    /// be fed again afterwards.
    pub fn finish(&mut self) -> Vec<ShippedTile> {
        let tile = self.take_tile();
        self.row0 = None;
        tile.into_iter().collect()
    }

    fn compose_at(&mut self, row: u32, col: u32, value: i16) {
        let Some(r0) = self.row0 else { return };
        let at = (row - r0) as usize * self.grid.width() as usize + col as usize;
        self.pixels[at] = composite_value(self.pixels[at], value);
        self.touched = Some(match self.touched {
            Some((lo, hi)) => (lo.min(row), hi.max(row)),
            None => (row, row),
        });
    }

    /// Ships the window (if touched) and re-centres it on `row`.
    fn move_to(&mut self, row: u32) -> Option<ShippedTile> {
        let tile = self.take_tile();
        if self.pixels.is_empty() {
            let len = self.window_rows as usize * self.grid.width() as usize;
            self.pixels = vec![NO_DATA; len];
        }
        let max_r0 = self.grid.height() - self.window_rows;
        self.row0 = Some(row.saturating_sub(self.window_rows / 2).min(max_r0));
        tile
    }

    /// The touched rows of the window as a tile; resets them to [`NO_DATA`].
    fn take_tile(&mut self) -> Option<ShippedTile> {
        let (lo, hi) = self.touched.take()?;
        let r0 = self.row0?;
        let width = self.grid.width() as usize;
        let span = (lo - r0) as usize * width..(hi - r0 + 1) as usize * width;
        let pixels = self.pixels[span.clone()].to_vec();
        self.pixels[span].fill(NO_DATA);
        self.shipped += 1;
        Some(ShippedTile {
            row0: lo,
            rows: hi - lo + 1,
            width: self.grid.width(),
            pixels,
        })
    }
}

/// The host-side accumulator: the whole output image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Canvas {
    grid: Grid,
    pixels: Vec<i16>,
}

impl Canvas {
    /// An empty image ([`NO_DATA`] everywhere); `grid.pixels() * 2` bytes.
    pub fn new(grid: Grid) -> Canvas {
        Canvas {
            grid,
            pixels: vec![NO_DATA; grid.pixels()],
        }
    }

    /// The grid.
    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// The image, row-major.
    pub fn pixels(&self) -> &[i16] {
        &self.pixels
    }

    /// The image, row-major, by value.
    pub fn into_pixels(self) -> Vec<i16> {
        self.pixels
    }

    /// Composes one record straight into the image (the conventional host); records outside
    /// the grid are ignored.
    pub fn compose_record(&mut self, record: &Record) {
        if let Some(i) = self.grid.pixel(record.lat, record.lon) {
            self.compose_pixel(i, record.value);
        }
    }

    /// Composes `value` into pixel `index` (row-major); an index past the image is ignored.
    pub fn compose_pixel(&mut self, index: usize, value: i16) {
        if let Some(p) = self.pixels.get_mut(index) {
            *p = composite_value(*p, value);
        }
    }
}

/// Composes a shipped tile into the host's image (per-pixel [`composite_value`], so tiles may
/// arrive in any order). Checks the tile's shape against the canvas first.
pub fn compose(canvas: &mut Canvas, tile: &ShippedTile) -> Result<(), EarthError> {
    let grid = canvas.grid;
    if tile.width != grid.width() {
        return Err(EarthError::TileWidth {
            tile: tile.width,
            canvas: grid.width(),
        });
    }
    if u64::from(tile.row0) + u64::from(tile.rows) > u64::from(grid.height()) {
        return Err(EarthError::TileOutOfBounds {
            row0: tile.row0,
            rows: tile.rows,
            height: grid.height(),
        });
    }
    let expected = tile.rows as usize * tile.width as usize;
    if tile.pixels.len() != expected {
        return Err(EarthError::TileShape {
            expected,
            got: tile.pixels.len(),
        });
    }
    let start = tile.row0 as usize * grid.width() as usize;
    let target = &mut canvas.pixels[start..start + expected];
    for (dst, &src) in target.iter_mut().zip(&tile.pixels) {
        *dst = composite_value(*dst, src);
    }
    Ok(())
}

/// The single-node oracle: composes every record straight into a full image (records that do
/// not map onto the grid are ignored), as the conventional-disk algorithm does.
pub fn reference_composite(records: &[Record], grid: Grid) -> Vec<i16> {
    let mut image = vec![NO_DATA; grid.pixels()];
    for r in records {
        if let Some(p) = grid.pixel(r.lat, r.lon) {
            image[p] = image[p].max(r.value);
        }
    }
    image
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(records: u64, days: u32, w: u32, h: u32) -> Generator {
        let grid = Grid::new(w, h).unwrap();
        Generator::new(GenParams {
            records,
            days,
            grid,
            seed: 42,
        })
        .unwrap()
    }

    /// Disk `d` of `n`'s share of `0..total`.
    fn share(total: u64, d: u64, n: u64) -> (u64, u64) {
        (total * d / n, total * (d + 1) / n)
    }

    /// Runs `disks` sub-grids over their shares in batches, checking the cap after every batch;
    /// returns the shipped tiles.
    fn run_disks(g: &Generator, disks: u64, cap: usize, batch: usize) -> Vec<ShippedTile> {
        let grid = g.params().grid;
        let mut tiles = Vec::new();
        for d in 0..disks {
            let (a, b) = share(g.params().records, d, disks);
            let records = g.records(a, b);
            let mut sub = SubGrid::new(grid, cap).unwrap();
            for chunk in records.chunks(batch) {
                sub.feed_batch(chunk, &mut tiles);
                assert!(sub.bytes() <= cap, "{} > {cap}", sub.bytes());
            }
            tiles.extend(sub.finish());
        }
        tiles
    }

    #[test]
    fn grid_mapping_by_hand() {
        let g = Grid::new(360, 180).unwrap();
        assert_eq!(g.locate(90.0, -180.0), Some((0, 0)));
        assert_eq!(g.locate(-90.0, 179.99), Some((179, 359)));
        assert_eq!(g.locate(0.5, 0.5), Some((89, 180)));
        assert_eq!(g.locate(-0.5, -0.5), Some((90, 179)));
        assert_eq!(g.locate(10.0, 180.0), g.locate(10.0, -180.0));
        assert_eq!(g.locate(10.0, 540.5), Some((80, 0)));
        assert_eq!(g.locate(91.0, 0.0), None);
        assert_eq!(g.locate(f32::NAN, 0.0), None);
        assert_eq!(g.locate(0.0, f32::INFINITY), None);
        assert_eq!(g.pixel(0.5, 0.5), Some(89 * 360 + 180));
    }

    #[test]
    fn typed_errors() {
        assert_eq!(
            Grid::new(0, 5),
            Err(EarthError::ZeroGrid {
                width: 0,
                height: 5
            })
        );
        assert!(matches!(
            Grid::new(1 << 20, 1 << 20),
            Err(EarthError::GridTooLarge { .. })
        ));
        let grid = Grid::new(360, 180).unwrap();
        let p = GenParams {
            records: 0,
            days: 1,
            grid,
            seed: 1,
        };
        assert_eq!(Generator::new(p).err(), Some(EarthError::ZeroRecords));
        let p = GenParams {
            records: 10,
            days: 0,
            ..p
        };
        assert_eq!(Generator::new(p).err(), Some(EarthError::ZeroDays));
        assert_eq!(
            SubGrid::new(grid, 719).err(),
            Some(EarthError::WindowTooSmall {
                cap_bytes: 719,
                row_bytes: 720
            })
        );
        assert_eq!(SubGrid::new(grid, 720).unwrap().window_rows(), 1);
        assert_eq!(SubGrid::new(grid, usize::MAX).unwrap().window_rows(), 180);
    }

    #[test]
    fn compose_rejects_bad_tiles() {
        let mut canvas = Canvas::new(Grid::new(4, 3).unwrap());
        let tile = |row0, rows, width, n| ShippedTile {
            row0,
            rows,
            width,
            pixels: vec![1; n],
        };
        assert!(matches!(
            compose(&mut canvas, &tile(0, 1, 5, 5)),
            Err(EarthError::TileWidth { .. })
        ));
        assert!(matches!(
            compose(&mut canvas, &tile(2, 2, 4, 8)),
            Err(EarthError::TileOutOfBounds { .. })
        ));
        assert!(matches!(
            compose(&mut canvas, &tile(u32::MAX, 2, 4, 8)),
            Err(EarthError::TileOutOfBounds { .. })
        ));
        assert!(matches!(
            compose(&mut canvas, &tile(0, 2, 4, 7)),
            Err(EarthError::TileShape { .. })
        ));
        compose(&mut canvas, &tile(1, 2, 4, 8)).unwrap();
        let mut want = [NO_DATA; 12];
        want[4..].fill(1);
        assert_eq!(canvas.pixels(), &want[..]);
    }

    #[test]
    fn generator_is_per_index_and_in_range() {
        let g = generator(20_000, 3, 360, 180);
        let all = g.records(0, 20_000);
        assert_eq!(all.len(), 20_000);
        assert_eq!(g.records(7_000, 7_010), all[7_000..7_010].to_vec());
        assert_eq!(g.record(20_000), None);
        assert!(all.windows(2).all(|w| w[0].day <= w[1].day));
        assert_eq!(all.last().unwrap().day, 2);
        for r in &all {
            assert!((-90.0..=90.0).contains(&r.lat) && (-180.0..180.0).contains(&r.lon));
            assert!((-2000..=10_000).contains(&r.value));
        }
        let other = Generator::new(GenParams {
            seed: 43,
            ..*g.params()
        })
        .unwrap();
        assert_ne!(other.records(0, 100), all[..100].to_vec());
    }

    #[test]
    fn consecutive_records_are_local() {
        let g = generator(50_000, 2, 90, 45);
        let grid = g.params().grid;
        let rows: Vec<u32> = g
            .records(0, 50_000)
            .iter()
            .map(|r| grid.locate(r.lat, r.lon).unwrap().0)
            .collect();
        let same = rows.windows(2).filter(|w| w[0] == w[1]).count();
        assert!(same as f64 > 0.9 * rows.len() as f64, "{same}");
        let covered = reference_composite(&g.records(0, 50_000), grid);
        let filled = covered.iter().filter(|&&v| v != NO_DATA).count();
        assert!(filled as f64 > 0.9 * grid.pixels() as f64, "{filled}");
    }

    #[test]
    fn four_disks_equal_reference() {
        let g = generator(120_000, 4, 360, 180);
        let grid = g.params().grid;
        let cap = 6 * 360 * 2 + 100;
        let tiles = run_disks(&g, 4, cap, 997);
        assert!(tiles.len() > 200, "only {} shifts", tiles.len());
        let reference = reference_composite(&g.records(0, 120_000), grid);
        let mut canvas = Canvas::new(grid);
        for t in &tiles {
            assert!(t.rows <= 6 && t.bytes() <= cap);
            compose(&mut canvas, t).unwrap();
        }
        assert_eq!(canvas.pixels(), &reference[..]);
        let mut reversed = Canvas::new(grid);
        for t in tiles.iter().rev() {
            compose(&mut reversed, t).unwrap();
        }
        assert_eq!(reversed.into_pixels(), reference);
    }

    #[test]
    fn one_row_window_and_whole_grid_window() {
        let g = generator(30_000, 2, 90, 45);
        let grid = g.params().grid;
        let reference = reference_composite(&g.records(0, 30_000), grid);
        for cap in [180, 181, 90 * 45 * 2, 1 << 20] {
            let mut canvas = Canvas::new(grid);
            for t in run_disks(&g, 4, cap, 64) {
                compose(&mut canvas, &t).unwrap();
            }
            assert_eq!(canvas.pixels(), &reference[..], "cap {cap}");
        }
    }

    #[test]
    fn subgrid_ships_and_recentres_by_hand() {
        let grid = Grid::new(4, 10).unwrap();
        let mut sub = SubGrid::new(grid, 3 * 8).unwrap();
        let at = |row: u32, col: u32, value| Record {
            day: 0,
            lat: 90.0 - 18.0 * row as f32 - 9.0,
            lon: -180.0 + 90.0 * col as f32 + 45.0,
            value,
        };
        assert_eq!(sub.feed(&at(5, 1, 7)), None);
        assert_eq!(sub.window(), Some((4, 3)));
        assert_eq!(sub.feed(&at(6, 2, 9)), None);
        assert_eq!(sub.feed(&at(6, 2, 3)), None);
        let tile = sub.feed(&at(9, 0, 1)).unwrap();
        assert_eq!((tile.row0, tile.rows, tile.width), (5, 2, 4));
        let n = NO_DATA;
        assert_eq!(tile.pixels, vec![n, 7, n, n, n, n, 9, n]);
        assert_eq!(sub.window(), Some((7, 3)));
        sub.feed(&Record {
            lat: f32::NAN,
            ..at(0, 0, 1)
        });
        assert_eq!(sub.rejected(), 1);
        let last = sub.finish();
        assert_eq!(last.len(), 1);
        assert_eq!((last[0].row0, last[0].rows), (9, 1));
        assert_eq!(sub.shipped(), 2);
        assert!(sub.finish().is_empty());
    }
}
