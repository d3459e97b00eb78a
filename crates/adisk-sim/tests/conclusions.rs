//! The fidelity suite (issue 15, point 4): every conclusion the papers' text states, checked
//! on the runs it needs. Known divergences must still diverge (else their mark is stale).

use adisk_sim::conclusions::{self, CONCLUSIONS};
use std::path::Path;

#[test]
fn stated_conclusions_hold_or_are_known_divergences() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let runs = conclusions::run_needed(Some(&dir)).unwrap_or_else(|e| panic!("{e}"));
    let verdicts = conclusions::evaluate(&runs);
    print!("{}", conclusions::summary(&verdicts));
    let mut problems = Vec::new();
    for v in &verdicts {
        let c = &v.conclusion;
        match (&v.outcome, c.known_divergence) {
            (Err(e), _) => problems.push(format!("{}: not evaluated: {e}", c.id)),
            (Ok(o), None) if !o.holds => problems.push(format!(
                "{}: FAILS ({}) — \"{}\"",
                c.id, o.measured, c.quote
            )),
            (Ok(o), Some(_)) if o.holds => problems.push(format!(
                "{}: marked as a known divergence but now holds ({}): remove the mark",
                c.id, o.measured
            )),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn conclusion_ids_are_unique_and_cite_a_paper() {
    let mut ids: Vec<&str> = CONCLUSIONS.iter().map(|c| c.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), CONCLUSIONS.len(), "duplicate conclusion ids");
    for c in CONCLUSIONS {
        assert!(
            adisk_sim::trace::PAPER_FILES.contains(&c.paper_file),
            "{}",
            c.id
        );
        assert!(
            !c.quote.is_empty() && !c.reading.is_empty() && !c.needs.is_empty(),
            "{}",
            c.id
        );
    }
}
