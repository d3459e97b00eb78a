//! uysal-…: active disks, clusters, SMPs. Per-application characterisations (§5) are
//! measured on the 16-host cluster, where every byte a node sends crosses its switch port.

use super::check::{
    Conclusion, Need, Outcome, Runs, cpu_ns_per_input_byte, network_bytes_sent, outcome,
};

const PAPER: &str = "uysal-active-disks-clusters-smps.txt";
const AT: &[(&str, &str)] = &[("run.system", "cluster"), ("run.disks", "16")];

const fn need(file: &'static str) -> Need {
    Need { file, select: AT }
}

fn file_of(app: &str) -> String {
    format!("uysal/{app}.toml")
}

fn cpu(runs: &Runs, app: &str) -> Result<f64, String> {
    runs.get(&file_of(app), AT).map(cpu_ns_per_input_byte)
}

fn comm(runs: &Runs, app: &str) -> Result<f64, String> {
    runs.get(&file_of(app), AT)
        .map(|r| network_bytes_sent(r) as f64)
}

const ALL_APPS: [&str; 9] = [
    "select",
    "aggregate",
    "group_by",
    "datacube",
    "sort",
    "join",
    "dmine",
    "conv",
    "earth",
];

const ALL_NEEDS: &[Need] = &[
    need("uysal/select.toml"),
    need("uysal/aggregate.toml"),
    need("uysal/group_by.toml"),
    need("uysal/datacube.toml"),
    need("uysal/sort.toml"),
    need("uysal/join.toml"),
    need("uysal/dmine.toml"),
    need("uysal/conv.toml"),
    need("uysal/earth.toml"),
];

/// §5: select and aggregate do little computation per byte.
pub const SELECT_AGGREGATE_LITTLE_COMPUTATION: Conclusion = Conclusion {
    id: "uysal-select-aggregate-little-computation",
    paper_file: PAPER,
    locator: "§5",
    quote: "Both `select` and `aggregate` perform little computation/byte.",
    reading: "processor time per input byte of select and of aggregate is below that of every other application (16-host cluster)",
    needs: ALL_NEEDS,
    check: select_aggregate_little_computation,
    known_divergence: Some(
        "select's and aggregate's cost is riedel-...'s measured 6.5 cycles/byte (Table 7); no paper gives sort's per-record cost, and sort computes more per input byte than select only above 650 cycles per 100-byte record over both passes, while the model assumes 310 (partition 60, radix sort 100, merge 150). See 'Derivations' in docs/simulator.md",
    ),
};

fn select_aggregate_little_computation(runs: &Runs) -> Result<Outcome, String> {
    let mut per_app = Vec::new();
    for app in ALL_APPS {
        per_app.push((app, cpu(runs, app)?));
    }
    let low = |a: &str| {
        per_app
            .iter()
            .find(|(n, _)| *n == a)
            .map(|x| x.1)
            .unwrap_or(f64::NAN)
    };
    let others_min = per_app
        .iter()
        .filter(|(n, _)| *n != "select" && *n != "aggregate")
        .map(|x| x.1)
        .fold(f64::INFINITY, f64::min);
    let list: Vec<String> = per_app.iter().map(|(n, v)| format!("{n} {v:.1}")).collect();
    outcome(
        low("select") < others_min && low("aggregate") < others_min,
        format!("cpu ns/byte: {}", list.join(", ")),
    )
}

/// §5: group-by ships much more than select.
pub const GROUP_BY_LARGER_RESULTS_THAN_SELECT: Conclusion = Conclusion {
    id: "uysal-group-by-larger-results-than-select",
    paper_file: PAPER,
    locator: "§5",
    quote: "Note that, in our experiments, `group-by` generates significantly larger results than `select`.",
    reading: "bytes sent over the network by group-by are at least twice those of select",
    needs: &[need("uysal/select.toml"), need("uysal/group_by.toml")],
    check: |runs| {
        ratio_at_least(
            comm(runs, "group_by")?,
            comm(runs, "select")?,
            2.0,
            "network bytes group_by/select",
        )
    },
    known_divergence: None,
};

/// §5: group-by computes more per byte than select.
pub const GROUP_BY_MORE_COMPUTATION_THAN_SELECT: Conclusion = Conclusion {
    id: "uysal-group-by-more-computation-than-select",
    paper_file: PAPER,
    locator: "§5",
    quote: "It also performs more computation/byte as it needs to maintain a hash-table of aggregates.",
    reading: "processor time per input byte of group-by exceeds that of select",
    needs: &[need("uysal/select.toml"), need("uysal/group_by.toml")],
    check: |runs| {
        ratio_at_least(
            cpu(runs, "group_by")?,
            cpu(runs, "select")?,
            1.0,
            "cpu/byte group_by/select",
        )
    },
    known_divergence: None,
};

/// §5: datacube computes more per byte than group-by.
pub const DATACUBE_MORE_COMPUTATION_THAN_GROUP_BY: Conclusion = Conclusion {
    id: "uysal-datacube-more-computation-than-group-by",
    paper_file: PAPER,
    locator: "§5",
    quote: "Note that since datacube performs multiple group-bys in a single scan, it performs more computation per byte read than group-by.",
    reading: "processor time per input byte of datacube exceeds that of group-by",
    needs: &[need("uysal/group_by.toml"), need("uysal/datacube.toml")],
    check: |runs| {
        ratio_at_least(
            cpu(runs, "datacube")?,
            cpu(runs, "group_by")?,
            1.0,
            "cpu/byte datacube/group_by",
        )
    },
    known_divergence: None,
};

/// §5: datacube communicates much more than group-by.
pub const DATACUBE_MORE_DATA_THAN_GROUP_BY: Conclusion = Conclusion {
    id: "uysal-datacube-more-data-than-group-by",
    paper_file: PAPER,
    locator: "§5",
    quote: "Also, since it computes a multi-dimensional aggregate, it generates and communicates significantly more data.",
    reading: "bytes sent over the network by datacube are at least twice those of group-by",
    needs: &[need("uysal/group_by.toml"), need("uysal/datacube.toml")],
    check: |runs| {
        ratio_at_least(
            comm(runs, "datacube")?,
            comm(runs, "group_by")?,
            2.0,
            "network bytes datacube/group_by",
        )
    },
    known_divergence: None,
};

/// §5: sort communicates much more than datacube.
pub const SORT_MORE_COMMUNICATION_THAN_DATACUBE: Conclusion = Conclusion {
    id: "uysal-sort-more-communication-than-datacube",
    paper_file: PAPER,
    locator: "§5",
    quote: "Since it repartitions its entire dataset, sort performs significantly more communication than datacube.",
    reading: "bytes sent over the network by sort are at least twice those of datacube",
    needs: &[need("uysal/sort.toml"), need("uysal/datacube.toml")],
    check: |runs| {
        ratio_at_least(
            comm(runs, "sort")?,
            comm(runs, "datacube")?,
            2.0,
            "network bytes sort/datacube",
        )
    },
    known_divergence: Some(
        "the paper states each cube attribute's distinct values but neither their joint distribution nor the tuples' order; with a cluster host's stated 128 MB the first pipeline's tables (at least 557 MB even with the fewest groups any distribution allows) hold under a fifth of their groups, so the flushes of section 5's algorithm ship partials of 48 GB (hierarchical attributes, a what-if) to 174 GB (independent, the model's assumption) against sort's 16 GB; only an input clustered on the group-by attributes (not stated) could make sort's communication twice the cube's. See 'Derivations' in docs/simulator.md",
    ),
};

/// §5: sort and join communicate alike.
pub const SORT_AND_JOIN_SIMILAR_COMMUNICATION: Conclusion = Conclusion {
    id: "uysal-sort-and-join-similar-communication",
    paper_file: PAPER,
    locator: "§5",
    quote: "Since both sort and join repartition their entire dataset, their communication requirements are similar.",
    reading: "network bytes of join and of sort are within a factor of 2 of each other",
    needs: &[need("uysal/sort.toml"), need("uysal/join.toml")],
    check: sort_and_join_similar,
    known_divergence: None,
};

fn sort_and_join_similar(runs: &Runs) -> Result<Outcome, String> {
    let ratio = comm(runs, "join")? / comm(runs, "sort")?;
    outcome(
        (0.5..=2.0).contains(&ratio),
        format!("network bytes join/sort = {ratio:.2}"),
    )
}

/// §5: dmine communicates less than sort, join and datacube.
pub const DMINE_LESS_COMMUNICATION: Conclusion = Conclusion {
    id: "uysal-dmine-less-communication",
    paper_file: PAPER,
    locator: "§5",
    quote: "Its communication requirements, therefore, are smaller than that of `sort`, `join` and `datacube`.",
    reading: "network bytes of dmine are below those of sort, join and datacube",
    needs: &[
        need("uysal/dmine.toml"),
        need("uysal/sort.toml"),
        need("uysal/join.toml"),
        need("uysal/datacube.toml"),
    ],
    check: dmine_less_communication,
    known_divergence: None,
};

fn dmine_less_communication(runs: &Runs) -> Result<Outcome, String> {
    let dmine = comm(runs, "dmine")?;
    let others = [
        comm(runs, "sort")?,
        comm(runs, "join")?,
        comm(runs, "datacube")?,
    ];
    outcome(
        others.iter().all(|o| dmine < *o),
        format!(
            "network MB: dmine {:.0}, sort {:.0}, join {:.0}, datacube {:.0}",
            dmine / 1e6,
            others[0] / 1e6,
            others[1] / 1e6,
            others[2] / 1e6
        ),
    )
}

/// §5: conv and earth are compute-intensive.
pub const CONV_EARTH_COMPUTE_INTENSIVE: Conclusion = Conclusion {
    id: "uysal-conv-earth-compute-intensive",
    paper_file: PAPER,
    locator: "§5",
    quote: "Note that `conv` is compute-intensive and performs a very large amount of computation per byte read.",
    reading: "conv and earth (whose paragraph ends with the same sentence) have the two highest processor times per input byte of the nine applications",
    needs: ALL_NEEDS,
    check: conv_earth_compute_intensive,
    known_divergence: Some(
        "earth is the most expensive per byte; datacube, whose merge work follows the unstated datacube distribution, ranks above conv with independent attributes (672 against 169 ns/byte), and with the fewest groups (hierarchical, a what-if) falls to 165, below conv but then dmine (174, an assumed cost) ranks above conv; conv's own cost is an assumed 2 cycles per multiply-accumulate of the 5x5 kernel. See 'Derivations' in docs/simulator.md",
    ),
};

fn conv_earth_compute_intensive(runs: &Runs) -> Result<Outcome, String> {
    let mut per_app = Vec::new();
    for app in ALL_APPS {
        per_app.push((app, cpu(runs, app)?));
    }
    per_app.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<&str> = per_app.iter().take(2).map(|x| x.0).collect();
    outcome(
        top.contains(&"conv") && top.contains(&"earth"),
        format!(
            "highest cpu ns/byte: {}",
            per_app
                .iter()
                .take(3)
                .map(|(n, v)| format!("{n} {v:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
}

/// §4: more disk memory (more buffers per stream) tolerates latency.
pub const MORE_BUFFERS_TOLERATE_LATENCY: Conclusion = Conclusion {
    id: "uysal-more-buffers-tolerate-latency",
    paper_file: PAPER,
    locator: "§4",
    quote: "This allowed these configurations to tolerate longer communication and I/O latencies.",
    reading: "for every application at 32 and 128 disks, active disks with 64 MB (4 buffers) and 128 MB (8 buffers) are no slower than with 32 MB (2 buffers), within 1%",
    needs: &[
        Need {
            file: "uysal/variations.toml",
            select: &[("run.system", "active_disks")],
        },
        Need {
            file: "uysal/variations.toml",
            select: &[("run.system", "ad_64mb")],
        },
        Need {
            file: "uysal/variations.toml",
            select: &[("run.system", "ad_128mb")],
        },
    ],
    check: more_buffers_tolerate_latency,
    known_divergence: None,
};

fn more_buffers_tolerate_latency(runs: &Runs) -> Result<Outcome, String> {
    let file = "uysal/variations.toml";
    let mut worse = Vec::new();
    for app in ALL_APPS {
        for disks in ["32", "128"] {
            let base = runs.total_s(
                file,
                &[
                    ("variant", app),
                    ("run.disks", disks),
                    ("run.system", "active_disks"),
                ],
            )?;
            for sys in ["ad_64mb", "ad_128mb"] {
                let t = runs.total_s(
                    file,
                    &[("variant", app), ("run.disks", disks), ("run.system", sys)],
                )?;
                if t > base * 1.01 {
                    worse.push(format!("{app}@{disks} {sys} {:.2}x", t / base));
                }
            }
        }
    }
    let measured = if worse.is_empty() {
        "no application slower with more memory".to_string()
    } else {
        format!("slower with more memory: {}", worse.join(", "))
    };
    outcome(worse.is_empty(), measured)
}

fn ratio_at_least(a: f64, b: f64, factor: f64, what: &str) -> Result<Outcome, String> {
    let ratio = a / b;
    outcome(
        ratio >= factor,
        format!("{what} = {ratio:.2} (need >= {factor})"),
    )
}
