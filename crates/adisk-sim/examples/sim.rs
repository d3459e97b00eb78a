//! Runs the `adisk sim …` commands without the full `adisk` binary:
//! `cargo run --release -p adisk-sim --example sim -- reproduce all --out /tmp/out`.
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: adisk_sim::cli::SimCommand,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = adisk_sim::cli::run(args.cmd) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
