//! The command line: which parts run, how large, and where the report goes.
//!
//!   [--quick] [--only upkeep|watchdog] [--windows 0,300,900,3600] [--out DIR] [--render]

use std::path::PathBuf;

/// The fleet windows measured (`OFFLINE_AFTER_SECONDS`; 0 is off).
const WINDOWS_S: [u32; 4] = [0, 300, 900, 3600];

pub struct Args {
    /// The command line as given, the program's name first.
    given: Vec<String>,
    /// `--quick`: smaller fleets.
    pub quick: bool,
    /// `--only upkeep|watchdog`: one part; the other is kept from the last report.
    pub only: Option<String>,
    /// `--out DIR`: where the report goes, `bench/` unless given.
    pub dir: PathBuf,
    /// `--render`: the report again from `offline.json`, nothing measured.
    pub render: bool,
    /// `--windows 0,900`: some of the windows (while iterating).
    pub windows: Vec<u32>,
}

impl Args {
    pub fn parse() -> Args {
        let given: Vec<String> = std::env::args().collect();
        let arg = |name: &str| {
            given
                .iter()
                .position(|a| a == name)
                .and_then(|i| given.get(i + 1))
                .cloned()
        };
        Args {
            quick: given.iter().any(|a| a == "--quick"),
            only: arg("--only"),
            dir: arg("--out").map_or_else(
                || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench"),
                PathBuf::from,
            ),
            render: given.iter().any(|a| a == "--render"),
            windows: arg("--windows").map_or_else(
                || WINDOWS_S.to_vec(),
                |w| w.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
            ),
            given,
        }
    }

    /// Whether `part` (`upkeep` or `watchdog`) runs: every part unless `--only` names one.
    pub fn runs(&self, part: &str) -> bool {
        self.only.as_deref().is_none_or(|o| o == part)
    }

    /// The command that produced the report, as the report names it.
    pub fn command(&self) -> String {
        format!(
            "cargo run{} -p tidemark-bench --example offline{}",
            if cfg!(debug_assertions) {
                ""
            } else {
                " --release"
            },
            if self.given.len() > 1 {
                format!(" -- {}", self.given[1..].join(" "))
            } else {
                String::new()
            }
        )
    }
}
