//! `adisk sql`, `adisk explain [analyze]`, `adisk tpch query|check`.
use crate::common::CliError;
use adisk_core::stats::human_bytes;
use adisk_host::sql::{Offload, QueryOutput, SqlEngine, SqlOptions, oracle, report, tpch};
use arrow::array::RecordBatch;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Options shared by the SQL commands.
#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    /// How much runs at the disks: none | project | select | aggregate | semijoin | disks | auto.
    #[arg(long, default_value = "auto")]
    pub offload: String,
    /// Bloom filter size for semi-joins, KiB (capped by the disks' memory grant).
    #[arg(long, default_value_t = 1024)]
    pub bloom_kib: u64,
    /// Scratch per disk stage, KiB (0: the disk's default, a quarter of its memory).
    #[arg(long, default_value_t = 0)]
    pub scratch_kib: u64,
    /// Temporary disk space per disk job, KiB: sorts, aggregations and (at `disks`) sort-merge
    /// joins past their scratch spill there (0: the default, none for scan jobs and 256 MiB
    /// for `disks` stages that sort, aggregate or join; past it a job fails).
    #[arg(long, default_value_t = 0)]
    pub temp_kib: u64,
    /// Stream buffer size of the disk jobs, KiB (0: the disks' default).
    #[arg(long, default_value_t = adisk_host::sql::SQL_BUFFER_KIB)]
    pub buffer_kib: u64,
    /// The host program the disk jobs count as: disks share their processing fairly between
    /// programs (default: one program per `adisk` process).
    #[arg(long)]
    pub program: Option<String>,
    /// At `disks` (or when `auto` chooses it): the disk that does the host's combining work
    /// (memik's central unit); the host only submits the plan and receives the result.
    #[arg(long)]
    pub central_unit: Option<u32>,
    /// At `disks`: every partitioned join as a sort-merge join (its sorts spill to the disks'
    /// temporary space) and no build side broadcast. A `disks` query that runs a disk out of
    /// memory is rerun this way by itself.
    #[arg(long)]
    pub spill_joins: bool,
    /// memik's operation bundling: none, paper or excessive. At `disks` each stage's
    /// operations run as the bundles this relation of bindable operations forms, each a DiskOS
    /// stage of its own (without it: every operation between two exchanges in one). `explain`
    /// also prints the bundles of the whole plan.
    #[arg(long)]
    pub bundling: Option<String>,
}

impl EngineArgs {
    pub fn options(&self, offload: Offload) -> SqlOptions {
        SqlOptions {
            offload,
            bloom_kib: self.bloom_kib,
            scratch_kib: self.scratch_kib,
            temp_kib: self.temp_kib,
            host_threads: 0,
            buffer_kib: self.buffer_kib,
            program: self.program.clone(),
            central_unit: self.central_unit,
            result_cap_bytes: None,
            spill_joins: self.spill_joins,
            // Checked by `offload`, which every caller asks first.
            bundling: self.bundling().ok().flatten(),
        }
    }
    /// The `--bundling` relation, if given.
    pub fn bundling(&self) -> Result<Option<adisk_host::sql::bundling::Bundling>, CliError> {
        Ok(self.bundling.as_deref().map(str::parse).transpose()?)
    }
    /// The offload level (and a check of `--bundling`).
    pub fn offload(&self) -> Result<Offload, CliError> {
        self.bundling()?;
        Ok(self.offload.parse::<Offload>()?)
    }
}

/// `adisk sql` arguments.
#[derive(clap::Args, Debug)]
pub struct SqlArgs {
    /// The query (none, and no --file: read queries ending in `;` from standard input).
    pub query: Option<String>,
    /// Read the query from a file.
    #[arg(long, conflicts_with = "query")]
    pub file: Option<PathBuf>,
    /// Output format (arrow: an Arrow IPC stream on standard output).
    #[arg(long, value_enum, default_value_t = ResultFormat::Table)]
    pub format: ResultFormat,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print what the query moved (bytes read, shipped, rows, time) on standard error, and at
    /// `auto` which plan it chose and why.
    #[arg(long)]
    pub stats: bool,
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub remote: ConnectArgs,
}

/// Where a command reaches a running Flight SQL service instead of working in this process.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// Run on the running Flight SQL service at this URL (`grpc+tls://HOST:PORT`,
    /// `grpc://HOST:PORT` for a plaintext one, or `serve`: the one `adisk up` started, from
    /// `cluster.toml`) instead of in this process.
    #[arg(long)]
    pub connect: Option<String>,
    /// For `grpc+tls://`: the CA certificate that signed the service's certificate (default:
    /// `[serve]`'s `tls_ca`, else `[cluster.tls]`'s `ca`, of `cluster.toml`).
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// For a service that wants client certificates (mutual TLS): this client's certificate.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// User name for `--connect`.
    #[arg(long, default_value = "admin")]
    pub user: String,
    /// File holding the password for `--connect` (default: `[serve]`'s
    /// `admin_password_file` in `cluster.toml`).
    #[arg(long)]
    pub password_file: Option<PathBuf>,
}

impl ConnectArgs {
    /// A logged-in client of the service `--connect` names; None without `--connect`.
    ///
    /// # Errors
    /// No such service, no password file, a refused login.
    pub async fn client(
        &self,
        dir: &Path,
    ) -> Result<Option<adisk_server::client::Client>, CliError> {
        let Some(url) = &self.connect else {
            return Ok(None);
        };
        let config = adisk_core::config::ClusterConfig::load(&dir.join("cluster.toml")).ok();
        let serve = config.as_ref().and_then(|c| c.serve.clone());
        let url = match (url.as_str(), &serve) {
            ("serve", Some(s)) => adisk_server::client::served_url(s),
            ("serve", None) => {
                return Err(CliError::Other(format!(
                    "--connect serve: no Flight SQL service in {} (adisk up starts one)",
                    dir.join("cluster.toml").display()
                )));
            }
            (u, _) => u.to_string(),
        };
        let file = self
            .password_file
            .clone()
            .or_else(|| serve.and_then(|s| s.admin_password_file))
            .ok_or_else(|| {
                CliError::Other(
                    "--connect needs --password-file (no [serve] admin password in cluster.toml)"
                        .into(),
                )
            })?;
        let password = std::fs::read_to_string(&file)
            .map_err(|e| CliError::Other(format!("{}: {e}", file.display())))?;
        let ca = self.tls_ca.clone().or_else(|| {
            let config = config.as_ref()?;
            let from_serve = config.serve.as_ref().and_then(|s| s.tls_ca.clone());
            from_serve.or_else(|| config.cluster.tls.as_ref().map(|t| t.ca.clone()))
        });
        let identity = self.tls_cert.as_deref().zip(self.tls_key.as_deref());
        let tls = adisk_core::tls::ClientTls::load(ca.as_deref(), identity)
            .map_err(|e| CliError::Other(e.to_string()))?;
        let client = adisk_server::client::Client::connect(&url, &self.user, password.trim(), &tls)
            .await
            .map_err(|e| CliError::Other(e.to_string()))?;
        Ok(Some(client))
    }
}

/// A client's answer to `sql`, as a CLI error when it fails.
async fn remote_query(
    client: &mut adisk_server::client::Client,
    sql: &str,
) -> Result<(arrow::datatypes::SchemaRef, Vec<arrow::array::RecordBatch>), CliError> {
    client
        .query(sql)
        .await
        .map_err(|e| CliError::Other(e.to_string()))
}

/// Where `adisk sql` runs its queries: in this process, or on a running service.
enum Runner {
    Local(SqlEngine),
    Remote(adisk_server::client::Client),
}

impl Runner {
    async fn new(dir: &Path, a: &SqlArgs) -> Result<Self, CliError> {
        Ok(match a.remote.client(dir).await? {
            Some(client) => Runner::Remote(client),
            None => Runner::Local(engine(dir, a.engine.options(a.engine.offload()?)).await?),
        })
    }

    /// Runs `q` and prints its result (and, with `stats`, what it moved, when known).
    async fn run(
        &mut self,
        q: &str,
        format: ResultFormat,
        stats: bool,
        trace: &TraceArgs,
    ) -> Result<(), CliError> {
        match self {
            Runner::Local(eng) => {
                let out = eng.query(q).await?;
                print_batches(&out.batches, &out.schema, format)?;
                if stats {
                    eprintln!("{}", moved(&out));
                    if let Some(choice) = &out.choice {
                        eprintln!("{choice}");
                    }
                }
                trace.write(eng, &out, q).await?;
            }
            Runner::Remote(client) => {
                let (schema, batches) = remote_query(client, q).await?;
                print_batches(&batches, &schema, format)?;
                trace.write_remote(client).await?;
            }
        }
        Ok(())
    }
}

/// `adisk explain` arguments.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// `analyze` (optional) and the query.
    #[arg(required = true, num_args = 1..=2)]
    pub words: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ExplainFormat::Text)]
    pub format: ExplainFormat,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// With `analyze`: the query's trace.
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub remote: ConnectArgs,
}

/// Where a query's trace goes (`adisk sql`, `adisk explain analyze`; the local engine only).
#[derive(clap::Args, Debug, Default)]
pub struct TraceArgs {
    /// Write the query's trace to FILE: per disk and stage what it read, processed and
    /// shipped, its CPU and wall time (the `adisk-trace` format, which `adisk sim replay`
    /// reads; docs/simulator.md). In the prompt, each query overwrites it.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write the query's timeline in Chrome's trace-event format to FILE: a process per disk,
    /// a track per job and stage (open it in https://ui.perfetto.dev or chrome://tracing).
    #[arg(long, value_name = "FILE")]
    pub chrome_trace: Option<PathBuf>,
}

impl TraceArgs {
    fn wanted(&self) -> bool {
        self.trace.is_some() || self.chrome_trace.is_some()
    }

    /// Refuses a trace where the query does not run in this process.
    fn local_only(&self, remote: bool, why: &str) -> Result<(), CliError> {
        if self.wanted() && remote {
            return Err(CliError::Other(format!(
                "--trace/--chrome-trace: {why} (the trace is made from the local engine's statistics)"
            )));
        }
        Ok(())
    }

    /// Writes `out`'s trace where asked.
    async fn write(&self, eng: &SqlEngine, out: &QueryOutput, text: &str) -> Result<(), CliError> {
        if !self.wanted() {
            return Ok(());
        }
        self.write_trace(&eng.trace(out, text).await)
    }

    /// Writes the trace of the last query `client` ran through the service, where asked.
    async fn write_remote(
        &self,
        client: &mut adisk_server::client::Client,
    ) -> Result<(), CliError> {
        if !self.wanted() {
            return Ok(());
        }
        let trace = client
            .last_trace()
            .await
            .map_err(|e| CliError::Other(format!("--trace: {e}")))?;
        self.write_trace(&trace)
    }

    /// Writes `trace` where asked, and says what it holds.
    pub fn write_trace(&self, trace: &adisk_core::trace::Trace) -> Result<(), CliError> {
        let write = |path: &Path, value: serde_json::Value| {
            let bytes = serde_json::to_vec_pretty(&value)
                .map_err(|e| CliError::Other(format!("encoding the trace: {e}")))?;
            std::fs::write(path, bytes).map_err(|e| {
                CliError::Other(format!("writing the trace to {}: {e}", path.display()))
            })
        };
        if let Some(path) = &self.trace {
            let value = serde_json::to_value(trace)
                .map_err(|e| CliError::Other(format!("encoding the trace: {e}")))?;
            write(path, value)?;
        }
        if let Some(path) = &self.chrome_trace {
            write(path, trace.to_chrome())?;
        }
        let totals = trace.totals();
        eprintln!(
            "trace: {} jobs, {} disk jobs, read {}, shipped {}",
            trace.jobs.len(),
            totals.disk_jobs,
            human_bytes(totals.bytes_read),
            human_bytes(totals.bytes_shipped_host)
        );
        Ok(())
    }
}

/// `adisk tpch` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum TpchCommand {
    /// Run TPC-H query N (standard text, default substitution parameters).
    Query {
        /// Query number, 1–22.
        n: u32,
        /// Also compare with the official answer for this scale factor (0.01, 0.1, 1).
        #[arg(long)]
        sf: Option<f64>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ResultFormat::Table)]
        format: ResultFormat,
        /// Print EXPLAIN ANALYZE instead of the rows.
        #[arg(long)]
        analyze: bool,
        #[command(flatten)]
        engine: EngineArgs,
        /// Run it on a running service (at its own offload level).
        #[command(flatten)]
        remote: ConnectArgs,
    },
    /// Run all 22 queries and compare with the official answers; one line per query, then
    /// `N passed, N failed`.
    Check {
        /// Scale factor the cluster holds: official answers exist for 0.01, 0.1 and 1; at
        /// others (10) DuckDB on the same files is the oracle.
        #[arg(long, default_value_t = 0.01)]
        sf: f64,
        /// Offload levels, comma-separated, or `all`.
        #[arg(long, default_value = "auto")]
        offload: String,
        /// Bloom filter size, KiB.
        #[arg(long, default_value_t = 1024)]
        bloom_kib: u64,
        /// Only these queries (comma-separated numbers).
        #[arg(long, value_delimiter = ',')]
        queries: Vec<u32>,
        /// At `disks` and `auto`: the disk that does the host's combining work.
        #[arg(long)]
        central_unit: Option<u32>,
        /// At `disks`: sort-merge joins and no broadcast build sides (see `adisk sql`).
        #[arg(long)]
        spill_joins: bool,
        /// At `disks`: run each stage as memik's bundles (none, paper, excessive; see `adisk sql`).
        #[arg(long)]
        bundling: Option<String>,
        /// Run the queries on a running service (at its own offload level).
        #[command(flatten)]
        remote: ConnectArgs,
    },
}

async fn engine(dir: &Path, opts: SqlOptions) -> Result<SqlEngine, CliError> {
    let cluster = Arc::new(crate::common::connect(dir).await?);
    Ok(SqlEngine::new(cluster, opts).await?)
}

/// How a query's rows are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ResultFormat {
    /// A table for people.
    Table,
    /// CSV with a header line.
    Csv,
    /// One JSON array of row objects.
    Json,
    /// An Arrow IPC stream.
    Arrow,
}

/// How EXPLAIN prints a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainFormat {
    /// The annotated plan for people.
    Text,
    /// Operators, stages and statistics as JSON.
    Json,
}

/// Prints result batches in `format`.
pub fn print_batches(
    batches: &[RecordBatch],
    schema: &arrow::datatypes::SchemaRef,
    format: ResultFormat,
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| CliError::Other(format!("writing the result: {e}"));
    let arrow_err =
        |e: arrow::error::ArrowError| CliError::Other(format!("formatting the result: {e}"));
    match format {
        ResultFormat::Table => {
            let text = arrow::util::pretty::pretty_format_batches(batches).map_err(arrow_err)?;
            writeln!(out, "{text}").map_err(io)?;
        }
        ResultFormat::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            if batches.is_empty() {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                drop(w);
                writeln!(std::io::stdout(), "{}", names.join(",")).map_err(io)?;
                return Ok(());
            }
            for b in batches {
                w.write(b).map_err(arrow_err)?;
            }
        }
        ResultFormat::Json => {
            let mut w = arrow::json::ArrayWriter::new(&mut out);
            for b in batches {
                w.write(b).map_err(arrow_err)?;
            }
            w.finish().map_err(arrow_err)?;
            writeln!(out).map_err(io)?;
        }
        ResultFormat::Arrow => {
            let mut w =
                arrow::ipc::writer::StreamWriter::try_new(&mut out, schema).map_err(arrow_err)?;
            for b in batches {
                w.write(b).map_err(arrow_err)?;
            }
            w.finish().map_err(arrow_err)?;
        }
    }
    Ok(())
}

/// One line on what a query moved.
pub fn moved(out: &QueryOutput) -> String {
    let (read, scanned, shipped) = report::totals(out);
    let jobs = out.scans.len();
    format!(
        "{} rows · {:.1} ms · {jobs} disk jobs · read {} · scanned {} · shipped {}",
        out.rows(),
        out.wall.as_secs_f64() * 1e3,
        human_bytes(read),
        human_bytes(scanned),
        human_bytes(shipped)
    )
}

pub async fn sql(dir: &Path, a: SqlArgs) -> Result<(), CliError> {
    let mut runner = Runner::new(dir, &a).await?;
    let text = match (&a.query, &a.file) {
        (Some(q), _) => Some(q.clone()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| CliError::Other(format!("reading {}: {e}", f.display())))?,
        ),
        (None, None) => None,
    };
    if let Some(q) = text {
        return runner.run(&q, a.format, a.stats, &a.trace).await;
    }
    // Prompt: statements end with `;`, `\q` or end of input quits. Errors do not end it.
    let stdin = std::io::stdin();
    let mut buf = String::new();
    let prompt = |cont: bool| {
        eprint!("{}", if cont { "   ...> " } else { "adisk> " });
        let _ = std::io::stderr().flush();
    };
    prompt(false);
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| CliError::Other(format!("reading standard input: {e}")))?;
        if line.trim() == "\\q" {
            break;
        }
        buf.push_str(&line);
        buf.push('\n');
        if line.trim_end().ends_with(';') {
            let q = std::mem::take(&mut buf);
            if let Err(e) = runner.run(&q, a.format, true, &a.trace).await {
                eprintln!("error: {e}");
            }
        }
        prompt(!buf.trim().is_empty());
    }
    eprintln!();
    Ok(())
}

pub async fn explain(dir: &Path, a: ExplainArgs) -> Result<(), CliError> {
    let (analyze, query) = match a.words.as_slice() {
        [q] => (false, q.clone()),
        [w, q] if w.eq_ignore_ascii_case("analyze") => (true, q.clone()),
        _ => {
            return Err(CliError::Other(
                "usage: adisk explain [analyze] \"QUERY\"".into(),
            ));
        }
    };
    let json = a.format == ExplainFormat::Json;
    a.trace
        .local_only(!analyze, "only with EXPLAIN ANALYZE (the query must run)")?;
    if let Some(mut client) = a.remote.client(dir).await? {
        a.trace.local_only(true, "not with --connect")?;
        if json || a.engine.bundling.is_some() {
            return Err(CliError::Other(
                "--connect: the service's EXPLAIN is text (no --format json, no --bundling)".into(),
            ));
        }
        let verb = if analyze {
            "EXPLAIN ANALYZE"
        } else {
            "EXPLAIN"
        };
        let (_, batches) = remote_query(&mut client, &format!("{verb} {query}")).await?;
        print_plan_rows(&batches);
        return Ok(());
    }
    let eng = engine(dir, a.engine.options(a.engine.offload()?)).await?;
    let bundled = match a.engine.bundling()? {
        Some(b) => Some(bundles(dir, &a, &query, b).await?),
        None => None,
    };
    let mut v = match (analyze, json) {
        (true, false) => {
            let (text, out) = eng.explain_analyze(&query).await?;
            print!("{text}");
            a.trace.write(&eng, &out, &query).await?;
            None
        }
        (true, true) => {
            let out = eng.query_analyzed(&query).await?;
            a.trace.write(&eng, &out, &query).await?;
            Some(report::explain_analyze_json(&out, eng.settings()))
        }
        (false, false) => {
            print!("{}", eng.explain(&query).await?);
            None
        }
        (false, true) => {
            let (plan, choice) = eng.plan_with_choice(&query).await?;
            let mut v = report::explain_json(&plan, eng.settings());
            v["choice"] = choice.into();
            Some(v)
        }
    };
    match (&mut v, bundled) {
        (Some(v), Some((_, j))) => v["bundles"] = j,
        (None, Some((text, _))) => print!("{text}"),
        _ => {}
    }
    if let Some(v) = v {
        println!("{v}");
    }
    Ok(())
}

/// memik's bundles of the query's plan (the conventional plan: DataFusion's operators before
/// any offload), with their count, size and distinct shapes; as text and as JSON.
async fn bundles(
    dir: &Path,
    a: &ExplainArgs,
    query: &str,
    relation: adisk_host::sql::bundling::Bundling,
) -> Result<(String, serde_json::Value), CliError> {
    let plain = engine(dir, a.engine.options(Offload::None)).await?;
    let r = adisk_host::sql::bundling::report(&plain.plan(query).await?, relation);
    let json = serde_json::json!({
        "relation": format!("{relation:?}").to_lowercase(),
        "count": r.count(),
        "operations_per_bundle": r.average_ops(),
        "distinct": r.distinct().len(),
        "bundles": r.lines(),
    });
    let mut text = format!(
        "\noperation bundles ({:?} relation, memik Algorithm 1): {} bundles, {:.2} operations per bundle, {} distinct\n",
        relation,
        r.count(),
        r.average_ops(),
        r.distinct().len()
    );
    for line in r.lines() {
        text += &format!("  {line}\n");
    }
    Ok((text, json))
}

/// Offload levels named by a comma-separated list or `all`.
pub fn levels(spec: &str) -> Result<Vec<Offload>, CliError> {
    Ok(crate::slt::levels(spec)?)
}

async fn check_sf(eng_dir: &Path, sf: f64) -> Result<(), CliError> {
    let cluster = crate::common::connect(eng_dir).await?;
    let catalog = cluster.catalog().await?;
    let rows = catalog.tables.get("orders").map(|t| t.rows()).unwrap_or(0);
    if rows != tpch::orders_rows(sf) {
        return Err(CliError::Other(format!(
            "the cluster's `orders` has {rows} rows, TPC-H SF {sf} has {} (load it with `adisk load tpch --sf {sf}`)",
            tpch::orders_rows(sf)
        )));
    }
    Ok(())
}

pub async fn tpch_cmd(dir: &Path, cmd: TpchCommand) -> Result<(), CliError> {
    match cmd {
        TpchCommand::Query {
            n,
            sf,
            format,
            analyze,
            engine: e,
            remote,
        } => {
            let text = tpch::query(n)?;
            if let Some(mut client) = remote.client(dir).await? {
                return tpch_query_remote(dir, &mut client, n, sf, format, analyze).await;
            }
            let eng = engine(dir, e.options(e.offload()?)).await?;
            let out = if analyze {
                let (report, out) = eng.explain_analyze(text).await?;
                print!("{report}");
                out
            } else {
                let out = eng.query(text).await?;
                print_batches(&out.batches, &out.schema, format)?;
                eprintln!("{}", moved(&out));
                out
            };
            if let Some(sf) = sf {
                check_official(dir, n, sf, &out).await?;
            }
            Ok(())
        }
        check @ TpchCommand::Check { .. } => tpch_check(dir, check).await,
    }
}

/// The official answer of TPC-H query `n` at `sf` checked against `out` (columns of
/// generator text excepted; queries whose answer depends on that text told to use `check`).
async fn check_official(dir: &Path, n: u32, sf: f64, out: &QueryOutput) -> Result<(), CliError> {
    check_sf(dir, sf).await?;
    let answers = tpch::official_answers(sf)?;
    let answer = answers
        .get(&n)
        .ok_or_else(|| CliError::Other(format!("no official answer for Q{n} at SF {sf}")))?;
    if tpch::TEXT_DEPENDENT_QUERIES.contains(&n) {
        eprintln!(
            "Q{n:02}'s official answer depends on generator text; use `adisk tpch check` (DuckDB on the same files)"
        );
    } else {
        match oracle::compare(out, answer, tpch::generator_text_column) {
            Ok(()) => eprintln!(
                "Q{n:02} matches the official answer for SF {sf} (address/comment columns not compared)"
            ),
            Err(d) => {
                return Err(CliError::Other(format!(
                    "Q{n:02} differs from the official answer for SF {sf}: {d}"
                )));
            }
        }
    }
    Ok(())
}

/// `adisk tpch check`: the queries at each level (or through the service) against DuckDB's
/// official answers and DuckDB on the same files; one line per query and level.
async fn tpch_check(dir: &Path, check: TpchCommand) -> Result<(), CliError> {
    let TpchCommand::Check {
        sf,
        offload,
        bloom_kib,
        queries,
        central_unit,
        spill_joins,
        bundling,
        remote,
    } = check
    else {
        unreachable!("tpch_check is called for `tpch check`")
    };
    let bundling = bundling
        .as_deref()
        .map(str::parse::<adisk_host::sql::bundling::Bundling>)
        .transpose()?;
    check_sf(dir, sf).await?;
    let answers = match tpch::has_official_answers(sf) {
        true => tpch::official_answers(sf)?,
        false => Default::default(),
    };
    let queries: Vec<u32> = if queries.is_empty() {
        (1..=22).collect()
    } else {
        queries
    };
    let cluster = crate::common::connect(dir).await?;
    let catalog = cluster.catalog().await?;
    let texts = queries
        .iter()
        .map(|n| tpch::query(*n))
        .collect::<Result<Vec<_>, _>>()?;
    let same_data = oracle::duckdb_same_data(&cluster, &catalog, &texts)?;
    if answers.is_empty() {
        println!(
            "oracle: DuckDB 1.5.5 on the same Parquet files (every column); DuckDB has no official answers for SF {sf}"
        );
    } else {
        println!(
            "oracles: DuckDB's official answers for SF {sf} (address/comment columns and Q13 excepted: tpchgen draws that text differently from dbgen) and DuckDB 1.5.5 on the same Parquet files (every column)"
        );
    }
    let (mut passed, mut failed) = (0, 0);
    if let Some(mut client) = remote.client(dir).await? {
        for (i, &n) in queries.iter().enumerate() {
            let verdict = match remote_query(&mut client, texts[i]).await {
                Ok((schema, batches)) => {
                    check_remote(n, &schema, &batches, &answers, &same_data[i])
                        .map(|rows| format!("{rows} rows"))
                }
                Err(e) => Err(e.to_string()),
            };
            tally(
                n,
                "through the service:",
                verdict,
                (&mut passed, &mut failed),
            );
        }
    }
    let local_levels = match remote.connect {
        Some(_) => vec![],
        None => levels(&offload)?,
    };
    for level in local_levels {
        let eng = engine(
            dir,
            SqlOptions {
                offload: level,
                bloom_kib,
                // The central unit applies where the host would combine.
                central_unit: central_unit
                    .filter(|_| matches!(level, Offload::Disks | Offload::Auto)),
                spill_joins,
                bundling,
                ..Default::default()
            },
        )
        .await?;
        for (i, &n) in queries.iter().enumerate() {
            let verdict = match eng.query(texts[i]).await {
                Ok(out) => local_verdict(n, &out, &answers, &same_data[i]),
                Err(e) => Err(e.to_string()),
            };
            let at = format!("offload={level:<9}");
            tally(n, &at, verdict, (&mut passed, &mut failed));
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        return Err(CliError::Other(format!("{failed} TPC-H checks failed")));
    }
    Ok(())
}

/// One query's verdict at a level: against its official answer (unless it depends on
/// generator text) and against DuckDB on the same files; what it moved if both agree.
fn local_verdict(
    n: u32,
    out: &QueryOutput,
    answers: &std::collections::BTreeMap<u32, String>,
    same: &Result<String, String>,
) -> Result<String, String> {
    let official = if tpch::TEXT_DEPENDENT_QUERIES.contains(&n) {
        Ok(())
    } else {
        match answers.get(&n) {
            Some(a) => oracle::compare(out, a, tpch::generator_text_column)
                .map_err(|d| format!("official answer: {d}")),
            // A scale factor without official answers (SF 10): DuckDB on the same files only.
            None if answers.is_empty() => Ok(()),
            None => Err(format!("no official answer for Q{n}")),
        }
    };
    let same = match same {
        Ok(a) => {
            oracle::compare(out, a, |_| false).map_err(|d| format!("DuckDB on the same files: {d}"))
        }
        Err(e) => Err(format!("DuckDB on the same files failed: {e}")),
    };
    official.and(same).map(|()| moved(out))
}

/// Prints the service's EXPLAIN result: one line of the report per row of its `plan` column.
fn print_plan_rows(batches: &[arrow::array::RecordBatch]) {
    for b in batches {
        if let Some(lines) = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
        {
            for line in lines.iter().flatten() {
                println!("{line}");
            }
        }
    }
}

/// `tpch query N --connect`: the rows (or EXPLAIN ANALYZE) through the service, and with
/// `sf` the check against the official answer.
async fn tpch_query_remote(
    dir: &Path,
    client: &mut adisk_server::client::Client,
    n: u32,
    sf: Option<f64>,
    format: ResultFormat,
    analyze: bool,
) -> Result<(), CliError> {
    let text = tpch::query(n)?;
    if analyze {
        let (_, batches) = remote_query(client, &format!("EXPLAIN ANALYZE {text}")).await?;
        print_plan_rows(&batches);
        return Ok(());
    }
    let (schema, batches) = remote_query(client, text).await?;
    print_batches(&batches, &schema, format)?;
    let Some(sf) = sf else {
        return Ok(());
    };
    check_sf(dir, sf).await?;
    let answers = tpch::official_answers(sf)?;
    if tpch::TEXT_DEPENDENT_QUERIES.contains(&n) {
        eprintln!(
            "Q{n:02}'s official answer depends on generator text; use `adisk tpch check` (DuckDB on the same files)"
        );
        return Ok(());
    }
    let answer = answers
        .get(&n)
        .ok_or_else(|| CliError::Other(format!("no official answer for Q{n} at SF {sf}")))?;
    oracle::compare_batches(
        schema.fields().len(),
        &batches,
        answer,
        tpch::generator_text_column,
    )
    .map_err(|d| {
        CliError::Other(format!(
            "Q{n:02} differs from the official answer for SF {sf}: {d}"
        ))
    })?;
    eprintln!(
        "Q{n:02} matches the official answer for SF {sf} (address/comment columns not compared)"
    );
    Ok(())
}

/// Prints one check's line and counts it.
fn tally(
    n: u32,
    at: &str,
    verdict: Result<String, String>,
    (passed, failed): (&mut u32, &mut u32),
) {
    match verdict {
        Ok(m) => {
            *passed += 1;
            println!("pass  Q{n:02}  {at} {m}");
        }
        Err(d) => {
            *failed += 1;
            println!("FAIL  Q{n:02}  {at} {d}");
        }
    }
}

/// A TPC-H answer read through the service against the official answer and DuckDB on the
/// same files: its row count, or what differs.
fn check_remote(
    n: u32,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[arrow::array::RecordBatch],
    answers: &std::collections::BTreeMap<u32, String>,
    same_data: &Result<String, String>,
) -> Result<usize, String> {
    let columns = schema.fields().len();
    if !tpch::TEXT_DEPENDENT_QUERIES.contains(&n) && !answers.is_empty() {
        let a = answers
            .get(&n)
            .ok_or_else(|| format!("no official answer for Q{n}"))?;
        oracle::compare_batches(columns, batches, a, tpch::generator_text_column)
            .map_err(|d| format!("official answer: {d}"))?;
    }
    match same_data {
        Ok(a) => oracle::compare_batches(columns, batches, a, |_| false)
            .map_err(|d| format!("DuckDB on the same files: {d}"))?,
        Err(e) => return Err(format!("DuckDB on the same files failed: {e}")),
    }
    Ok(batches.iter().map(|b| b.num_rows()).sum())
}
