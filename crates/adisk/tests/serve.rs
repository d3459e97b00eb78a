//! `adisk serve`: the host as an Arrow Flight SQL service. A real client (the ADBC Flight SQL
//! driver, from Python) logs in, lists the catalog, runs TPC-H Q1, Q3 and Q6 and a prepared
//! statement, each compared with DuckDB on the cluster's own Parquet files; requests without
//! valid credentials are refused.
mod common;

use arrow_flight::sql::client::FlightSqlServiceClient;
use common::{TpchCluster, channel_to, cluster_ca, disk_channel, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// An `adisk serve` process over a cluster's directory; killed when dropped.
struct Server {
    child: Child,
    address: String,
    password: String,
    /// The CA of its certificate when it serves TLS (`adisk up`'s default).
    ca: Option<PathBuf>,
}

impl Server {
    fn start(dir: &Path, args: &[&str]) -> Self {
        let port_file = dir.join(format!("serve-{}.address", args.join("")));
        let child = Command::new(env!("CARGO_BIN_EXE_adisk"))
            .arg("--dir")
            .arg(dir)
            .args(["serve", "--port-file"])
            .arg(&port_file)
            .args(args)
            .env_remove("ADISK_HOME")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("adisk serve starts");
        wait_until("adisk serve to listen", Duration::from_secs(60), || {
            std::fs::read_to_string(&port_file).is_ok_and(|a| !a.is_empty())
        });
        let password = std::fs::read_to_string(dir.join("admin.password"))
            .expect("adisk serve made the admin user")
            .trim()
            .to_string();
        let off = args.windows(2).any(|w| w == ["--tls", "off"]);
        Server {
            child,
            address: std::fs::read_to_string(&port_file).unwrap(),
            password,
            ca: cluster_ca(dir).filter(|_| !off),
        }
    }

    /// Its URL: `grpc+tls://…` or `grpc://…`.
    fn url(&self) -> String {
        let scheme = if self.ca.is_some() {
            "grpc+tls"
        } else {
            "grpc"
        };
        format!("{scheme}://{}", self.address)
    }

    /// A new connection to it.
    async fn channel(&self) -> tonic::transport::Channel {
        channel_to(&self.url(), self.ca.as_deref()).await
    }

    /// `command` with `ADISK_TLS_CA` set to its CA (the oracle clients read it).
    fn with_ca<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        match &self.ca {
            Some(ca) => command.env("ADISK_TLS_CA", ca),
            None => command.env_remove("ADISK_TLS_CA"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python() -> String {
    std::env::var("ADISK_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn adbc_and_jdbc_clients_log_in_list_tables_and_query_like_duckdb() {
    let c = TpchCluster::start("0.1", 1);
    let server = Server::start(c.dir(), &[]);
    let queries: serde_json::Map<String, serde_json::Value> = [1, 3, 6]
        .into_iter()
        .map(|n| {
            let sql = adisk_host::sql::tpch::query(n).expect("a TPC-H query");
            (format!("q{n}"), serde_json::Value::from(sql))
        })
        .collect();
    let file = c.dir().join("queries.json");
    std::fs::write(&file, serde_json::to_vec(&queries).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/adbc_client.py");
    let out = server
        .with_ca(&mut Command::new(python()))
        .arg(script)
        .arg(server.url())
        .arg(c.dir())
        .arg(&server.password)
        .arg(&file)
        .arg(PARTS_SQL)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "the ADBC client failed (pip install adbc-driver-flightsql pyarrow):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = common::json(&String::from_utf8_lossy(&out.stdout));
    let refused = report["wrong_password"].as_str().unwrap();
    assert!(refused.contains("wrong user name or password"), "{refused}");
    assert_eq!(report["catalogs"], serde_json::json!(["datafusion"]));
    let lineitem = &report["tables"]["lineitem"];
    assert!(
        lineitem.as_array().unwrap().contains(&"l_orderkey".into()),
        "{}",
        report["tables"]
    );
    assert_eq!(report["tables"].as_object().unwrap().len(), 8);
    for q in ["q1", "q3", "q6"] {
        let r = &report["queries"][q];
        assert_eq!(r["equal"], true, "{q}: {r}");
        assert!(r["rows"].as_u64().unwrap() > 0, "{q}: {r}");
    }
    for (bound, r) in report["prepared"].as_object().unwrap() {
        assert_eq!(r["equal"], true, "$1 = {bound}: {r}");
    }
    assert_eq!(
        report["pandas"],
        serde_json::json!({"type": "pandas.DataFrame", "shape": [25, 2], "first": "ALGERIA"})
    );
    per_disk_partitions_are_read_from_every_disk(&report);
    let unknown = report["unknown_table"].as_str().unwrap();
    assert!(unknown.contains("no_such_table"), "{unknown}");
    assert_eq!(report["after_error"], serde_json::json!([[1]]));
    jdbc_client_answers_like_duckdb(c.dir(), &server);
}

/// ADBC `execute_partitions` gave one partition per disk, each at its disk's address, and
/// together they equal DuckDB's rows; a partition is read once; a disk refuses the user's
/// token and jobs without the cluster's key.
fn per_disk_partitions_are_read_from_every_disk(report: &serde_json::Value) {
    let p = &report["partitions"];
    assert_eq!(p["count"], 4, "{p}");
    assert_eq!(p["equal"], true, "{p}");
    assert!(p["rows"].as_u64().unwrap() > 1000, "{p}");
    let mut at: Vec<String> = p["locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l[0].as_str().unwrap().to_string())
        .collect();
    at.sort();
    at.dedup();
    assert_eq!(at.len(), 4, "every partition at its own disk: {p}");
    let twice = p["read_twice"].as_str().unwrap();
    assert!(twice.contains("already used"), "{twice}");
    let r = &report["disk_refusals"];
    for (what, message) in r.as_object().unwrap() {
        let message = message.as_str().unwrap();
        assert!(
            message.contains("Unauthenticated") || message.contains("credentials"),
            "{what}: {message}"
        );
    }
    let job = r["job_with_user_token"].as_str().unwrap();
    assert!(job.contains("endpoint ticket"), "{job}");
}

/// The Arrow Flight SQL JDBC driver (`ADISK_JDBC_JAR`, fetched by `./x`) from a small Java
/// program: a query and a prepared statement equal DuckDB's answers; a wrong password is
/// refused.
fn jdbc_client_answers_like_duckdb(dir: &Path, server: &Server) {
    let jar = std::env::var("ADISK_JDBC_JAR").expect(
        "ADISK_JDBC_JAR: the Flight SQL JDBC driver's jar (./x test fetches it with maven)",
    );
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/JdbcClient.java");
    let (host, port) = server.address.rsplit_once(':').unwrap();
    let java = |password: &str| {
        let out = server
            .with_ca(&mut Command::new("java"))
            .args(["--add-opens=java.base/java.nio=ALL-UNNAMED", "-cp", &jar])
            .arg(&source)
            .args([host, port, "admin", password])
            .arg("SELECT count(*) AS n, sum(o_totalprice) AS s FROM orders WHERE o_orderstatus = 'F'")
            .arg("SELECT count(*) AS n FROM orders WHERE o_orderkey < $1")
            .arg("250000")
            .arg(PARTS_SQL)
            .output()
            .expect("java runs");
        assert!(
            out.status.success(),
            "the JDBC client failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let refused = java("wrong");
    assert!(
        refused.contains("refused: ") && refused.contains("wrong user name or password"),
        "{refused}"
    );
    let out = java(&server.password);
    let line = |label: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{label}: ")))
            .unwrap_or_else(|| panic!("no {label} line:\n{out}"))
            .to_string()
    };
    let want = common::duckdb(
        dir,
        "SELECT count(*), sum(o_totalprice) FROM orders WHERE o_orderstatus = 'F'",
    );
    let (n, s) = line("query")
        .split_once('|')
        .map(|(n, s)| (n.parse::<i64>().unwrap(), s.parse::<f64>().unwrap()))
        .unwrap();
    assert_eq!(serde_json::json!(n), want[0][0]);
    assert!(
        (s - want[0][1].as_f64().unwrap()).abs() < 0.005,
        "{s} vs {}",
        want[0][1]
    );
    let want = common::duckdb(dir, "SELECT count(*) FROM orders WHERE o_orderkey < 250000");
    assert_eq!(
        serde_json::json!(line("prepared").parse::<i64>().unwrap()),
        want[0][0]
    );
    // Read from the disks' endpoints (JDBC logs in at each disk, which grants nothing).
    let want = common::duckdb(
        dir,
        "SELECT count(*), sum(l_orderkey) FROM lineitem WHERE l_quantity < 3",
    );
    assert_eq!(
        line("partitioned"),
        format!("{}|{}", want[0][0], want[0][1]),
        "per-disk endpoints through JDBC"
    );
}

/// `?` parameters (JDBC's and most drivers') bind like `$1`, `$2`, … through the ADBC driver
/// and the JDBC driver: one and two of them, integers and strings, equal to DuckDB's answers
/// (the same statement and values in DuckDB, and the statement with literals); the parameter
/// schema names one per `?`; a wrong count of values, for `?` and `$n`, and a mix of the two
/// are refused as invalid arguments, and the connection stays usable.
#[test]
fn question_mark_parameters_bind_through_adbc_and_jdbc() {
    let c = TpchCluster::start("0.01", 1);
    let server = Server::start(c.dir(), &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/adbc_placeholders.py");
    let out = server
        .with_ca(&mut Command::new(python()))
        .arg(script)
        .arg(server.url())
        .arg(c.dir())
        .arg(&server.password)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "the ADBC client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = common::json(&String::from_utf8_lossy(&out.stdout));
    let cases = report["cases"].as_object().unwrap();
    assert_eq!(cases.len(), 5, "{report}");
    for (name, r) in cases {
        assert_eq!(r["equal"], true, "{name}: {r}");
        assert!(r["want"][0][0].as_i64().unwrap() > 0, "{name}: {r}");
    }
    assert_eq!(
        report["parameter_schema"],
        serde_json::json!([["$1", "int64"], ["$2", "string"]]),
        "{report}"
    );
    for (name, message) in report["refused"].as_object().unwrap() {
        let message = message.as_str().unwrap();
        assert!(message.contains("INVALID_ARGUMENT"), "{name}: {message}");
        let why = match name.as_str() {
            "mixed" => "mixes `?` and numbered placeholders",
            _ => "parameter value(s)",
        };
        assert!(message.contains(why), "{name}: {message}");
    }
    assert_eq!(report["after_error"], serde_json::json!([[1]]));
    jdbc_question_marks_answer_like_duckdb(c.dir(), &server);
}

/// `?` through the JDBC driver (`JdbcPlaceholders.java`), against DuckDB with literals.
fn jdbc_question_marks_answer_like_duckdb(dir: &Path, server: &Server) {
    let jar = std::env::var("ADISK_JDBC_JAR").expect(
        "ADISK_JDBC_JAR: the Flight SQL JDBC driver's jar (./x test fetches it with maven)",
    );
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/JdbcPlaceholders.java");
    let (host, port) = server.address.rsplit_once(':').unwrap();
    let out = server
        .with_ca(&mut Command::new("java"))
        .args(["--add-opens=java.base/java.nio=ALL-UNNAMED", "-cp", &jar])
        .arg(&source)
        .args([host, port, "admin", &server.password])
        .output()
        .expect("java runs");
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    let line = |label: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{label}: ")))
            .unwrap_or_else(|| panic!("no {label} line:\n{out}"))
            .to_string()
    };
    let orders = "SELECT count(*), sum(o_totalprice) FROM orders WHERE ";
    for (label, condition) in [
        ("one_integer", "o_custkey = 370"),
        ("one_string", "o_orderstatus = 'F'"),
        (
            "two_integer_and_string",
            "o_custkey < 500 AND o_orderpriority = '1-URGENT'",
        ),
        ("two_in_order", "o_orderkey >= 100 AND o_orderkey < 2000"),
    ] {
        let want = common::duckdb(dir, &format!("{orders}{condition}"));
        let got = line(label);
        let (n, s) = got.split_once('|').unwrap();
        assert_eq!(serde_json::json!(n.parse::<i64>().unwrap()), want[0][0]);
        let s: f64 = s.parse().unwrap();
        assert!(
            (s - want[0][1].as_f64().unwrap()).abs() < 0.005,
            "{label}: {got} vs {want:?}"
        );
    }
    assert_eq!(line("parameters"), "2");
    for (label, why) in [
        (
            "unbound",
            "takes 1 parameter value(s) (one per `?`) but 0 were bound",
        ),
        ("mixed", "mixes `?` and numbered placeholders"),
    ] {
        let refused = line(&format!("refused {label}"));
        assert!(
            refused.contains("INVALID_ARGUMENT") && refused.contains(why),
            "{label}: {refused}"
        );
    }
    assert_eq!(line("after_error"), "1");
}

/// A filtered projection of one table: its result is made entirely at the disks, so the
/// service answers with one endpoint per disk.
const PARTS_SQL: &str = "SELECT l_orderkey, l_extendedprice FROM lineitem WHERE l_quantity < 3";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_valid_credentials_are_refused() {
    let c = TpchCluster::start("0.01", 1);
    let server = Server::start(c.dir(), &[]);
    let channel = server.channel().await;
    let mut client = FlightSqlServiceClient::new(channel.clone());
    let err = client.execute("SELECT 1".into(), None).await.unwrap_err();
    assert!(err.to_string().contains("no credentials"), "{err}");
    client.set_token("0".repeat(64));
    let err = client.execute("SELECT 1".into(), None).await.unwrap_err();
    assert!(err.to_string().contains("unknown token"), "{err}");
    let mut client = FlightSqlServiceClient::new(channel);
    let err = client.handshake("admin", "wrong").await.unwrap_err();
    assert!(
        err.to_string().contains("wrong user name or password"),
        "{err}"
    );
    let err = client
        .handshake("nobody", &server.password)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("wrong user name or password"),
        "{err}"
    );

    client
        .handshake("admin", &server.password)
        .await
        .expect("logs in");
    let token = client.token().expect("a token").clone();
    let info = client
        .execute("SELECT count(*) AS n FROM nation".into(), None)
        .await
        .expect("a query");
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let batches: Vec<arrow::array::RecordBatch> =
        futures::TryStreamExt::try_collect(client.do_get(ticket.clone()).await.expect("results"))
            .await
            .expect("batches");
    let n = arrow::array::cast::AsArray::as_primitive::<arrow::datatypes::Int64Type>(
        batches[0].column(0),
    )
    .value(0);
    assert_eq!(n, 25);
    // A statement ticket runs once.
    let again = client.do_get(ticket).await;
    let err = match again {
        Ok(s) => futures::TryStreamExt::try_collect::<Vec<_>>(s)
            .await
            .unwrap_err()
            .to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("no such statement"), "{err}");

    // The client's token means nothing to a disk: disks take only cluster-key tokens.
    let disk = common::disk_address(c.dir(), 0);
    let channel = disk_channel(c.dir(), &disk).await;
    let mut raw = arrow_flight::flight_service_client::FlightServiceClient::new(channel);
    let mut request = tonic::Request::new(arrow_flight::Action::new("status", ""));
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let refused = raw.do_action(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");
}

/// Acceptance 4: a per-disk endpoint's ticket is bound to its disk, its query's table and
/// columns (sealed with the cluster key) and its lifetime, and is read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_ticket_cannot_be_replayed_elsewhere_altered_or_late() {
    let c = TpchCluster::start("0.01", 1);
    let server = Server::start(c.dir(), &["--endpoint-ttl-secs", "2"]);
    let mut client = logged_in(&server).await;
    let info = client.execute(PARTS_SQL.into(), None).await.unwrap();
    // The tickets were sealed before the answer came: 2.1 s from here is past their 2 s.
    let issued = std::time::Instant::now();
    assert_eq!(info.endpoint.len(), 4, "one endpoint per disk");
    let part = |i: usize| {
        let e = &info.endpoint[i];
        (e.location[0].uri.clone(), e.ticket.clone().unwrap())
    };
    let (at0, ticket0) = part(0);
    // Another table: the same ticket with `lineitem` replaced by `customer`.
    let text = String::from_utf8_lossy(&ticket0.ticket).replace("lineitem", "customer");
    let altered = arrow_flight::Ticket::new(text.into_bytes());
    let err = disk_get(&at0, server.ca.as_deref(), altered)
        .await
        .unwrap_err();
    assert!(err.contains("bad signature"), "{err}");
    // Another disk.
    let (at1, ticket1) = part(1);
    let err = disk_get(&at1, server.ca.as_deref(), ticket0.clone())
        .await
        .unwrap_err();
    assert!(err.contains("it is for disk"), "{err}");
    // Its own disk, once.
    let rows = disk_get(&at0, server.ca.as_deref(), ticket0.clone())
        .await
        .expect("read at its disk");
    assert!(rows > 0);
    let err = disk_get(&at0, server.ca.as_deref(), ticket0)
        .await
        .unwrap_err();
    assert!(err.contains("already used"), "{err}");
    // Past its lifetime.
    tokio::time::sleep(Duration::from_millis(2100).saturating_sub(issued.elapsed())).await;
    let err = disk_get(&at1, server.ca.as_deref(), ticket1)
        .await
        .unwrap_err();
    assert!(err.contains("expired"), "{err}");
    // A result the host must combine is served by the host, as one endpoint.
    let info = client
        .execute("SELECT count(*) FROM lineitem".into(), None)
        .await
        .unwrap();
    assert_eq!(info.endpoint.len(), 1);
    assert!(info.endpoint[0].location.is_empty());
    // No primary keys are declared: an empty answer of the standard schema, not an error.
    let keys = client
        .get_primary_keys(arrow_flight::sql::CommandGetPrimaryKeys {
            catalog: None,
            db_schema: None,
            table: "lineitem".into(),
        })
        .await
        .expect("GetPrimaryKeys answers");
    let stream = client
        .do_get(keys.endpoint[0].ticket.clone().unwrap())
        .await
        .unwrap();
    let batches: Vec<arrow::array::RecordBatch> =
        futures::TryStreamExt::try_collect(stream).await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    cli_commands_run_through_the_service(c.dir(), &server);
}

/// `explain`, `tpch check` and `status` as clients of a running service (`--connect`): the
/// service's EXPLAIN is the report `adisk explain` prints; the 22 answers read through it are
/// right; its status shows the catalog `adisk status` shows.
fn cli_commands_run_through_the_service(dir: &Path, server: &Server) {
    let url = server.url();
    let password = dir.join("admin.password");
    let remote = [
        "--connect",
        &url,
        "--password-file",
        password.to_str().unwrap(),
    ];
    let sql = "SELECT l_orderkey FROM lineitem WHERE l_quantity < 2";
    let mut args = vec!["explain", sql];
    args.extend(remote);
    let through = common::ok(dir, &args);
    let here = common::ok(dir, &["explain", sql]);
    assert_eq!(through, here, "the same report through the service");
    assert!(through.contains("select l_quantity <"), "{through}");
    let mut args = vec!["explain", "analyze", "SELECT count(*) FROM lineitem"];
    args.extend(remote);
    let analyzed = common::ok(dir, &args);
    assert!(analyzed.contains("links: disk→host"), "{analyzed}");
    let mut args = vec!["tpch", "check", "--sf", "0.01"];
    args.extend(remote);
    let check = common::ok(dir, &args);
    assert!(check.contains("22 passed, 0 failed"), "{check}");
    let mut args = vec!["tpch", "query", "6", "--sf", "0.01"];
    args.extend(remote);
    let q6 = common::ok(dir, &args);
    assert!(q6.contains("revenue"), "{q6}");
    let mut args = vec!["status", "--format", "json"];
    args.extend(remote);
    let through = common::json(&common::ok(dir, &args));
    let here = common::json(&common::ok(dir, &["status", "--format", "json"]));
    assert_eq!(through["tables"], here["tables"], "the same catalog");
    assert_eq!(through["disks"].as_array().unwrap().len(), 4);
    disklet_install_is_a_privilege(dir, server);
    let mut args = vec!["explain", "SELECT * FROM nowhere"];
    args.extend(remote);
    let err = common::fails(dir, &args);
    assert!(err.contains("nowhere"), "{err}");
}

/// Installing a disklet through the service needs the user's privilege: `ana`, added without
/// it, is refused and nothing is installed; `admin` (made with it) installs on every disk. A
/// user added while the service runs can log in at once (the users file is read again).
fn disklet_install_is_a_privilege(dir: &Path, server: &Server) {
    use std::io::Write;
    let mut add = Command::new(env!("CARGO_BIN_EXE_adisk"))
        .arg("--dir")
        .arg(dir)
        .args(["user", "add", "ana"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    add.stdin
        .take()
        .unwrap()
        .write_all(b"ana-secret\n")
        .unwrap();
    assert!(add.wait().unwrap().success());
    let ana = dir.join("ana.password");
    std::fs::write(&ana, "ana-secret\n").unwrap();
    let module = dir.join("noop.wat");
    std::fs::write(
        &module,
        r#"(module
  (import "adisk_v1" "emit" (func $emit (param i32 i32) (result i32)))
  (memory (export "memory") 1 1)
  (func (export "adisk_input_area") (param i32) (result i32) (i32.const 65536))
  (func (export "adisk_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "adisk_process") (param i32 i32 i64) (result i32) (i32.const 0))
  (func (export "adisk_finish") (result i32) (i32.const 0)))"#,
    )
    .unwrap();
    let url = server.url();
    let install = |user: &str, password: &Path| {
        vec![
            "disklet".to_string(),
            "install".into(),
            module.to_str().unwrap().into(),
            "--name".into(),
            "noop".into(),
            "--connect".into(),
            url.clone(),
            "--user".into(),
            user.into(),
            "--password-file".into(),
            password.to_str().unwrap().into(),
        ]
    };
    let args = install("ana", &ana);
    let err = common::fails(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        err.contains("may not install disklets") && err.contains("--allow-disklet-install"),
        "{err}"
    );
    let listed = common::ok(dir, &["disklet", "list", "--format", "json"]);
    assert!(!listed.contains("noop"), "{listed}");
    let args = install("admin", &dir.join("admin.password"));
    let out = common::ok(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.matches("noop").count(), 4, "on every disk:\n{out}");
    let listed = common::ok(dir, &["disklet", "list", "--format", "json"]);
    assert_eq!(listed.matches("\"noop\"").count(), 4, "{listed}");
}

/// Reads `ticket` at the disk at `location` (`grpc+tcp://host:port` or `grpc+tls://…`,
/// checked against `ca`) without credentials: the rows, or the refusal's text.
async fn disk_get(
    location: &str,
    ca: Option<&Path>,
    ticket: arrow_flight::Ticket,
) -> Result<usize, String> {
    let channel = channel_to(location, ca).await;
    let mut disk = arrow_flight::FlightClient::new(channel);
    let stream = disk.do_get(ticket).await.map_err(|e| e.to_string())?;
    let batches: Vec<arrow::array::RecordBatch> = futures::TryStreamExt::try_collect(stream)
        .await
        .map_err(|e| e.to_string())?;
    Ok(batches.iter().map(|b| b.num_rows()).sum())
}

/// Logs in to `server` over a new connection.
async fn logged_in(server: &Server) -> FlightSqlServiceClient<tonic::transport::Channel> {
    let channel = server.channel().await;
    let mut client = FlightSqlServiceClient::new(channel);
    client
        .handshake("admin", &server.password)
        .await
        .expect("logs in");
    client
}

/// Runs `sql` to the end; the error's text if it fails.
async fn run(
    client: &mut FlightSqlServiceClient<tonic::transport::Channel>,
    sql: &str,
) -> Result<usize, String> {
    let info = client
        .execute(sql.into(), None)
        .await
        .map_err(|e| e.to_string())?;
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
    let batches: Vec<arrow::array::RecordBatch> = futures::TryStreamExt::try_collect(stream)
        .await
        .map_err(|e| e.to_string())?;
    Ok(batches.iter().map(|b| b.num_rows()).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_running_and_queued_limits_a_query_is_told_busy_and_cancel_stops_one() {
    let c = TpchCluster::start("0.01", 1);
    let server = Server::start(c.dir(), &["--max-running", "1", "--max-queued", "0"]);
    // A query that holds the one turn for as long as the server lives (a cross join of
    // lineitem with itself, 3.6 G pairs, counted at the host).
    let mut slow = logged_in(&server).await;
    let info = slow
        .execute(
            "SELECT count(*) FROM lineitem a, lineitem b WHERE a.l_quantity + b.l_quantity > 0"
                .into(),
            None,
        )
        .await
        .expect("planned");
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let mut reader = slow.clone();
    let holder = tokio::spawn(async move {
        let stream = reader.do_get(ticket).await.map_err(|e| e.to_string())?;
        futures::TryStreamExt::try_collect::<Vec<_>>(stream)
            .await
            .map(|b| b.len())
            .map_err(|e| e.to_string())
    });
    let mut client = logged_in(&server).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let busy = loop {
        match run(&mut client, "SELECT 1").await {
            Err(e) if e.contains("busy") => break e,
            other => {
                assert!(
                    !holder.is_finished(),
                    "the slow query ended before a busy error: {:?}; SELECT 1 gave {other:?}",
                    holder.await
                );
                assert!(
                    std::time::Instant::now() < deadline,
                    "no busy error in 60 s: {other:?}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(busy.contains("1 queries running and 0 waiting"), "{busy}");
    assert!(!holder.is_finished(), "the slow query still runs");
    // CancelFlightInfo stops it: its read ends as cancelled, and the turn is free again.
    let channel = server.channel().await;
    let token = FlightSqlServiceClient::new(channel.clone())
        .handshake("admin", &server.password)
        .await
        .unwrap();
    let mut raw = arrow_flight::FlightClient::new(channel);
    raw.add_header(
        "authorization",
        &format!("Bearer {}", String::from_utf8_lossy(&token)),
    )
    .unwrap();
    let cancelled = raw
        .cancel_flight_info(arrow_flight::CancelFlightInfoRequest::new(info.clone()))
        .await
        .expect("cancel answers");
    assert_eq!(cancelled.status(), arrow_flight::CancelStatus::Cancelled);
    let ended = tokio::time::timeout(Duration::from_secs(30), holder)
        .await
        .expect("the cancelled query ends within 30 s")
        .unwrap();
    assert!(
        ended.as_ref().is_err_and(|e| e.contains("cancelled")),
        "{ended:?}"
    );
    assert_eq!(run(&mut client, "SELECT 1").await, Ok(1));
    let again = raw
        .cancel_flight_info(arrow_flight::CancelFlightInfoRequest::new(info))
        .await
        .unwrap();
    assert_eq!(again.status(), arrow_flight::CancelStatus::NotCancellable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_starts_the_service_and_down_stops_it() {
    let c = common::Cluster::start(&["--disks", "2"]);
    let config: serde_json::Value = {
        let text = std::fs::read_to_string(c.dir().join("cluster.toml")).unwrap();
        let serve = text.split("[serve]").nth(1).expect("a [serve] section");
        let field = |name: &str| {
            serve
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} = ")))
                .map(|v| v.trim_matches('"').to_string())
                .unwrap_or_else(|| panic!("{name} in [serve]"))
        };
        serde_json::json!({
            "metrics": field("metrics_address"),
            "address": field("address"),
            "pid": field("pid").parse::<i32>().unwrap(),
            "password_file": field("admin_password_file"),
        })
    };
    let server = Server {
        child: Command::new("true").spawn().unwrap(), // not ours to kill: `down` stops it
        address: config["address"].as_str().unwrap().to_string(),
        password: std::fs::read_to_string(config["password_file"].as_str().unwrap())
            .unwrap()
            .trim()
            .to_string(),
        ca: cluster_ca(c.dir()),
    };
    let metrics = config["metrics"].as_str().unwrap().to_string();
    let before = scrape(&metrics);
    assert!(before.contains("adisk_disk_up{disk=\"1\"} 1"), "{before}");
    let mut client = logged_in(&server).await;
    assert_eq!(run(&mut client, "SELECT 1").await, Ok(1));
    assert!(run(&mut client, "SELECT * FROM nowhere").await.is_err());
    let after = scrape(&metrics);
    let value = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    for (name, moved) in [
        ("adisk_queries_total{outcome=\"ok\"}", 1.0),
        ("adisk_queries_total{outcome=\"error\"}", 1.0),
        ("adisk_logins_total{outcome=\"ok\"}", 1.0),
        ("adisk_query_seconds_count", 1.0),
        ("adisk_rows_returned_total", 1.0),
    ] {
        assert_eq!(
            value(&after, name) - value(&before, name),
            moved,
            "{name}:\n{after}"
        );
    }
    disks_serve_their_own_metrics(c.dir(), &mut client, &metrics).await;
    a_load_by_another_process_is_seen_at_the_next_query(c.dir(), &mut client).await;
    // The CLI as a client of the running service.
    let out = common::ok(
        c.dir(),
        &[
            "sql",
            "--connect",
            "serve",
            "--format",
            "csv",
            "SELECT 40 + 2 AS answer",
        ],
    );
    assert_eq!(out.trim(), "answer\n42", "{out}");
    let wrong = c.dir().join("wrong.password");
    std::fs::write(&wrong, "nope\n").unwrap();
    let err = common::fails(
        c.dir(),
        &[
            "sql",
            "--connect",
            "serve",
            "--password-file",
            wrong.to_str().unwrap(),
            "SELECT 1",
        ],
    );
    assert!(
        err.contains("login refused") && err.contains("wrong user name or password"),
        "{err}"
    );
    let err = common::fails(
        c.dir(),
        &["sql", "--connect", "serve", "SELECT * FROM nowhere"],
    );
    assert!(err.contains("nowhere"), "{err}");
    let pid = config["pid"].as_i64().unwrap() as i32;
    common::ok(c.dir(), &["down"]);
    wait_until("the service to stop", Duration::from_secs(10), || {
        common::process_gone(pid)
    });
}

/// Each disk `adisk up` started serves `/metrics` at the `metrics_address` in its
/// `cluster.toml` entry; a query moves its job and byte counters, and a filtered projection
/// read from per-disk endpoints moves the service's endpoint counter and the disks' bytes to
/// the reader.
async fn disks_serve_their_own_metrics(
    dir: &Path,
    client: &mut FlightSqlServiceClient<tonic::transport::Channel>,
    service_metrics: &str,
) {
    common::ok(
        dir,
        &["load", "tpch", "--sf", "0.01", "--tables", "lineitem"],
    );
    let config = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    let addresses: Vec<String> = config
        .lines()
        .filter_map(|l| l.strip_prefix("metrics_address = "))
        .map(|v| v.trim_matches('"').to_string())
        .collect();
    // Two disks, then the service's own.
    assert_eq!(addresses.len(), 3, "{config}");
    let value = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    };
    let before = scrape(&addresses[0]);
    assert_eq!(run(client, "SELECT count(*) FROM lineitem").await, Ok(1));
    let after = scrape(&addresses[0]);
    for name in [
        "adisk_disk_jobs_finished_total",
        "adisk_disk_bytes_read_total",
        "adisk_disk_rows_read_total",
        "adisk_disk_bytes_to_host_total",
    ] {
        assert!(
            value(&after, name) > value(&before, name),
            "{name}:\n{after}"
        );
    }
    assert_eq!(value(&after, "adisk_disk_jobs_running"), 0.0);
    assert!(
        after.contains("adisk_disk_memory_bytes 67108864"),
        "{after}"
    );
    // Read from the disks: the service only counts it.
    let endpoints = value(&scrape(service_metrics), "adisk_endpoint_queries_total");
    let shipped = value(&scrape(&addresses[1]), "adisk_disk_bytes_to_host_total");
    // A projection (no filter the cost model could keep at the host on 2 disks).
    let info = client
        .execute("SELECT l_orderkey, l_comment FROM lineitem".into(), None)
        .await
        .unwrap();
    assert_eq!(info.endpoint.len(), 2);
    for e in &info.endpoint {
        let rows = disk_get(
            &e.location[0].uri,
            cluster_ca(dir).as_deref(),
            e.ticket.clone().unwrap(),
        )
        .await;
        assert!(rows.is_ok(), "{rows:?}");
    }
    assert_eq!(
        value(&scrape(service_metrics), "adisk_endpoint_queries_total"),
        endpoints + 1.0
    );
    assert!(value(&scrape(&addresses[1]), "adisk_disk_bytes_to_host_total") > shipped);
}

/// The service holds each disk's catalog between queries: a load made by another process
/// (the CLI) while it runs changes the disks' catalog versions, and its next query plans over
/// the new data.
async fn a_load_by_another_process_is_seen_at_the_next_query(
    dir: &Path,
    client: &mut FlightSqlServiceClient<tonic::transport::Channel>,
) {
    async fn rows(client: &mut FlightSqlServiceClient<tonic::transport::Channel>) -> i64 {
        let (_, batches) = fetch(client, "SELECT count(*) FROM lineitem")
            .await
            .unwrap();
        let column = batches[0].column(0).as_any();
        column
            .downcast_ref::<arrow::array::Int64Array>()
            .expect("a count")
            .value(0)
    }
    let before = rows(client).await;
    assert_eq!(before, 60_175, "SF 0.01");
    common::ok(
        dir,
        &["load", "tpch", "--sf", "0.02", "--tables", "lineitem"],
    );
    let after = rows(client).await;
    assert!(
        after > 2 * before - 1_000,
        "{after} rows after loading SF 0.02"
    );
}

/// Runs `sql`; the result's column count and batches.
async fn fetch(
    client: &mut FlightSqlServiceClient<tonic::transport::Channel>,
    sql: &str,
) -> Result<(usize, Vec<arrow::array::RecordBatch>), String> {
    let info = client
        .execute(sql.into(), None)
        .await
        .map_err(|e| e.to_string())?;
    let columns = info
        .clone()
        .try_decode_schema()
        .map_err(|e| e.to_string())?
        .fields()
        .len();
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
    let batches = futures::TryStreamExt::try_collect(stream)
        .await
        .map_err(|e| e.to_string())?;
    Ok((columns, batches))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_clients_run_the_tpch_mix_and_every_answer_is_right() {
    use adisk_host::sql::{oracle, tpch};
    let c = TpchCluster::start("0.01", 1);
    let server = Server::start(c.dir(), &[]);
    // The official answers; Q13 (which depends on the generator's comment texts) from DuckDB
    // on the same files, as `adisk tpch check` does.
    let mut answers = tpch::official_answers(0.01).expect("official answers");
    let config =
        adisk_core::config::ClusterConfig::load(&c.dir().join("cluster.toml")).expect("config");
    let cluster = adisk_host::Cluster::connect(config).await.expect("cluster");
    let catalog = cluster.catalog().await.expect("catalog");
    let q13 = oracle::duckdb_same_data(&cluster, &catalog, &[tpch::query(13).unwrap()])
        .expect("DuckDB")
        .remove(0)
        .expect("Q13 in DuckDB");
    answers.insert(13, q13);
    let answers = std::sync::Arc::new(answers);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let clients: Vec<_> = (0..16u32)
        .map(|i| {
            let (answers, address, password, ca) = (
                answers.clone(),
                server.address.clone(),
                server.password.clone(),
                server.ca.clone(),
            );
            tokio::spawn(async move {
                let me = Server {
                    child: Command::new("true").spawn().unwrap(),
                    address,
                    password,
                    ca,
                };
                let mut client = logged_in(&me).await;
                let (mut q, mut done) = (1 + i % 22, 0u32);
                while done == 0 || std::time::Instant::now() < deadline {
                    let (columns, batches) = fetch(&mut client, tpch::query(q).unwrap())
                        .await
                        .map_err(|e| format!("client {i}, Q{q}: {e}"))?;
                    let skip = |c: &str| q != 13 && tpch::generator_text_column(c);
                    oracle::compare_batches(columns, &batches, &answers[&q], skip)
                        .map_err(|e| format!("client {i}, Q{q}: {e}"))?;
                    (q, done) = (q % 22 + 1, done + 1);
                }
                Ok::<u32, String>(done)
            })
        })
        .collect();
    let mut total = 0;
    for c in clients {
        total += c
            .await
            .expect("a client task")
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(total >= 16, "{total} queries");
    eprintln!("16 clients answered {total} TPC-H queries correctly in 20 s");
}

/// `GET /metrics` from the Prometheus endpoint at `address`.
fn scrape(address: &str) -> String {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(address).expect("the metrics endpoint");
    socket
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: adisk\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}
