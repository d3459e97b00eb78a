//! TLS on the cluster's links (`adisk up --tls`): TPC-H at the disks with `direct` exchange
//! (disk to disk over TLS) and `via-host` (the host's relay over TLS) equal to the official
//! answers; a host that speaks plaintext, or that trusts another CA, or that shows a
//! certificate another CA signed, gets no answer from the disks, and says why.
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
