//! A Python child that answers one request per line — a JSON-encoded SQL text in, one line
//! out — so that a benchmark can interleave another engine's runs with ours query by query
//! (machine noise that drifts over minutes then hits both sides alike): DuckDB in `bench tpch`,
//! the peer engines of `bench remote`. Its standard error is the benchmark's.
use crate::common::CliError;

/// The running child, killed when dropped.
pub struct PyServer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl PyServer {
    /// Runs `python -c SCRIPT ARGS…` and waits for its `ready` line; `name` names it in the
    /// error when it does not come.
    pub fn start(python: &str, script: &str, args: &[&str], name: &str) -> Result<Self, CliError> {
        use std::io::BufRead;
        let mut child = std::process::Command::new(python)
            .arg("-c")
            .arg(script)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| CliError::Other(format!("cannot run {python}: {e}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(CliError::Other(format!("{name}: the child has no pipes")));
        };
        let mut server = PyServer {
            child,
            stdin,
            stdout: std::io::BufReader::new(stdout),
        };
        let mut line = String::new();
        let _ = server.stdout.read_line(&mut line);
        if line.trim() != "ready" {
            return Err(CliError::Other(format!(
                "{name} did not start (its message is above; `./x setup` installs what it needs)"
            )));
        }
        Ok(server)
    }

    /// Sends `sql` and returns the answer line (trimmed), or why there was none.
    pub fn ask(&mut self, sql: &str) -> Result<String, String> {
        use std::io::{BufRead, Write};
        let request = serde_json::to_string(sql).map_err(|e| e.to_string())?;
        writeln!(self.stdin, "{request}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("the child: {e}"))?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.is_empty() {
            let status = self.child.wait().map_or("?".into(), |s| s.to_string());
            return Err(format!("the child exited ({status})"));
        }
        Ok(line.trim().to_string())
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
