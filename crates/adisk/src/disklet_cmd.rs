//! `adisk disklet …` (user disklets in WebAssembly), `adisk load images` and
//! `adisk bench disklet`.
use crate::common::CliError;
use adisk_host::cluster::Cluster;
use adisk_host::disklet::{self, WasmRequest};
use std::path::{Path, PathBuf};

/// `adisk disklet` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum DiskletCommand {
    /// Validate, compile and store a WebAssembly disklet on every disk (kept across restarts).
    Install {
        /// The module (.wasm, or .wat text).
        file: PathBuf,
        /// Name to install it under.
        #[arg(long)]
        name: String,
        /// Scratch KiB; the memory grant is scratch + the input area (2 stream buffers + 64 KiB)
        /// and the module's declared memory maximum must fit in it.
        #[arg(long, default_value_t = 2048)]
        scratch_kib: u64,
        /// Install through a running Flight SQL service, as its user (who needs the
        /// `--allow-disklet-install` privilege), instead of with the cluster's key.
        #[command(flatten)]
        remote: crate::sql_cmd::ConnectArgs,
    },
    /// The installed disklets of every disk.
    List {
        /// Output format.
        #[arg(long, value_enum, default_value_t = crate::output::Format::Table)]
        format: crate::output::Format,
    },
    /// Run an installed disklet on a table or on files, on every disk that holds them.
    Run(RunArgs),
    /// Remove a disklet from every disk.
    Remove {
        /// Name.
        name: String,
    },
}

/// Arguments of `adisk disklet run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Installed name.
    name: String,
    /// Table input, `TABLE` or `TABLE:COL,COL…`; repeat it for a disklet with several inputs
    /// (ABI v2: the i-th `--table` is input i; the tables must be on the same disks).
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    table: Vec<String>,
    /// Columns to hand the disklet from every table given without its own (default: all).
    #[arg(long, value_delimiter = ',')]
    columns: Vec<String>,
    /// File input: a file or directory under each disk's files/ (one job per file).
    #[arg(long)]
    file: Option<String>,
    /// Parameter KEY=VALUE for the disklet's init, repeatable.
    #[arg(long = "param", value_parser = crate::common::parse_param)]
    params: Vec<(String, String)>,
    /// CPU budget per job, fuel units (≈ WebAssembly instructions; default: the disks').
    #[arg(long)]
    fuel: Option<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = crate::output::Format::Table)]
    format: crate::output::Format,
    /// Rows to print in table format.
    #[arg(long, default_value_t = 20)]
    max_rows: usize,
    /// File input: write each file's raw output to DIR/<path>.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn read_module(file: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(file).map_err(|e| CliError::Other(format!("cannot read {}: {e}", file.display())))
}

fn print_installed(infos: Vec<(u32, adisk_core::protocol::DiskletInfo)>) {
    println!(
        "{:<5} {:<16} {:<18} {:>10} {:>12} {:>12} {:>11}",
        "disk", "name", "sha256", "bytes", "memory_max", "grant", "compile_ms"
    );
    for (d, i) in infos {
        println!(
            "{d:<5} {:<16} {:<18} {:>10} {:>12} {:>12} {:>11.2}",
            i.name,
            &i.sha256[..16.min(i.sha256.len())],
            i.size_bytes,
            i.memory_max_bytes,
            i.grant_bytes,
            i.compile_ns as f64 / 1e6
        );
    }
}

/// `disklet install --connect`: through the service, as its user.
async fn install_remote(dir: &Path, cmd: DiskletCommand) -> Result<(), CliError> {
    let DiskletCommand::Install {
        file,
        name,
        scratch_kib,
        remote,
    } = cmd
    else {
        return Err(CliError::Other(
            "only `install` goes through a service".into(),
        ));
    };
    let module = read_module(&file)?;
    let mut client = remote
        .client(dir)
        .await?
        .ok_or_else(|| CliError::Other("--connect is missing".into()))?;
    let infos = client
        .install_disklet(&name, module, scratch_kib)
        .await
        .map_err(|e| CliError::Other(e.to_string()))?;
    print_installed(infos);
    Ok(())
}

pub async fn run(dir: &Path, cmd: DiskletCommand) -> Result<(), CliError> {
    if let DiskletCommand::Install { remote, .. } = &cmd
        && remote.connect.is_some()
    {
        return install_remote(dir, cmd).await;
    }
    let cluster = crate::common::connect(dir).await?;
    match cmd {
        DiskletCommand::Install {
            file,
            name,
            scratch_kib,
            ..
        } => {
            let module = read_module(&file)?;
            let infos = disklet::install(&cluster, &name, module, scratch_kib).await?;
            print_installed(infos);
            Ok(())
        }
        DiskletCommand::List { format } => {
            let all = disklet::list(&cluster).await?;
            if format == crate::output::Format::Json {
                println!("{}", serde_json::to_string_pretty(&all).expect("json"));
                return Ok(());
            }
            println!(
                "{:<5} {:<16} {:<18} {:<11} {:>10} {:>12} {:>9} {:>11}",
                "disk", "name", "sha256", "abi in>out", "bytes", "grant", "compiled", "compile_ms"
            );
            for (d, infos) in all {
                for i in infos {
                    let shape = format!("v{} {}>{}", i.abi, i.inputs, i.outputs);
                    println!(
                        "{d:<5} {:<16} {:<18} {shape:<11} {:>10} {:>12} {:>9} {:>11.2}",
                        i.name,
                        &i.sha256[..16],
                        i.size_bytes,
                        i.grant_bytes,
                        i.compiled,
                        i.compile_ns as f64 / 1e6
                    );
                }
            }
            Ok(())
        }
        DiskletCommand::Remove { name } => {
            if disklet::remove(&cluster, &name).await? {
                println!("removed `{name}`");
                Ok(())
            } else {
                Err(CliError::Other(format!("no disklet `{name}` is installed")))
            }
        }
        DiskletCommand::Run(a) => run_disklet(&cluster, a).await,
    }
}

async fn run_disklet(cluster: &Cluster, a: RunArgs) -> Result<(), CliError> {
    let req = WasmRequest {
        name: a.name.clone(),
        params: a.params.into_iter().collect(),
        fuel: a.fuel,
        scratch_kib: 0,
    };
    if !a.table.is_empty() {
        let tables = table_inputs(&a.table, &a.columns);
        let out = disklet::run_tables(cluster, &req, &tables).await?;
        return crate::output::print_job(&out, a.format, a.max_rows);
    }
    let prefix = a.file.unwrap_or_default();
    let out = disklet::run_files(cluster, &req, &prefix).await?;
    let mut rows = Vec::new();
    for (d, path, batches) in &out.files {
        let mut bytes = Vec::new();
        for b in batches {
            if let Some(col) = b
                .column_by_name("bytes")
                .and_then(|c| c.as_any().downcast_ref::<arrow::array::BinaryArray>())
            {
                for v in col.iter().flatten() {
                    bytes.extend_from_slice(v);
                }
            }
        }
        if let Some(dir) = &a.out {
            let target = dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    CliError::Other(format!("cannot create {}: {e}", parent.display()))
                })?;
            }
            std::fs::write(&target, &bytes)
                .map_err(|e| CliError::Other(format!("cannot write {}: {e}", target.display())))?;
        }
        rows.push(serde_json::json!({ "disk": d, "file": path, "output_bytes": bytes.len(), "output_rows": batches.iter().map(|b| b.num_rows()).sum::<usize>() }));
    }
    if a.format == crate::output::Format::Json {
        let doc =
            serde_json::json!({ "files": rows, "stats": out.stats, "totals": out.stats.totals() });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return Ok(());
    }
    println!("{:<5} {:<32} {:>12}", "disk", "file", "output_bytes");
    for r in rows.iter().take(a.max_rows) {
        println!(
            "{:<5} {:<32} {:>12}",
            r["disk"],
            r["file"].as_str().unwrap_or(""),
            r["output_bytes"]
        );
    }
    println!("({} files)\n\n{}", rows.len(), out.stats.description);
    print!("{}", out.stats.render_table());
    Ok(())
}

/// `--table` arguments as (table, columns): `TABLE:COL,COL…`, or `TABLE` with `--columns`.
fn table_inputs(tables: &[String], columns: &[String]) -> Vec<(String, Vec<String>)> {
    tables
        .iter()
        .map(|t| match t.split_once(':') {
            Some((table, cols)) => (
                table.to_string(),
                cols.split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(String::from)
                    .collect(),
            ),
            None => (t.clone(), columns.to_vec()),
        })
        .collect()
}

pub async fn load_images(dir: &Path, count: u32, side: u32) -> Result<(), CliError> {
    let cluster = crate::common::connect(dir).await?;
    let started = std::time::Instant::now();
    disklet::load_images(&cluster, count, side).await?;
    eprintln!(
        "generated {count} images of {side}x{side} pixels on {} disks in {:.1} s",
        cluster.disk_count(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

const Q6_WHERE: &str = "l_shipdate >= 1994-01-01; l_shipdate < 1995-01-01; l_discount >= 0.05; l_discount <= 0.07; l_quantity < 24";
const Q6_PREDICATE: &str = "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Builds an SDK example with sdk/c/build.sh (clang + lld).
pub fn build_example(sdk: &Path, example: &str, out: &Path) -> Result<(), CliError> {
    let status = std::process::Command::new(sdk.join("c/build.sh"))
        .arg(sdk.join(format!("c/examples/{example}.c")))
        .arg(out)
        .status()
        .map_err(|e| {
            CliError::Other(format!(
                "cannot run {}: {e}",
                sdk.join("c/build.sh").display()
            ))
        })?;
    if !status.success() {
        return Err(CliError::Other(format!(
            "building {example}.c failed (apt-get install clang lld)"
        )));
    }
    Ok(())
}

/// `adisk bench disklet`: the WASM count_if example against the built-in native disklets on
/// `lineitem` on one disk, Q6's predicate: count (wasm count vs native select+aggregate count(*))
/// and select (wasm row positions vs native select of l_orderkey). Ratio = native time / wasm
/// time = wasm throughput / native throughput (median of `repeats`, slowest disk's job time).
pub async fn bench(dir: &Path, sf: f64, repeats: usize, sdk: &Path) -> Result<(), CliError> {
    let cdir = dir.join("bench-disklet");
    if cdir.join("cluster.toml").exists() {
        let _ = crate::local::down(&cdir).await;
    }
    let args = crate::local::UpArgs {
        ..crate::local::UpArgs::local(1)
    };
    crate::local::up(&cdir, &args).await?;
    let result = async {
        let cluster = std::sync::Arc::new(crate::common::connect(&cdir).await?);
        let rows = cluster.catalog().await?.tables.get("lineitem").map(|t| t.rows()).unwrap_or(0);
        if rows < adisk_storage::tpch::approx_rows("lineitem", sf) * 99 / 100 {
            crate::output::load_tpch(&cluster, &adisk_host::load::TpchLoad { sf, partitions_per_disk: 1, row_group_rows: adisk_storage::writer::DEFAULT_ROW_GROUP_ROWS, tables: vec!["lineitem".into()], replicas: 1, disks: vec![] }).await?;
        }
        let wasm = cdir.join("count_if.wasm");
        build_example(sdk, "count_if", &wasm)?;
        let module = std::fs::read(&wasm).map_err(|e| CliError::Other(e.to_string()))?;
        let installed = disklet::install(&cluster, "count_if", module, 2048).await?;
        let compile_ms = installed.iter().map(|(_, i)| i.compile_ns).max().unwrap_or(0) as f64 / 1e6;
        let columns: Vec<String> = ["l_shipdate", "l_discount", "l_quantity"].iter().map(|s| s.to_string()).collect();
        let disk_s = |stats: &adisk_core::stats::JobStats| stats.totals().wall_ns_max as f64 / 1e9;
        println!("adisk bench disklet: TPC-H SF {sf} lineitem on 1 disk, Q6 predicate, median of {repeats}; count_if.wasm compiled once at install in {compile_ms:.1} ms");
        println!("{:<8} {:>12} {:>12} {:>10} {:>10} {:>16} {:>10}", "query", "native_ms", "wasm_ms", "rows", "native", "wasm_vs_native", "inst_ms");
        for mode in ["count", "select"] {
            let native_req = if mode == "count" {
                adisk_host::JobRequest { disklet: "aggregate".into(), table: "lineitem".into(), params: [("predicate".to_string(), Q6_PREDICATE.to_string()), ("aggs".to_string(), "count(*) AS n".to_string())].into_iter().collect(), ..Default::default() }
            } else {
                adisk_host::JobRequest { disklet: "select".into(), table: "lineitem".into(), params: [("predicate".to_string(), Q6_PREDICATE.to_string()), ("project".to_string(), "l_orderkey".to_string())].into_iter().collect(), ..Default::default() }
            };
            let wasm_req = WasmRequest { name: "count_if".into(), params: [("where".to_string(), Q6_WHERE.to_string()), ("mode".to_string(), mode.to_string())].into_iter().collect(), fuel: None, scratch_kib: 0 };
            adisk_host::run::run(&cluster, &native_req).await?; // warm-up
            disklet::run_table(&cluster, &wasm_req, "lineitem", &columns).await?;
            let (mut native, mut wasm, mut inst) = (Vec::new(), Vec::new(), Vec::new());
            let mut result_rows = (0u64, 0u64);
            for _ in 0..repeats {
                let n = adisk_host::run::run(&cluster, &native_req).await?;
                native.push(disk_s(&n.stats));
                let w = disklet::run_table(&cluster, &wasm_req, "lineitem", &columns).await?;
                wasm.push(disk_s(&w.stats));
                inst.push(w.stats.disks.iter().flat_map(|d| &d.stages).map(|s| s.instantiate_ns).max().unwrap_or(0) as f64 / 1e6);
                result_rows = (n.rows() as u64, w.rows() as u64);
            }
            let (n, w) = (median(native), median(wasm));
            println!("{mode:<8} {:>12.1} {:>12.1} {:>10} {:>10} {:>15.2}x {:>10.2}", n * 1e3, w * 1e3, result_rows.1, result_rows.0, n / w, median(inst));
        }
        println!("native_ms/wasm_ms: slowest disk's job wall time; wasm_vs_native: wasm throughput / native throughput (target >= 0.33x);");
        println!("rows: result rows (wasm, native); inst_ms: cached-module instantiate + init per job (compile happened once, at install)");
        Ok::<(), CliError>(())
    }
    .await;
    crate::local::down(&cdir).await?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_tables_become_inputs_in_order() {
        let cols = vec!["k".to_string()];
        let tables = table_inputs(&["a".into(), "b:x, y".into()], &cols);
        assert_eq!(
            tables,
            vec![
                ("a".to_string(), cols.clone()),
                ("b".to_string(), vec!["x".to_string(), "y".to_string()])
            ]
        );
    }
}
