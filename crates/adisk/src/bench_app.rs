//! `adisk bench app NAME|all`: each application at a size in both modes, with the host link
//! throttled to 1/8 of the disks' aggregate read rate (the papers' I/O-bound regime) and
//! unthrottled, side by side in one run: medians of repeats, bytes over each link, and the
//! active ÷ conventional speed-up.
use crate::common::CliError;
use crate::local::{UpArgs, down, up};
use adisk_apps::Mode;
use adisk_apps::report::Report;
use adisk_core::config::ClusterConfig;
use adisk_host::Cluster;
use clap::Args;
use std::path::Path;

/// `adisk bench app`.
#[derive(Args, Debug)]
pub struct AppBenchArgs {
    /// Application (sort, join, conv, earth, cluster, datacube, dmine, fft) or `all`.
    pub app: String,
    /// Disks.
    #[arg(long, default_value_t = 4)]
    pub disks: u32,
    /// Input size, MB (10⁶ bytes).
    #[arg(long, default_value_t = 1024)]
    pub size_mb: u64,
    /// Repeats per measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Each disk's memory, MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_mib: u64,
    /// Each disk's read rate, Mbit/s; the throttled host link gets disks × this ÷ 8.
    #[arg(long, default_value_t = 800)]
    pub disk_read_mbps: u64,
}

/// The applications this benchmark runs.
pub(crate) const APPS: &[&str] = &[
    "sort", "join", "conv", "earth", "cluster", "datacube", "dmine", "fft",
];

/// One measurement: medians of wall time and bytes over the links.
struct Sample {
    seconds: f64,
    to_host: u64,
    from_host: u64,
    between: u64,
    bytes_read: u64,
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub async fn run(dir: &Path, a: AppBenchArgs) -> Result<(), CliError> {
    let apps: Vec<&str> = if a.app == "all" {
        APPS.to_vec()
    } else if APPS.contains(&a.app.as_str()) {
        vec![a.app.as_str()]
    } else {
        return Err(CliError::Other(format!(
            "unknown application `{}` (known: {}, all)",
            a.app,
            APPS.join(", ")
        )));
    };
    let cdir = dir.join(format!("bench-app-{}", a.disks));
    if cdir.join("cluster.toml").exists() {
        let _ = down(&cdir).await;
    }
    let args = UpArgs {
        memory_mib: a.memory_mib,
        disk_read_mbps: a.disk_read_mbps,
        ..UpArgs::local(a.disks)
    };
    let config = up(&cdir, &args).await?;
    let link = u64::from(a.disks) * a.disk_read_mbps / 8;
    println!(
        "adisk bench app: {} disks of {} MiB reading at {} Mbit/s each; host link {} Mbit/s (1/8 of the disks' aggregate) or unthrottled; {} MB inputs; median of {}",
        a.disks,
        a.memory_mib,
        a.disk_read_mbps,
        link,
        a.size_mb,
        a.repeats.max(1)
    );
    println!(
        "{:<8} {:>11} {:>9} {:>9} {:>8} {:>12} {:>12} {:>12} {:>12}",
        "app",
        "host link",
        "active_s",
        "conv_s",
        "speed-up",
        "act→host MB",
        "conv↔host MB",
        "disk↔disk MB",
        "read MB"
    );
    let result = async {
        for app in apps {
            bench_one(&cdir, &config, app, &a, link).await?;
        }
        Ok(())
    }
    .await;
    down(&cdir).await?;
    result
}

async fn bench_one(
    cdir: &Path,
    config: &ClusterConfig,
    app: &str,
    a: &AppBenchArgs,
    link: u64,
) -> Result<(), CliError> {
    let loader = crate::common::connect(cdir).await?;
    eprintln!("{app}: loading {} MB …", a.size_mb);
    load(&loader, app, a.size_mb * 1_000_000).await?;
    for mbps in [link, 0] {
        let mut c = config.clone();
        c.cluster.host_link_mbps = mbps;
        let cluster = Cluster::connect(c).await?;
        let mut samples = Vec::new();
        for mode in [Mode::Active, Mode::Conventional] {
            run_app(&cluster, app, mode).await?; // warm-up
            let mut runs = Vec::new();
            for _ in 0..a.repeats.max(1) {
                runs.push(run_app(&cluster, app, mode).await?);
            }
            let pick = |f: &dyn Fn(&Report) -> u64| {
                median(runs.iter().map(|r| f(r) as f64).collect()) as u64
            };
            samples.push(Sample {
                seconds: median(runs.iter().map(|r| r.seconds).collect()),
                to_host: pick(&|r| r.links().0),
                from_host: pick(&|r| r.links().1),
                between: pick(&|r| r.links().2),
                bytes_read: pick(&|r| r.totals().iter().map(|t| t.bytes_read).sum()),
            });
        }
        let (act, conv) = (&samples[0], &samples[1]);
        println!(
            "{:<8} {:>11} {:>9.2} {:>9.2} {:>7.2}x {:>12.1} {:>12.1} {:>12.1} {:>12.1}",
            app,
            if mbps == 0 {
                "unthrottled".to_string()
            } else {
                format!("{mbps} Mbit/s")
            },
            act.seconds,
            conv.seconds,
            conv.seconds / act.seconds.max(1e-9),
            (act.to_host + act.from_host) as f64 / 1e6,
            (conv.to_host + conv.from_host) as f64 / 1e6,
            act.between as f64 / 1e6,
            act.bytes_read as f64 / 1e6,
        );
        if app == "sort" && mbps == 0 {
            println!(
                "         sort (active, unthrottled): {:.1} MB/s per disk of input sorted",
                a.size_mb as f64 / act.seconds / f64::from(a.disks)
            );
        }
    }
    Ok(())
}

fn err(e: adisk_apps::AppError) -> CliError {
    CliError::Other(e.to_string())
}

/// Loads `bytes` of the application's input (replacing what is there).
pub(crate) async fn load(cluster: &Cluster, app: &str, bytes: u64) -> Result<(), CliError> {
    match app {
        "sort" => adisk_apps::sort::load(cluster, "sort", bytes / 100, 1, |_| {})
            .await
            .map(|_| ()),
        "join" => {
            let rows = bytes / 2 / 64;
            let keys = rows.saturating_mul(8).min(u64::from(u32::MAX)) as u32;
            adisk_apps::join::load(cluster, ("join_r", "join_s"), rows, keys, 1, |_| {})
                .await
                .map(|_| ())
        }
        "conv" => {
            let count = (bytes / (512 * 512)) as u32;
            adisk_host::disklet::load_images(cluster, count, 512)
                .await
                .map_err(adisk_apps::AppError::from)
        }
        "earth" => {
            adisk_apps::earth::load(cluster, "earth", (bytes / 14, 60, 1), (2048, 1024), |_| {})
                .await
                .map(|_| ())
        }
        "cluster" => {
            let g = cluster_data(bytes);
            adisk_apps::cluster::load(cluster, "points", g, |_| {})
                .await
                .map(|_| ())
        }
        "datacube" => {
            let g = adisk_apps::datacube::generator::GenParams {
                rows: bytes / 24,
                cardinalities: vec![50, 20, 10, 5],
                zipf: 0.0,
                seed: 1,
            };
            adisk_apps::datacube::load(cluster, "datacube", g, |_| {})
                .await
                .map(|_| ())
        }
        "dmine" => {
            let g = adisk_apps::dmine::generator::GenParams {
                transactions: bytes / 52,
                avg_transaction_len: 10.0,
                avg_pattern_len: 4.0,
                patterns: 2000,
                items: 1000,
                seed: 1,
            };
            adisk_apps::dmine::load(cluster, "dmine", &g, |_| {})
                .await
                .map(|_| ())
        }
        "fft" => {
            let cols = (bytes / 24 / 8192).div_ceil(64).max(1) * 64;
            adisk_apps::fft::load(cluster, "fft", 8192, cols, 1, |_| {})
                .await
                .map(|_| ())
        }
        other => Err(adisk_apps::AppError::UnknownApp(other.into())),
    }
    .map_err(err)
}

fn cluster_data(bytes: u64) -> adisk_apps::cluster::kernel::GenParams {
    adisk_apps::cluster::kernel::GenParams {
        points: bytes / 40,
        dims: 10,
        clusters: 3,
        max_cluster_dims: 5,
        noise: 0.1,
        min_width: 8.0,
        max_width: 15.0,
        seed: 7,
    }
}

/// One run of `app` in `mode` (no oracle checks beyond the applications' own).
pub(crate) async fn run_app(cluster: &Cluster, app: &str, mode: Mode) -> Result<Report, CliError> {
    match app {
        "sort" => {
            let p = adisk_apps::sort::SortParams {
                input: "sort".into(),
                output: "sort_sorted".into(),
                mode,
                run_bytes: None,
                samples_per_disk: 1000,
            };
            adisk_apps::sort::run(cluster, &p).await
        }
        "join" => {
            let p = adisk_apps::join::JoinParams {
                left: "join_r".into(),
                right: "join_s".into(),
                output: "join_out".into(),
                mode,
                run_bytes: None,
            };
            adisk_apps::join::run(cluster, &p).await
        }
        "conv" => {
            let kernel = adisk_apps::conv::kernel::Kernel::boxed(3).map_err(err)?;
            let p = adisk_apps::conv::ConvParams {
                images: "images".into(),
                side: 512,
                kernel,
                output: "conv_out".into(),
                mode,
            };
            adisk_apps::conv::run(cluster, &p).await
        }
        "earth" => {
            let p = adisk_apps::earth::EarthParams {
                table: "earth".into(),
                width: 2048,
                height: 1024,
                window_bytes: None,
                mode,
                check: None,
            };
            adisk_apps::earth::run(cluster, &p).await
        }
        "cluster" => {
            let p = adisk_apps::cluster::ClusterRun {
                table: "points".into(),
                params: Default::default(),
                mode,
                check: None,
            };
            adisk_apps::cluster::run(cluster, &p).await
        }
        "datacube" => {
            let p = adisk_apps::datacube::CubeParams {
                input: "datacube".into(),
                output: "cube".into(),
                mode,
                memory_bytes: None,
                samples: 4096,
            };
            adisk_apps::datacube::run(cluster, &p).await
        }
        "dmine" => {
            let p = adisk_apps::dmine::DmineParams {
                input: "dmine".into(),
                support: 0.01,
                method: adisk_apps::dmine::Method::Eclat,
                mode,
                scratch_kib: None,
                sections: None,
                pair_table: "auto".into(),
                list_itemsets: false,
                oracle: false,
            };
            adisk_apps::dmine::run(cluster, &p).await
        }
        "fft" => {
            let p = adisk_apps::fft::FftParams {
                input: "fft".into(),
                output: "fft_out".into(),
                mode,
                seed: 1,
                cap_bytes: None,
                buffer_kib: None,
                segment_values: 256,
            };
            adisk_apps::fft::run(cluster, &p).await
        }
        other => Err(adisk_apps::AppError::UnknownApp(other.into())),
    }
    .map_err(err)
}
