//! Property tests of the eight applications (issue 32): random small shapes and skews, each
//! run on an in-process cluster through the application's library API and checked against
//! an independent single-node computation.
//!
//! Machinery. In-process disk nodes on 127.0.0.1 (`adisk_disk::DiskNode`, with the
//! applications' disklets), one cluster per shape (1×8, 2×16, 3×8, 5×12 and 4×64 MiB) started
//! on first use and reused by every case; a quarter of the cases exchange through the host's
//! relay. Each case runs alone on its cluster, fails as a hang after 4 minutes, and drops
//! its tables at the end.
//!
//! Ranges: sizes 1–2 000 (records, tuples per side, fact rows, transactions, sensor records,
//! points, matrix elements; images 1–12), keys in ranges of 1–10⁹ (sort, join, datacube
//! cardinalities, dmine items), uniform, one hot key or one key for every row; 1–5 disks of
//! 8–64 MiB; both modes. Each module's header names its oracle. Every case also checks that
//! the run leaves no intermediate table, that dropping its tables leaves no directory or
//! staged load at any disk, and that every job stayed within its memory and temporary-space
//! grants. Typed refusals are accepted only where documented, and counted.
//!
//! Runs (debug build, 2 cores):
//!
//! ```sh
//! cargo test -j2 -p adisk-apps --test props -- --nocapture     # CI: 264 cases, ~140 s
//! ADISK_PROP_CASES=5000 cargo test -j2 -p adisk-apps --test props -- --nocapture
//! ADISK_PROP_SEED=7 ADISK_PROP_CASES=200 cargo test -j2 -p adisk-apps --test props join
//! ```
//!
//! * `ADISK_PROP_CASES=N`: cases per property (default: each property's CI count, 16–48).
//!   1 000 take 3–16 minutes per property, about an hour for all eight.
//! * `ADISK_PROP_SEED=S`: the seed (default 0). A property's cases depend only on the seed
//!   and its name: a failure printed with its seed reproduces with it.
//!
//! The known bugs fixed in 5c72341 are in the generated cases: supports that make
//! support × transactions a whole number, fft on 1×N, N×1 and 2×2, earth windows of 0 bytes,
//! datacube scratches too small, conv kernels past 32-bit sums (refused, typed).
//!
//! The two bugs found later and left open are fixed and generated too: a join of relations
//! held by different disks (`disk N: unknown table`), and dmine's count distribution with
//! more candidates than one job spec takes. Their smallest cases stay as regression tests at
//! the end of this file. Open bugs found by this suite are kept as `#[ignore = "bug: …"]`
//! regression tests there (none today).
#[path = "props/cluster.rs"]
mod cluster;
#[path = "props/conv.rs"]
mod conv;
#[path = "props/datacube.rs"]
mod datacube;
#[path = "props/dmine.rs"]
mod dmine;
#[path = "props/earth.rs"]
mod earth;
#[path = "props/fft.rs"]
mod fft;
#[path = "props/harness.rs"]
mod harness;
#[path = "props/inputs.rs"]
mod inputs;
#[path = "props/join.rs"]
mod join;
#[path = "props/sort.rs"]
mod sort;

#[test]
fn sort_equals_the_sorted_input() {
    harness::check("sort", 32, sort::cases(), sort::check);
}

#[test]
fn join_equals_a_hash_join_of_the_generated_rows() {
    harness::check("join", 48, join::cases(), join::check);
}

#[test]
fn datacube_equals_a_group_by_of_every_subset_of_dimensions() {
    harness::check("datacube", 32, datacube::cases(), datacube::check);
}

#[test]
fn dmine_finds_exactly_the_itemsets_a_brute_force_count_finds() {
    harness::check("dmine", 32, dmine::cases(), dmine::check);
}

#[test]
fn earth_image_equals_the_composite_of_the_records() {
    harness::check("earth", 40, earth::cases(), earth::check);
}

#[test]
fn conv_images_equal_the_documented_convolution() {
    harness::check("conv", 16, conv::cases(), conv::check);
}

#[test]
fn fft_equals_the_direct_dft() {
    harness::check("fft", 32, fft::cases(), fft::check);
}

#[test]
fn cluster_equals_the_single_node_run() {
    harness::check("cluster", 32, cluster::cases(), cluster::check);
}

// ---------------------------------------------------------------------------------------------
// Regressions: bugs this suite found, each with its minimal case (ignored while open).
// ---------------------------------------------------------------------------------------------

/// A relation with fewer tuples than disks has partitions on fewer disks than the other: each
/// relation is read where it is (a job reading both at every disk holding either failed with
/// `disk N: unknown table`), and the answer equals the oracle's in both modes.
#[test]
fn join_of_relations_on_different_disks() {
    let shape = harness::Shape::new(3, 8);
    let mut failures = Vec::new();
    for mode in [adisk_apps::Mode::Active, adisk_apps::Mode::Conventional] {
        for sizes in [(3, 1), (1, 3)] {
            let case = join::drawn_case(shape, mode, sizes, inputs::Skew::Uniform);
            assert!(join::on_different_disks(&case), "{case:?}");
            if let Err(e) = join::check(case) {
                failures.push(format!("{mode} {sizes:?}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One key for every row of both relations at the largest size (2 000 × 2 000 tuples, a
/// 4-million-row output): the join that used to hang, in both modes.
#[test]
fn join_of_one_key_for_every_row_at_2000_a_side() {
    let shape = harness::Shape::new(4, 64);
    for mode in [adisk_apps::Mode::Active, adisk_apps::Mode::Conventional] {
        let case = join::drawn_case(shape, mode, (2000, 2000), inputs::Skew::Single);
        if let Err(e) = join::check(case.clone()) {
            panic!("{case:?}: {e}");
        }
    }
}

/// Count distribution sends each pass's candidates to the disks in the job's parameters, and
/// a disk refuses any job spec past 1/16 of its memory: a low support used to fail at pass ≥ 3
/// with "a job spec with N bytes besides its Bloom filters exceeds this disk's limit". The
/// candidates are now counted in several scans, and the answer equals the oracle's.
#[test]
fn dmine_with_candidates_past_the_job_spec_limit() {
    if let Err(e) = dmine::check(dmine::spec_too_large_case()) {
        panic!("{e}");
    }
}
