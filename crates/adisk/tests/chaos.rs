//! `adisk chaos` in CI (issue 12): two seeds, half a minute each, on a real 4-disk cluster —
//! disks killed, stopped and restarted, bytes flipped and restored, tables reloaded, every
//! answer checked against DuckDB. Zero wrong answers, untyped errors or hangs; a failure names
//! its seed. Longer runs by hand: `adisk chaos --seed N --minutes 30`.
mod common;

#[test]
fn chaos_seeds_find_no_wrong_answers_panics_or_hangs() {
    let tmp = tempfile::tempdir().unwrap();
    for seed in ["1", "2"] {
        let out = common::ok(tmp.path(), &["chaos", "--seed", seed, "--minutes", "0.5"]);
        assert!(out.contains("failures 0") && out.contains("answers correct"), "seed {seed}: {out}");
    }
}
