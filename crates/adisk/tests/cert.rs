//! `adisk cert`: a cluster's certificate authority and members' certificates, keys readable by
//! their owner only, nothing overwritten, bad names refused with clear errors. (That members
//! meet over TLS with them and strangers do not is `adisk_core::tls`'s unit test.)
mod common;
use common::{fails, ok};
use std::os::unix::fs::PermissionsExt;

#[test]
fn certificates_are_made_kept_private_and_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, certs) = (tmp.path(), tmp.path().join("tls"));
    let out = certs.to_str().unwrap();
    assert!(ok(dir, &["cert", "ca", "--cluster", "lab", "--out", out]).contains("ca.pem"));
    ok(
        dir,
        &[
            "cert",
            "issue",
            "--ca",
            out,
            "--name",
            "disk-0",
            "--host",
            "10.7.0.11",
            "--out",
            out,
        ],
    );
    for (file, mode) in [
        ("ca.pem", 0o644),
        ("ca.key", 0o600),
        ("disk-0.pem", 0o644),
        ("disk-0.key", 0o600),
    ] {
        let meta = std::fs::metadata(certs.join(file)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, mode, "{file}");
    }
    let ca_before = std::fs::read(certs.join("ca.key")).unwrap();
    assert!(fails(dir, &["cert", "ca", "--out", out]).contains("not overwritten"));
    assert_eq!(std::fs::read(certs.join("ca.key")).unwrap(), ca_before);
    let again = [
        "cert", "issue", "--ca", out, "--name", "disk-0", "--out", out,
    ];
    assert!(fails(dir, &again).contains("disk-0.pem exists"));
    let bad_host = [
        "cert", "issue", "--ca", out, "--name", "x", "--host", "a b", "--out", out,
    ];
    assert!(fails(dir, &bad_host).contains("neither a host name nor an IP address"));
    let bad_name = ["cert", "issue", "--ca", out, "--name", "../x", "--out", out];
    assert!(fails(dir, &bad_name).contains("a certificate's name"));
    let no_ca = [
        "cert",
        "issue",
        "--ca",
        "/nonexistent",
        "--name",
        "x",
        "--out",
        out,
    ];
    assert!(fails(dir, &no_ca).contains("/nonexistent/ca.pem"));
}
