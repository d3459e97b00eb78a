//! TLS on the cluster's links (`adisk up`'s default): TPC-H at the disks with `direct` exchange
//! (disk to disk over TLS) and `via-host` (the host's relay over TLS) equal to the official
//! answers; a host that speaks plaintext, or that trusts another CA, or that shows a
//! certificate another CA signed, gets no answer from the disks, and says why. The Flight SQL
//! service over TLS: the CLI reaches `adisk up`'s service, a plaintext client and a client
//! trusting another CA are refused with clear errors, a service asking for client certificates
//! (mutual TLS) lets in only a client with one its CA signed, and `--tls off` warns.
mod common;
use common::{fails, ok};

/// Stops the cluster however the test ends.
struct Down<'a>(&'a std::path::Path);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = common::adisk(self.0, &["down"]);
    }
}

#[test]
fn tpch_over_tls_and_strangers_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["up", "--disks", "3", "--tls", "--no-serve"]);
    let _down = Down(dir);
    let toml = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    assert!(toml.contains("[cluster.tls]"), "{toml}");
    ok(dir, &["load", "tpch", "--sf", "0.01"]);
    common::check_tpch(dir, "disks", "direct exchange over TLS");
    let via_host = toml.replace("exchange = \"direct\"", "exchange = \"via-host\"");
    assert_ne!(via_host, toml, "cluster.toml names its exchange");
    std::fs::write(dir.join("cluster.toml"), &via_host).unwrap();
    common::check_tpch(dir, "disks", "via-host exchange over TLS");
    std::fs::write(dir.join("cluster.toml"), &toml).unwrap();
    strangers_refused(dir, &toml);
}

/// Hosts without the cluster's TLS: each gets a clear error, no answer.
fn strangers_refused(dir: &std::path::Path, toml: &str) {
    let query = ["sql", "SELECT count(*) FROM nation"];
    let other = dir.join("other");
    let o = other.to_str().unwrap();
    ok(dir, &["cert", "ca", "--cluster", "other", "--out", o]);
    ok(
        dir,
        &["cert", "issue", "--ca", o, "--name", "host", "--out", o],
    );
    let tls_dir = dir.join("tls");
    let cases = [
        ("plaintext", cut_tls_section(toml)),
        (
            "a host trusting another CA",
            toml.replace(
                &tls_dir.join("ca.pem").display().to_string(),
                &other.join("ca.pem").display().to_string(),
            ),
        ),
        (
            "a host with another CA's certificate",
            toml.replace(
                &tls_dir.join("host.pem").display().to_string(),
                &other.join("host.pem").display().to_string(),
            )
            .replace(
                &tls_dir.join("host.key").display().to_string(),
                &other.join("host.key").display().to_string(),
            ),
        ),
    ];
    for (what, text) in cases {
        assert_ne!(text, toml, "{what}: the case changes cluster.toml");
        let stranger = dir.join("stranger");
        std::fs::create_dir_all(&stranger).unwrap();
        std::fs::write(stranger.join("cluster.toml"), text).unwrap();
        let err = fails(&stranger, &query);
        assert!(err.contains("unreachable"), "{what}: {err}");
    }
    // The cluster itself still answers.
    assert!(ok(dir, &query).contains("25"));
}

/// An `adisk serve` started by a test; killed when dropped.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `adisk serve ARGS` on `dir`; the process and the address it listens on.
fn serve(dir: &std::path::Path, name: &str, args: &[&str]) -> (Serve, String) {
    let port_file = dir.join(format!("{name}.address"));
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(dir)
        .args(["serve", "--metrics-listen", "off", "--port-file"])
        .arg(&port_file)
        .args(args)
        .env_remove("ADISK_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let process = Serve(child);
    common::wait_until(
        "adisk serve to listen",
        std::time::Duration::from_secs(60),
        || std::fs::read_to_string(&port_file).is_ok_and(|a| !a.is_empty()),
    );
    (process, std::fs::read_to_string(&port_file).unwrap())
}

#[test]
fn the_flight_sql_service_speaks_tls_and_checks_client_certificates_when_told() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    ok(dir, &["up", "--disks", "2"]);
    let _down = Down(dir);
    ok(dir, &["load", "tpch", "--sf", "0.01", "--tables", "nation"]);
    let toml = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    assert!(
        toml.contains("tls_ca = "),
        "adisk up's service is TLS:\n{toml}"
    );
    let query = "SELECT count(*) AS n FROM nation";
    let csv = ["--format", "csv", query];
    let through = |url: &str, extra: &[&str]| {
        let mut args = vec!["sql", "--connect", url];
        args.extend(extra);
        args.extend(csv);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run_ok = |args: Vec<String>| ok(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let run_fails =
        |args: Vec<String>| fails(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(run_ok(through("serve", &[])).trim(), "n\n25");
    let address = toml
        .split("[serve]")
        .nth(1)
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("address = ")))
        .unwrap()
        .trim_matches('"')
        .to_string();
    // A plaintext client of the TLS service.
    let err = run_fails(through(&format!("grpc://{address}"), &[]));
    assert!(
        err.contains("cannot reach") && err.contains("use grpc+tls://"),
        "{err}"
    );
    // A client trusting another CA.
    let other = dir.join("other");
    let o = other.to_str().unwrap();
    ok(dir, &["cert", "ca", "--cluster", "other", "--out", o]);
    ok(
        dir,
        &["cert", "issue", "--ca", o, "--name", "mallory", "--out", o],
    );
    let foreign_ca = other.join("ca.pem");
    let tls_url = format!("grpc+tls://{address}");
    let err = run_fails(through(
        &tls_url,
        &["--tls-ca", foreign_ca.to_str().unwrap()],
    ));
    assert!(err.contains("cannot reach") && err.contains("CA"), "{err}");
    mutual_tls(dir, &other, run_ok, run_fails, through);
    // --tls off serves plaintext, and says so.
    let (_plain, plain_address) = serve(dir, "plain", &["--tls", "off"]);
    let log = std::fs::read_to_string(dir.join("plain.log")).unwrap();
    assert!(
        log.contains("WARNING") && log.contains("plaintext"),
        "{log}"
    );
    let out = run_ok(through(&format!("grpc://{plain_address}"), &[]));
    assert_eq!(out.trim(), "n\n25");
}

/// A service asking for client certificates of the `clients` CA: a client with one gets in,
/// one without and one with another CA's (`other`, holding `mallory`) are refused.
fn mutual_tls(
    dir: &std::path::Path,
    other: &std::path::Path,
    run_ok: impl Fn(Vec<String>) -> String,
    run_fails: impl Fn(Vec<String>) -> String,
    through: impl Fn(&str, &[&str]) -> Vec<String>,
) {
    let clients = dir.join("clients");
    let c = clients.to_str().unwrap();
    ok(dir, &["cert", "ca", "--cluster", "clients", "--out", c]);
    ok(
        dir,
        &["cert", "issue", "--ca", c, "--name", "ana", "--out", c],
    );
    let clients_ca = clients.join("ca.pem");
    let (_mutual, address) = serve(
        dir,
        "mutual",
        &["--tls-client-ca", clients_ca.to_str().unwrap()],
    );
    let url = format!("grpc+tls://{address}");
    let identity = |d: &std::path::Path, name: &str| {
        [
            "--tls-cert".to_string(),
            d.join(format!("{name}.pem")).display().to_string(),
            "--tls-key".to_string(),
            d.join(format!("{name}.key")).display().to_string(),
        ]
    };
    let ana = identity(&clients, "ana");
    let ana: Vec<&str> = ana.iter().map(String::as_str).collect();
    assert_eq!(run_ok(through(&url, &ana)).trim(), "n\n25");
    let err = run_fails(through(&url, &[]));
    assert!(
        err.contains("cannot reach") && err.contains("client certificate"),
        "{err}"
    );
    let mallory = identity(other, "mallory");
    let mallory: Vec<&str> = mallory.iter().map(String::as_str).collect();
    let err = run_fails(through(&url, &mallory));
    assert!(err.contains("cannot reach"), "{err}");
}

/// `toml` without its `[cluster.tls]` table.
fn cut_tls_section(toml: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in toml.lines() {
        if line.starts_with('[') {
            skipping = line.trim() == "[cluster.tls]";
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
