//! One table of settings (`tidemark_store::settings`): each deployed function reads exactly
//! its rows, `template.yaml` declares each of them for it, and the settings table of
//! `docs/operations.md` shows the same rows. A variable added in one place and not the others
//! fails here.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_yaml::Value;
use tidemark_store::settings::{Function, ReadThrough, SETTINGS, read_by, setting};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn template() -> Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("read template");
    serde_yaml::from_str(&text).expect("template.yaml is YAML")
}

/// What `f`'s configuration reads, recorded by calling its `from_lookup` with the values it
/// requires and those that make it read everything it can (the alerts role, JWT sign-in).
fn reads(f: Function) -> BTreeSet<String> {
    let seen = RefCell::new(BTreeSet::new());
    let lookup = |k: &str| {
        // A renamed setting is read under its old name too (with a warning when set): that
        // read is the setting's.
        let name = setting(k).map_or(k, |s| s.name);
        seen.borrow_mut().insert(name.to_owned());
        match (f, k) {
            (_, "CURSOR_SECRET_ARN") => Some("arn:aws:secretsmanager:r:1:secret:x".to_owned()),
            (Function::Alerts, "AGGREGATOR_ROLE") => Some("alerts".to_owned()),
            (Function::Alerts, "EVENT_BUS_NAME") => Some("bus".to_owned()),
            (Function::Api, "UI_AUTH") => Some("jwt".to_owned()),
            (Function::Watchdog, "STREAM_NAME") => Some("readings".to_owned()),
            (Function::Exporter, "EXPORT_BUCKET") => Some("lake".to_owned()),
            _ => None,
        }
    };
    let ok = match f {
        Function::Ingest => tidemark_ingest::IngestConfig::from_lookup(lookup).is_ok(),
        Function::Rollups | Function::Alerts => {
            tidemark_aggregator::AggregatorConfig::from_lookup(lookup).is_ok()
        }
        Function::Api => tidemark_api::ApiConfig::from_lookup(lookup).is_ok(),
        Function::Watchdog => tidemark_watchdog::WatchdogConfig::from_lookup(lookup).is_ok(),
        Function::Exporter => {
            tidemark_exporter::config::ExporterConfig::from_lookup(lookup).is_ok()
        }
    };
    assert!(
        ok,
        "{f:?}: a configuration with only its required values is valid"
    );
    seen.into_inner()
}

/// The names of `f`'s settings from `sources`.
fn names(f: Function, sources: &[ReadThrough]) -> BTreeSet<String> {
    read_by(f)
        .filter(|s| sources.contains(&s.read_through))
        .map(|s| s.name.to_owned())
        .collect()
}

fn variables(v: &Value) -> BTreeSet<String> {
    v.as_mapping()
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn each_function_reads_exactly_its_settings() {
    for f in Function::ALL {
        assert_eq!(
            reads(f),
            names(f, &[ReadThrough::Config, ReadThrough::Sdk]),
            "{f:?}"
        );
    }
}

#[test]
fn the_template_declares_each_functions_settings_and_no_other() {
    let t = template();
    let globals = variables(&t["Globals"]["Function"]["Environment"]["Variables"]);
    let mut anyone = BTreeSet::new();
    for f in Function::ALL {
        let own =
            variables(&t["Resources"][f.resource()]["Properties"]["Environment"]["Variables"]);
        let wanted = names(f, &[ReadThrough::Config, ReadThrough::Client]);
        let declared: BTreeSet<_> = globals.union(&own).cloned().collect();
        let missing: Vec<_> = wanted.difference(&declared).collect();
        assert!(
            missing.is_empty(),
            "{}: {missing:?} not declared",
            f.resource()
        );
        let extra: Vec<_> = own.difference(&wanted).collect();
        assert!(
            extra.is_empty(),
            "{}: {extra:?} declared, never read",
            f.resource()
        );
        anyone.extend(wanted);
    }
    let unread: Vec<_> = globals.difference(&anyone).collect();
    assert!(
        unread.is_empty(),
        "Globals declare {unread:?}, read by no function"
    );
}

/// The settings table of `docs/operations.md`, as it should read.
fn table_rows() -> Vec<String> {
    SETTINGS
        .iter()
        .map(|s| {
            let by: Vec<_> = s.read_by.iter().map(|f| f.label()).collect();
            let formerly = s
                .old_name
                .map(|old| format!(" (formerly `{old}`, still read with a deprecation warning)"))
                .unwrap_or_default();
            format!(
                "| `{}` | {} | {} | {}{formerly} |",
                s.name,
                s.default,
                by.join(", "),
                s.meaning
            )
        })
        .collect()
}

#[test]
fn the_operations_guide_shows_the_settings_table() {
    let doc = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let section = doc
        .split("\n## Settings\n")
        .nth(1)
        .expect("docs/operations.md has a '## Settings' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let rows: Vec<String> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(str::to_owned)
        .collect();
    let want = table_rows();
    assert_eq!(
        rows,
        want,
        "docs/operations.md's settings table differs from tidemark_store::settings; it should read:\n{}",
        want.join("\n")
    );
}
