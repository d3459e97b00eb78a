//! First contact: a missing outside tool is named together with the command that installs it,
//! by the set-up (`./x setup`) and by the SDK build the tests use (`sdk/c/build.sh`), never a
//! bare "build failed". Each check runs with a `PATH` from which clang and the WebAssembly
//! linker were removed on purpose.
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether an executable name belongs to clang or LLVM's linkers.
fn is_clang_or_lld(name: &str) -> bool {
    name.starts_with("clang") || name.contains("lld") || name.starts_with("wasm-ld")
}

/// A directory of links to every executable on this test's `PATH` except clang and the lld
/// linkers: the same machine, with that one prerequisite unavailable.
fn path_without_clang(into: &Path) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let target = into.join(&name);
            if is_clang_or_lld(&name.to_string_lossy()) || target.exists() {
                continue;
            }
            let _ = symlink(entry.path(), target);
        }
    }
    into.display().to_string()
}

fn run_without_clang(program: &str, args: &[&str]) -> Output {
    let bin = tempfile::tempdir().expect("tempdir");
    let path = path_without_clang(bin.path());
    Command::new("/bin/bash")
        .arg(program)
        .args(args)
        .current_dir(repo())
        .env("PATH", path)
        .env_remove("CLANG")
        .output()
        .expect("bash runs")
}

#[test]
fn setup_names_missing_clang_and_its_install_command() {
    let out = run_without_clang("x", &["setup", "--no-install"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "the set-up stops before building:\n{err}"
    );
    assert!(
        err.contains("clang and wasm-ld")
            && err.contains("install: sudo apt-get install clang lld"),
        "{err}"
    );
    assert!(err.contains("nothing was installed"), "{err}");
}

#[test]
fn sdk_build_names_missing_clang_and_its_install_command() {
    let out_dir = tempfile::tempdir().expect("tempdir");
    let wasm = out_dir.path().join("count_if.wasm");
    let out = run_without_clang(
        "sdk/c/build.sh",
        &["sdk/c/examples/count_if.c", wasm.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(
        err.contains("`clang`") && err.contains("sudo apt-get install clang lld"),
        "{err}"
    );
    assert!(!wasm.exists(), "no module is written");
}
