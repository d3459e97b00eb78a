//! The `adisk sim …` commands.

use crate::SimError;
use crate::experiment::{self, Loaded};
use std::path::{Path, PathBuf};

/// Simulator subcommands.
#[allow(rustdoc::broken_intra_doc_links)] // "[sweep]" is the TOML table, shown verbatim by --help
#[derive(clap::Subcommand, Debug)]
pub enum SimCommand {
    /// Run one experiment file
    Run {
        /// Experiment file (TOML).
        file: PathBuf,
        /// Write the report here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        /// table|json|csv
        #[arg(long, default_value = "table")]
        format: String,
        /// Seed (default: the file's `experiment.seed`).
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Sweep an experiment file over its [sweep] axes
    Sweep {
        /// Experiment file (TOML).
        file: PathBuf,
        /// Output directory for CSV/SVG/table (default: print the table only).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Seed.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Re-run the experiments of a paper (acharya|uysal|memik|riedel|chiu|all)
    Reproduce {
        /// Paper key or `all`.
        paper: String,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Directory holding `<paper>/*.toml` (default: ./experiments, then the source tree, then the built-in copies).
        #[arg(long)]
        experiments: Option<PathBuf>,
    },
    /// Rerun an experiment with each assumption halved and doubled; report which comparisons change
    Sensitivity {
        /// Experiment file (TOML).
        file: PathBuf,
        /// Scale each assumption by 1/FACTOR and by FACTOR.
        #[arg(long, default_value_t = 2.0)]
        factor: f64,
        /// Only keys whose dotted path contains this text.
        #[arg(long)]
        only: Option<String>,
        /// Write the report here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Which assumptions each stated conclusion depends on: rerun the runs the conclusions
    /// need with each assumption (of the files they read, and each assumed cost) halved and
    /// doubled, and list every scaling that changes a verdict
    SensitivityConclusions {
        /// Only conclusions whose id contains this text.
        #[arg(long)]
        conclusion: Option<String>,
        /// Scale each assumption by 1/FACTOR and by FACTOR.
        #[arg(long, default_value_t = 2.0)]
        factor: f64,
        /// Only keys whose dotted path contains this text.
        #[arg(long)]
        only: Option<String>,
        /// Directory holding `<paper>/*.toml` (default: ./experiments, then the source tree, then the built-in copies).
        #[arg(long)]
        experiments: Option<PathBuf>,
        /// Write the report here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Replay a trace recorded on the real engine (format `adisk-trace` v1) on another
    /// configuration, or on the recorded one to compare with the measured time
    Replay {
        /// Trace file (JSON).
        trace: PathBuf,
        /// Replay configuration (TOML); absent = the configuration the trace was recorded on.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Flags overriding the configuration file.
        #[command(flatten)]
        overrides: crate::replay::config::ReplayOverrides,
        /// table|json
        #[arg(long, default_value = "table")]
        format: String,
        /// Write the report here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Benchmark the event loop (events/s) and the time of `reproduce all`
    Bench {
        /// Events to process.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
    },
}

/// Run a subcommand.
pub fn run(cmd: SimCommand) -> Result<(), SimError> {
    match cmd {
        SimCommand::Run {
            file,
            out,
            format,
            seed,
        } => run_file(&file, out.as_deref(), &format, seed),
        SimCommand::Sweep { file, out, seed } => sweep_file(&file, out.as_deref(), seed),
        SimCommand::Reproduce {
            paper,
            out,
            experiments,
        } => {
            let t = reproduce(&paper, &out, experiments.as_deref(), true)?;
            eprintln!(
                "reproduce {paper}: {} experiment files, {} runs, {} of {} stated conclusions hold",
                t.files, t.runs, t.conclusions_hold, t.conclusions
            );
            Ok(())
        }
        SimCommand::Sensitivity {
            file,
            factor,
            only,
            out,
        } => {
            let text = crate::sensitivity::run(&file, factor, only.as_deref())?;
            emit(out.as_deref(), &text)
        }
        SimCommand::SensitivityConclusions {
            conclusion,
            factor,
            only,
            experiments,
            out,
        } => {
            let text = crate::sensitivity::conclusions_run(
                experiments.as_deref(),
                factor,
                conclusion.as_deref(),
                only.as_deref(),
            )?;
            emit(out.as_deref(), &text)
        }
        SimCommand::Replay {
            trace,
            config,
            overrides,
            format,
            out,
        } => replay(
            &trace,
            config.as_deref(),
            &overrides,
            &format,
            out.as_deref(),
        ),
        SimCommand::Bench { events } => bench(events),
    }
}

/// `run`: the first point of `file`, reported as a table, JSON or CSV.
fn run_file(
    file: &Path,
    out: Option<&Path>,
    format: &str,
    seed: Option<u64>,
) -> Result<(), SimError> {
    let l = experiment::load(file)?;
    let pts = experiment::points(&l, false)?;
    let p = pts
        .first()
        .ok_or_else(|| SimError::Internal("no point".into()))?;
    let r = experiment::run_point(file, p, seed)?;
    let text = match format {
        "table" => r.to_table(),
        "json" => {
            serde_json::to_string_pretty(&r).map_err(|e| SimError::Internal(e.to_string()))? + "\n"
        }
        "csv" => r.resources_csv(),
        other => {
            return Err(SimError::Usage(format!(
                "--format must be table, json or csv, got `{other}`"
            )));
        }
    };
    emit(out, &text)
}

/// `sweep`: every point of `file`; its outputs written to `out`, or its table printed.
fn sweep_file(file: &Path, out: Option<&Path>, seed: Option<u64>) -> Result<(), SimError> {
    let l = experiment::load(file)?;
    let pts = experiment::points(&l, true)?;
    let reports = experiment::run_points(file, &pts, seed, true)?;
    match out {
        Some(dir) => {
            let table = experiment::write_outputs(&l, &reports, dir)?;
            print!("{table}");
            Ok(())
        }
        None => {
            let ratios = experiment::baseline_ratios(&reports, &l.exp.report.baseline);
            print!(
                "{}",
                experiment::summary_table(
                    &l.exp.experiment.name,
                    &l.exp.experiment.recreates,
                    &reports,
                    &ratios
                )
            );
            Ok(())
        }
    }
}

/// `replay`: a trace on a configuration, reported as a table or JSON.
fn replay(
    trace: &Path,
    config: Option<&Path>,
    overrides: &crate::replay::config::ReplayOverrides,
    format: &str,
    out: Option<&Path>,
) -> Result<(), SimError> {
    if format != "table" && format != "json" {
        return Err(SimError::Usage(format!(
            "--format must be table or json, got `{format}`"
        )));
    }
    let report = crate::replay::replay_files(trace, config, overrides)?;
    let text = if format == "json" {
        report.to_json()
    } else {
        report.to_table()
    };
    emit(out, &text)
}

/// `bench`: the event loop's rate over `events` events, then the time of `reproduce all`.
fn bench(events: u64) -> Result<(), SimError> {
    let start = std::time::Instant::now();
    let r = crate::des::bench_event_loop(events);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "event loop: {} events in {:.3} s = {:.2} M events/s (checksum {:016x})",
        r.events,
        secs,
        r.events as f64 / secs / 1e6,
        r.checksum
    );
    let dir = std::env::temp_dir().join(format!("adisk-sim-bench-{}", std::process::id()));
    let start = std::time::Instant::now();
    let t = reproduce("all", &dir, None, false)?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "reproduce all: {} files, {} runs, {} simulated events in {:.2} s ({:.2} M events/s)",
        t.files,
        t.runs,
        t.events,
        secs,
        t.events as f64 / secs / 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Write `text` to `out`, or print it.
fn emit(out: Option<&Path>, text: &str) -> Result<(), SimError> {
    match out {
        Some(p) => std::fs::write(p, text).map_err(|e| SimError::Io {
            path: p.display().to_string(),
            source: e,
        }),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// Totals of a reproduce run.
#[derive(Clone, Debug, Default)]
pub struct ReproduceTotals {
    /// Experiment files run.
    pub files: usize,
    /// Runs (sweep points).
    pub runs: usize,
    /// Simulated events.
    pub events: u64,
    /// Stated conclusions evaluated (see `conclusions`).
    pub conclusions: usize,
    /// Of which hold.
    pub conclusions_hold: usize,
}

/// Run every experiment file of `paper`, writing outputs to `out/<paper>/`.
pub fn reproduce(
    paper: &str,
    out: &Path,
    dir: Option<&Path>,
    print: bool,
) -> Result<ReproduceTotals, SimError> {
    let sources = experiment::sources(paper, dir)?;
    let mut totals = ReproduceTotals::default();
    let mut runs = crate::conclusions::check::Runs::default();
    for (path, text) in sources {
        let l: Loaded = experiment::load_str(&path, &text)?;
        let pts = experiment::points(&l, true)?;
        let reports = experiment::run_points(&path, &pts, None, false)?;
        let sub = out.join(&l.exp.experiment.paper);
        let table = experiment::write_outputs(&l, &reports, &sub)?;
        if print {
            print!("{table}");
        }
        totals.files += 1;
        totals.runs += reports.len();
        totals.events += reports.iter().map(|r| r.events).sum::<u64>();
        runs.add(&crate::conclusions::file_key(&path), reports);
    }
    let verdicts = crate::conclusions::evaluate(&runs);
    let summary = crate::conclusions::summary(&verdicts);
    let path = out.join("conclusions.txt");
    std::fs::write(&path, &summary).map_err(|e| SimError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    if print {
        print!("{summary}");
    }
    totals.conclusions_hold = verdicts.iter().filter(|v| v.status() == "holds").count();
    totals.conclusions = verdicts.len();
    Ok(totals)
}
