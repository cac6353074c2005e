//! The design lives in the repository (`docs/design.md`, `docs/decisions/`), and code comments
//! cite it: every citation must name a section or record that exists, and nothing may send a
//! reader outside the repository or to an issue number instead of saying what it means.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every tracked-looking text file of the repository (build outputs, installed tools and this
/// file, whose examples are not citations, left out), with its path relative to the root.
fn texts() -> Vec<(String, String)> {
    const SKIP: &[&str] = &[
        "target",
        ".local",
        ".git",
        ".aws-sam",
        ".venv",
        "node_modules",
    ];
    const EXT: &[&str] = &["rs", "md", "yaml", "yml", "toml", "sh", "js", "html", "py"];
    let mut out = Vec::new();
    let mut stack = vec![root()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if !SKIP.contains(&name.as_str()) && !name.starts_with("target") {
                    stack.push(path);
                }
                continue;
            }
            let ext = path.extension().map(|e| e.to_string_lossy().to_string());
            if name == "Makefile" || ext.is_some_and(|e| EXT.contains(&e.as_str())) {
                if let Ok(text) = fs::read_to_string(&path) {
                    let rel = path
                        .strip_prefix(root())
                        .unwrap()
                        .to_string_lossy()
                        .to_string();
                    if !rel.ends_with(file!().rsplit('/').next().unwrap()) {
                        out.push((rel, text));
                    }
                }
            }
        }
    }
    out
}

/// The section numbers `docs/design.md` has (`## N. Title`).
fn design_sections() -> Vec<u32> {
    let design = fs::read_to_string(root().join("docs/design.md")).unwrap();
    design
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|l| l.split_once('.'))
        .filter_map(|(n, _)| n.parse().ok())
        .collect()
}

/// The numbers cited as `docs/design.md §N` (also `§N–§M`, `§N/§M`) in `text`.
fn cited_sections(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("docs/design.md §") {
        let rest = &text[i + "docs/design.md ".len()..];
        let mut chars = rest.char_indices().peekable();
        // §3, §3–§4, §3/§4
        while let Some((_, '§')) = chars.next() {
            let digits: String =
                std::iter::from_fn(|| chars.next_if(|(_, c)| c.is_ascii_digit()).map(|(_, c)| c))
                    .collect();
            match digits.parse() {
                Ok(n) => out.push(n),
                Err(_) => break,
            }
            if chars.next_if(|(_, c)| *c == '–' || *c == '/').is_none() {
                break;
            }
        }
    }
    out
}

#[test]
fn every_cited_design_section_exists() {
    let sections = design_sections();
    assert!(sections.len() >= 9, "docs/design.md sections: {sections:?}");
    let mut cited = 0;
    for (path, text) in texts() {
        for n in cited_sections(&text) {
            cited += 1;
            assert!(
                sections.contains(&n),
                "{path} cites docs/design.md §{n}, which has no such section"
            );
        }
    }
    assert!(
        cited > 30,
        "only {cited} citations found: is the scan broken?"
    );
}

#[test]
fn every_cited_decision_record_exists() {
    let mut cited = 0;
    for (path, text) in texts() {
        for (i, _) in text.match_indices("docs/decisions/") {
            let name: String = text[i + "docs/decisions/".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
                .collect();
            let name = name.trim_end_matches('.');
            if name.is_empty() {
                continue; // the folder itself
            }
            cited += 1;
            assert!(
                Path::new(&root().join("docs/decisions").join(name)).is_file(),
                "{path} cites docs/decisions/{name}, which does not exist"
            );
        }
    }
    assert!(cited > 0, "no decision record is cited anywhere");
}

#[test]
fn nothing_points_outside_the_repository_or_to_issue_numbers() {
    for (path, text) in texts() {
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let issue_number = lower
                .match_indices("issue ")
                .any(|(i, _)| lower[i + 6..].starts_with(|c: char| c.is_ascii_digit()));
            assert!(
                !line.contains("shared/DESIGN") && !line.contains("DESIGN §") && !issue_number,
                "{path}:{}: cite docs/design.md or say what is meant: {line}",
                n + 1
            );
        }
    }
}

#[test]
fn the_citation_scanner_reads_ranges_and_lists() {
    assert_eq!(
        cited_sections("see docs/design.md §3–§4 and docs/design.md §3/§4, docs/design.md §12."),
        vec![3, 4, 3, 4, 12]
    );
    assert!(cited_sections("docs/design.md, §2").is_empty());
}
