//! Where each write of the in-memory engine lands and what DynamoDB would bill for it: the
//! table's partition key, and each index's partition keys the write puts an entry into or
//! deletes one from. A scale simulation (`make bench`, part `scale`) drives the real roles
//! over [`crate::memory::MemTable`] with the log on, and adds the entries up per key and
//! simulated second: DynamoDB throttles a partition key past 1,000 write units a second,
//! index keys included, so the hottest key of each is the figure that matters.
//!
//! Index writes follow DynamoDB's rules for the table's definition
//! ([`tidemark_schema::TABLE`]): an item whose index key changes deletes its old entry and
//! puts a new one; one whose key stays writes the entry again only when a projected
//! attribute changed (`KEYS_ONLY`: never). Units are whole kilobytes of the larger of the
//! old and new item (the table) or of the projected entry (an index).

use tidemark_schema::TABLE;
use tidemark_schema::table::{IndexDefinition, attr};

use crate::Item;
use crate::limits::item_size;

/// One write to one partition key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyWrite {
    /// `None`: the table; `Some(name)`: that index.
    pub index: Option<&'static str>,
    pub pk: String,
    pub units: u64,
}

fn units(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(1024).max(1)
}

fn text<'a>(item: &'a Item, a: &str) -> Option<&'a str> {
    item.get(a).and_then(|v| v.as_s().ok()).map(String::as_str)
}

/// The index's key of `item`, when it has an entry in the index.
fn index_key<'a>(item: &'a Item, gsi: &IndexDefinition) -> Option<(&'a str, &'a str)> {
    Some((
        text(item, gsi.partition_key.name)?,
        text(item, gsi.sort_key.name)?,
    ))
}

/// The bytes of `item`'s entry in `gsi`: the index's and the table's keys, and what it
/// projects.
fn projected_bytes(item: &Item, gsi: &IndexDefinition) -> usize {
    let keys = [
        attr::PK,
        attr::SK,
        gsi.partition_key.name,
        gsi.sort_key.name,
    ];
    let entry: Item = item
        .iter()
        .filter(|(k, _)| {
            keys.contains(&k.as_str())
                || gsi.projection == "ALL"
                || (gsi.projection == "INCLUDE" && gsi.non_key_attributes.contains(&k.as_str()))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    item_size(&entry)
}

/// Whether a projected attribute differs between the two images.
fn projection_changed(old: &Item, new: &Item, gsi: &IndexDefinition) -> bool {
    let projected: Vec<&str> = match gsi.projection {
        "ALL" => old.keys().chain(new.keys()).map(String::as_str).collect(),
        "INCLUDE" => gsi.non_key_attributes.to_vec(),
        _ => Vec::new(),
    };
    projected.into_iter().any(|a| old.get(a) != new.get(a))
}

/// The writes DynamoDB makes for replacing `old` by `new` (`None`: absent) in the table
/// and its indexes; nothing when both are absent.
pub fn writes_of(old: Option<&Item>, new: Option<&Item>) -> Vec<KeyWrite> {
    let Some(pk) = new.or(old).and_then(|i| text(i, attr::PK)) else {
        return Vec::new();
    };
    let bytes = old.map_or(0, item_size).max(new.map_or(0, item_size));
    let mut out = vec![KeyWrite {
        index: None,
        pk: pk.to_owned(),
        units: units(bytes),
    }];
    for gsi in TABLE.global_secondary_indexes {
        let before = old.and_then(|i| index_key(i, gsi));
        let after = new.and_then(|i| index_key(i, gsi));
        let entry = |item: &Item, pk: &str| KeyWrite {
            index: Some(gsi.name),
            pk: pk.to_owned(),
            units: units(projected_bytes(item, gsi)),
        };
        match (old, before, new, after) {
            (Some(o), Some(b), Some(n), Some(a)) if a == b => {
                if projection_changed(o, n, gsi) {
                    out.push(entry(n, a.0));
                }
            }
            _ => {
                if let (Some(o), Some(b)) = (old, before) {
                    out.push(entry(o, b.0));
                }
                if let (Some(n), Some(a)) = (new, after) {
                    out.push(entry(n, a.0));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;

    fn item(pairs: &[(&str, &str)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), AttributeValue::S((*v).to_owned())))
            .collect()
    }

    fn on(writes: &[KeyWrite], index: Option<&str>) -> Vec<String> {
        writes
            .iter()
            .filter(|w| w.index == index)
            .map(|w| w.pk.clone())
            .collect()
    }

    #[test]
    fn a_moved_index_key_is_a_delete_and_a_put_and_a_kept_one_costs_nothing_keys_only() {
        let old = item(&[
            ("pk", "D"),
            ("sk", "#M"),
            ("gsi2pk", "W#1"),
            ("gsi2sk", "a"),
        ]);
        let moved = item(&[
            ("pk", "D"),
            ("sk", "#M"),
            ("gsi2pk", "W#2"),
            ("gsi2sk", "b"),
        ]);
        let w = writes_of(Some(&old), Some(&moved));
        assert_eq!(on(&w, None), ["D"]);
        assert_eq!(on(&w, Some("GSI2")), ["W#1", "W#2"]);
        let touched = item(&[
            ("pk", "D"),
            ("sk", "#M"),
            ("gsi2pk", "W#1"),
            ("gsi2sk", "a"),
            ("x", "1"),
        ]);
        assert!(on(&writes_of(Some(&old), Some(&touched)), Some("GSI2")).is_empty());
    }

    #[test]
    fn an_included_attribute_that_changes_rewrites_the_entry_under_the_same_key() {
        let old = item(&[
            ("pk", "D"),
            ("sk", "A#1"),
            ("gsi1pk", "SEV#w"),
            ("gsi1sk", "1"),
        ]);
        let mut new = old.clone();
        new.insert("lastBreachAt".into(), AttributeValue::S("t".into()));
        assert_eq!(
            on(&writes_of(Some(&old), Some(&new)), Some("GSI1")),
            ["SEV#w"]
        );
        let mut other = old.clone();
        other.insert("notProjected".into(), AttributeValue::S("t".into()));
        assert!(on(&writes_of(Some(&old), Some(&other)), Some("GSI1")).is_empty());
    }

    #[test]
    fn a_table_with_the_log_logs_its_puts_and_deletes_and_one_without_logs_nothing() {
        use crate::memory::MemTable;
        let i = item(&[
            ("pk", "D"),
            ("sk", "#M"),
            ("gsi2pk", "W#1"),
            ("gsi2sk", "a"),
        ]);
        let logged = MemTable::new().with_write_log();
        logged.put(i.clone()).unwrap();
        MemTable::remove(&mut logged.lock(), &("D".into(), "#M".into()));
        let w = logged.take_writes();
        assert_eq!(on(&w, None), ["D", "D"]);
        assert_eq!(on(&w, Some("GSI2")), ["W#1", "W#1"]);
        assert!(logged.take_writes().is_empty(), "taken once");
        let plain = MemTable::new();
        plain.put(i).unwrap();
        assert!(plain.take_writes().is_empty());
    }

    #[test]
    fn a_delete_removes_the_entries_and_units_are_whole_kilobytes_of_the_larger_image() {
        let old = item(&[
            ("pk", "D"),
            ("sk", "#M"),
            ("gsi2pk", "W#1"),
            ("gsi2sk", "a"),
        ]);
        let w = writes_of(Some(&old), None);
        assert_eq!(on(&w, Some("GSI2")), ["W#1"]);
        let big = item(&[("pk", "D"), ("sk", "#M"), ("blob", &"x".repeat(3000))]);
        assert_eq!(writes_of(Some(&old), Some(&big))[0].units, 3);
        assert!(writes_of(None, None).is_empty());
    }
}
