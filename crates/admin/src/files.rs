//! On-failure records as files: what `make run` writes under `.local/onfailure/`, or SQS
//! messages an operator saved. Handled files move into a `redriven/` folder beside them, so
//! running redrive again only takes what is left.

use std::path::{Path, PathBuf};

use crate::redrive::RedriveReport;
use crate::{AdminError, OnFailure, Redriver};

/// Where handled files go, inside the folder that held them.
pub const DONE_DIR: &str = "redriven";

/// The on-failure record files under `path` (a file, or a folder searched recursively), in
/// name order, skipping the [`DONE_DIR`] folders.
pub fn files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(path) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != DONE_DIR) {
            out.extend(files(&p));
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// What re-driving a set of files did.
#[derive(Debug, Default)]
pub struct FilesReport {
    pub handled: Vec<(PathBuf, RedriveReport)>,
    /// Files left in place, with why.
    pub failed: Vec<(PathBuf, AdminError)>,
}

/// Re-drives every on-failure record file under `paths`; each handled file moves to
/// [`DONE_DIR`]; a file that fails stays where it is and the others go on.
pub async fn redrive_files(r: &Redriver, paths: &[PathBuf]) -> FilesReport {
    let mut out = FilesReport::default();
    for file in paths.iter().flat_map(|p| files(p)) {
        match redrive_file(r, &file).await {
            Ok(rep) => {
                if let Err(e) = move_done(&file) {
                    tracing::warn!(file = %file.display(), error = %e, "handled, but not moved");
                }
                out.handled.push((file, rep));
            }
            Err(e) => out.failed.push((file, e)),
        }
    }
    out
}

async fn redrive_file(r: &Redriver, file: &Path) -> Result<RedriveReport, AdminError> {
    let bytes = tokio::fs::read(file)
        .await
        .map_err(|e| AdminError::Input(e.to_string()))?;
    let doc =
        serde_json::from_slice(&bytes).map_err(|e| AdminError::Input(format!("not JSON: {e}")))?;
    r.redrive(&OnFailure::parse(&doc)?).await
}

fn move_done(file: &Path) -> std::io::Result<()> {
    let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
        return Ok(());
    };
    let done = dir.join(DONE_DIR);
    std::fs::create_dir_all(&done)?;
    std::fs::rename(file, done.join(name))
}
