//! DuckDB (from PyPI, installed by `scripts/duckdb.sh` into `.venv/duckdb`): a Parquet reader
//! we did not write, reading exported files as Athena or a data scientist would.

use std::path::Path;
use std::process::Command;

use crate::workspace_root;

/// Runs the Python `script` (which imports `duckdb` and prints one JSON document) with `dir`
/// as its argument, and parses what it printed; panics with its stderr on failure.
pub fn query(script: &str, dir: &Path) -> serde_json::Value {
    let python = Command::new("bash")
        .arg(workspace_root().join("scripts/duckdb.sh"))
        .output()
        .expect("run scripts/duckdb.sh");
    assert!(
        python.status.success(),
        "scripts/duckdb.sh: {}",
        String::from_utf8_lossy(&python.stderr)
    );
    let python = String::from_utf8(python.stdout).expect("a path");
    let out = Command::new(python.trim())
        .args(["-c", script])
        .arg(dir)
        .output()
        .expect("run DuckDB's Python");
    assert!(
        out.status.success(),
        "DuckDB: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("DuckDB's script prints JSON")
}
