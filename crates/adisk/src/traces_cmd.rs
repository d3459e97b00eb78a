//! `adisk traces`: the traces the Flight SQL service keeps of the user's last queries
//! (`adisk serve --keep-traces`): a list, or one of them written as an `adisk-trace` document
//! and as a Chrome/Perfetto timeline.
use crate::common::CliError;
use crate::sql_cmd::{ConnectArgs, TraceArgs};
use adisk_server::traces::{TraceEntry, TraceRequest};
use std::path::Path;

/// `adisk traces` arguments.
#[derive(clap::Args, Debug)]
pub struct TracesArgs {
    /// The query whose trace to write (its id in the list); none: list the kept queries.
    pub id: Option<u64>,
    /// Where to write it (with an id; without --trace or --chrome-trace, the trace is printed
    /// on standard output).
    #[command(flatten)]
    pub out: TraceArgs,
    #[command(flatten)]
    pub remote: ConnectArgs,
}

pub async fn traces(dir: &Path, a: TracesArgs) -> Result<(), CliError> {
    let mut remote = a.remote.clone();
    remote.connect.get_or_insert_with(|| "serve".to_string());
    let Some(mut client) = remote.client(dir).await? else {
        return Err(CliError::Other("adisk traces needs a service".into()));
    };
    let other = |e: adisk_server::client::ClientError| CliError::Other(e.to_string());
    let Some(id) = a.id else {
        let list = client.traces().await.map_err(other)?;
        print!("{}", table(&list));
        return Ok(());
    };
    let req = TraceRequest {
        id: Some(id),
        handle: None,
    };
    let trace = client.trace(&req).await.map_err(other)?;
    if a.out.trace.is_none() && a.out.chrome_trace.is_none() {
        let text = serde_json::to_string_pretty(&trace)
            .map_err(|e| CliError::Other(format!("encoding the trace: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    a.out.write_trace(&trace)
}

/// The kept queries, a line each.
fn table(list: &[TraceEntry]) -> String {
    if list.is_empty() {
        return "no traces kept for this user (the service keeps the last queries' traces; `adisk serve --keep-traces N`)\n".into();
    }
    let mut out = format!(
        "{:>6}  {:>10}  {:>8}  {:>10}  {:>9}  query\n",
        "id", "ended", "wall ms", "rows", "trace"
    );
    for e in list {
        let text: String = e.text.split_whitespace().collect::<Vec<_>>().join(" ");
        let text: String = text.chars().take(80).collect();
        out.push_str(&format!(
            "{:>6}  {:>10}  {:>8.1}  {:>10}  {:>9}  {text}\n",
            e.id,
            clock(e.ended_unix_s),
            e.wall_ms,
            e.rows,
            match e.bytes {
                0 => "(making)".to_string(),
                b => adisk_core::stats::human_bytes(b),
            }
        ));
    }
    out
}

/// `HH:MM:SS` (UTC) of a Unix time.
fn clock(unix_s: f64) -> String {
    let s = unix_s as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_a_line_per_query() {
        assert!(table(&[]).starts_with("no traces kept"));
        let e = TraceEntry {
            id: 7,
            handle: "ab".into(),
            user: "admin".into(),
            ended_unix_s: 3661.5,
            wall_ms: 12.25,
            rows: 3,
            text: "select\n  1".into(),
            bytes: 2048,
        };
        let t = table(&[e]);
        let line = t.lines().nth(1).unwrap();
        assert!(line.contains("01:01:01") && line.contains("12.2"), "{line}");
        assert!(
            line.ends_with("select 1") && line.contains("2.0 KiB"),
            "{line}"
        );
    }
}
