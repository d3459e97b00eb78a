//! chiu-…: distributed smart disks. Its own results are withheld; its text states one
//! result of memik-… and the routing of its fully distributed design.

use super::check::{Conclusion, Need, Outcome, Runs, outcome, port_bytes_received};

const PAPER: &str = "chiu-distributed-smart-disks.txt";

/// §2.2 (citing memik-…): smart disks outperformed host-based and cluster systems.
pub const SMART_DISKS_OUTPERFORMED_HOST_AND_CLUSTERS: Conclusion = Conclusion {
    id: "chiu-cites-memik-smart-disks-outperformed-host-and-clusters",
    paper_file: PAPER,
    locator: "§2.2",
    quote: "Results from [9] showed that Smart Disks outperformed both host-based and cluster systems in comparable configurations.",
    reading: "memik-… base configuration: the smart disks' mean normalized time over the six queries is below the single host's (1) and both clusters'",
    needs: &[Need {
        file: "memik/base.toml",
        select: &[],
    }],
    check: outperformed,
    known_divergence: Some(
        "the smart disks beat the single host and the cluster of two hosts, but by memik-...'s stated configuration the cluster of four 400 MHz hosts has 8/7 of the smart disks' processing (1.6 vs 1.4 GHz, the central unit holds no data) and of their drives (8 vs 7), so it wins every scan- or processor-bound operator; the smart disks can win only where communication dominates, which rests on per-tuple costs memik-... does not state (memik-... itself aims at a system that 'performs as good as' the costlier ones). See 'Derivations' in docs/simulator.md",
    ),
};

fn outperformed(runs: &Runs) -> Result<Outcome, String> {
    let sd = super::memik::mean_normalized(runs, "smart_disks")?;
    let c2 = super::memik::mean_normalized(runs, "cluster2")?;
    let c4 = super::memik::mean_normalized(runs, "cluster4")?;
    outcome(
        sd < 1.0 && sd < c2 && sd < c4,
        format!(
            "mean normalized: smart disks {sd:.3}, cluster of 2 {c2:.3}, cluster of 4 {c4:.3}, single host 1"
        ),
    )
}

/// §3: within a group, redistribution does not pass through the client.
pub const NO_CLIENT_ROUTING_WITHIN_A_GROUP: Conclusion = Conclusion {
    id: "chiu-no-client-routing-within-a-group",
    paper_file: PAPER,
    locator: "§3",
    quote: "To exchange, combine, or re-distribute data within an SDG, data is communicated between the involved SDs without being routed through the client.",
    reading: "Q12 at SF 1 on 8 smart disks: the client receives at most half as many bytes in the fully distributed system as in the partially distributed one",
    needs: &[Need {
        file: "chiu/tpch.toml",
        select: &[
            ("workload.query", "Q12"),
            ("workload.scale_factor", "1"),
            ("run.disks", "8"),
        ],
    }],
    check: no_client_routing,
    known_divergence: None,
};

fn no_client_routing(runs: &Runs) -> Result<Outcome, String> {
    let at = |s| {
        runs.get(
            "chiu/tpch.toml",
            &[
                ("workload.query", "Q12"),
                ("workload.scale_factor", "1"),
                ("run.disks", "8"),
                ("run.system", s),
            ],
        )
    };
    let full = port_bytes_received(at("sd_full")?, "client") as f64;
    let partial = port_bytes_received(at("sd_partial")?, "client") as f64;
    outcome(
        full <= 0.5 * partial,
        format!(
            "client received {:.1} MB fully vs {:.1} MB partially distributed",
            full / 1e6,
            partial / 1e6
        ),
    )
}
