//! Figures that come from build artifacts and tools: binary sizes, the ingest criterion
//! bench, and a description of the machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;
use serde_json::Value;

use crate::BenchError;

pub const FUNCTIONS: [&str; 3] = ["tidemark-ingest", "tidemark-aggregator", "tidemark-api"];

/// The workspace root (where `Cargo.toml`, `events/` and `bench/` are).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    here.canonicalize().unwrap_or(here)
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Runs a command in the workspace root, its output going to ours; fails on a non-zero exit.
pub fn run_tool(program: &str, args: &[&str]) -> Result<(), BenchError> {
    eprintln!("bench: $ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .current_dir(workspace_root())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Other(format!(
            "`{program} {}` failed: {status}",
            args.join(" ")
        )))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BinarySize {
    pub function: String,
    pub target: String,
    pub path: String,
    /// `None` when not measured (see `note`).
    pub bytes: Option<u64>,
    pub note: String,
}

/// x86_64 sizes of the release binaries (`strip = "symbols"` in the release profile).
pub fn x86_64_sizes() -> Vec<BinarySize> {
    FUNCTIONS
        .iter()
        .map(|f| {
            let p = target_dir().join("release").join(f);
            let bytes = std::fs::metadata(&p).ok().map(|m| m.len());
            BinarySize {
                function: (*f).to_owned(),
                target: "x86_64-unknown-linux-gnu".into(),
                path: p.display().to_string(),
                bytes,
                note: if bytes.is_some() {
                    "cargo build --release (profile strips symbols)".into()
                } else {
                    "not measured: release binary missing".into()
                },
            }
        })
        .collect()
}

/// arm64 sizes from a `sam build` (`.aws-sam/build/<Function>/bootstrap`), if one exists.
pub fn arm64_sizes() -> Vec<BinarySize> {
    let dir = workspace_root().join(".aws-sam/build");
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path().join("bootstrap");
            if let Ok(m) = std::fs::metadata(&p) {
                out.push(BinarySize {
                    function: e.file_name().to_string_lossy().into_owned(),
                    target: "aarch64 (sam build, cargo-lambda)".into(),
                    path: p.display().to_string(),
                    bytes: Some(m.len()),
                    note: "from .aws-sam/build".into(),
                });
            }
        }
    }
    if out.is_empty() {
        out.push(BinarySize {
            function: "all".into(),
            target: "aarch64".into(),
            path: dir.display().to_string(),
            bytes: None,
            note: "not measured: no .aws-sam/build/*/bootstrap (run `make build` first; a \
                   cross build with fat LTO was too costly on this shared 2-core machine)"
                .into(),
        });
    }
    out
}

#[derive(Debug, Clone, Serialize)]
pub struct CriterionFigure {
    pub id: String,
    /// Mean time of one iteration, nanoseconds.
    pub mean_ns: f64,
    /// Elements (readings) per iteration from the bench's `Throughput`.
    pub elements: u64,
    pub ns_per_reading: f64,
}

/// Every criterion result under `target/criterion/<group>` (mean estimate per iteration
/// divided by the bench's declared element throughput).
pub fn criterion_results(group: &str) -> Vec<CriterionFigure> {
    let mut out = Vec::new();
    let mut stack = vec![target_dir().join("criterion").join(group)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n == "new") {
                    if let Some(f) = read_criterion(&p) {
                        out.push(f);
                    }
                } else if p
                    .file_name()
                    .is_some_and(|n| n != "base" && n != "change" && n != "report")
                {
                    stack.push(p);
                }
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

fn read_json(p: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(p).ok()?).ok()
}

fn read_criterion(new_dir: &Path) -> Option<CriterionFigure> {
    let est = read_json(&new_dir.join("estimates.json"))?;
    let bench = read_json(&new_dir.join("benchmark.json"))?;
    let mean_ns = est["mean"]["point_estimate"].as_f64()?;
    let elements = bench["throughput"]["Elements"].as_u64().unwrap_or(1).max(1);
    Some(CriterionFigure {
        id: bench["full_id"].as_str().unwrap_or_default().to_owned(),
        mean_ns,
        elements,
        ns_per_reading: mean_ns / elements as f64,
    })
}

/// Machine, toolchain and checkout, for the report's header.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gb: f64,
    pub kernel: String,
    pub rustc: String,
    pub java: String,
    pub git_commit: String,
    pub git_dirty: bool,
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .current_dir(workspace_root())
        .output()
        .ok()
        .map(|o| {
            let s = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&s)
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    Machine {
        cpu: cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|s| s.trim_start_matches([' ', '\t', ':']).to_owned())
            .unwrap_or_else(|| "unknown".into()),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_gb: mem_kb / 1024.0 / 1024.0,
        kernel: output("uname", &["-sr"]),
        rustc: output("rustc", &["-V"]),
        java: output("java", &["-version"]),
        git_commit: output("git", &["rev-parse", "--short", "HEAD"]),
        git_dirty: !output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty(),
    }
}
