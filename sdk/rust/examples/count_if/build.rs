//! Linker arguments for the disklet module: a declared memory maximum (the disk refuses a
//! module without one, or with one larger than its grant: scratch + one input area per input)
//! and a 64 KiB stack (Rust's default is 1 MiB), as sdk/c/build.sh passes to wasm-ld.
//! ADISK_MAX_MEMORY_KIB overrides the maximum (default 2048 KiB).
fn main() {
    println!("cargo::rerun-if-env-changed=ADISK_MAX_MEMORY_KIB");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("wasm32") {
        return;
    }
    let kib: u64 = match std::env::var("ADISK_MAX_MEMORY_KIB") {
        Ok(v) => v.parse().expect("ADISK_MAX_MEMORY_KIB is a number of KiB"),
        Err(_) => 2048,
    };
    assert!(
        kib > 0 && kib.is_multiple_of(64),
        "ADISK_MAX_MEMORY_KIB={kib}: whole 64 KiB pages"
    );
    println!("cargo::rustc-link-arg-cdylib=--max-memory={}", kib * 1024);
    println!("cargo::rustc-link-arg-cdylib=-zstack-size=65536");
}
