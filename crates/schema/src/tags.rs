//! Device tags and the groups they make (docs/design.md §2 "Tags and groups",
//! `docs/decisions/0007-group-rollups.md`).
//!
//! A device carries up to 16 `key:value` tags. A tag is also a group: `site:A` is every device
//! tagged `site` = `A`. Membership is versioned like a layout ([`crate::history`]): a change
//! takes effect at its `from`, announced at least [`crate::LayoutLead::earliest_change`]
//! ahead, so every container that attributes a reading to groups already knows the tags in
//! force at the reading's time, and a move never changes a bucket that has readings.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::ids::{IdError, check};
use crate::time::Timestamp;

/// A tag key: a lowercase letter, then up to 31 of `[a-z0-9_.-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TagKey(String);

/// A tag value: 1–64 of `[A-Za-z0-9_.:/-]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TagValue(String);

impl TagKey {
    pub const MAX_LEN: usize = 32;
    pub const ALLOWED: &'static str = "a-z first, then a-z 0-9 _ . -";
    /// The tag `location.site` also sets (existing clients keep working).
    pub const SITE: &'static str = "site";

    pub fn new(s: &str) -> Result<Self, IdError> {
        check("tag key", s, Self::MAX_LEN, Self::ALLOWED, |i, c| {
            c.is_ascii_lowercase()
                || (i > 0 && (c.is_ascii_digit() || matches!(c, '_' | '.' | '-')))
        })?;
        Ok(TagKey(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TagValue {
    pub const MAX_LEN: usize = 64;
    pub const ALLOWED: &'static str = "A-Z a-z 0-9 _ . : / -";

    pub fn new(s: &str) -> Result<Self, IdError> {
        check("tag value", s, Self::MAX_LEN, Self::ALLOWED, |_, c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '-')
        })?;
        Ok(TagValue(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! string_serde {
    ($name:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
                Self::new(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}
string_serde!(TagKey);
string_serde!(TagValue);

/// One tag, and so one group: `key:value` (`site:A`). Neither part can hold `#`, so a tag is
/// safe in a key; the key cannot hold `:`, so the first `:` splits them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag {
    pub key: TagKey,
    pub value: TagValue,
}

/// Why tags were refused. Each message names the tag and the rule.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TagError {
    #[error("{0}")]
    Id(#[from] IdError),
    #[error("tag {0:?} is not key:value")]
    NotAPair(String),
    #[error("a device has at most {max} tags; got {count}", max = Tags::MAX)]
    TooMany { count: usize },
}

impl Tag {
    pub fn new(key: TagKey, value: TagValue) -> Self {
        Tag { key, value }
    }

    /// `key:value`, split at the first `:` (a value may hold more).
    pub fn parse(s: &str) -> Result<Self, TagError> {
        let (k, v) = s
            .split_once(':')
            .ok_or_else(|| TagError::NotAPair(s.to_owned()))?;
        Ok(Tag {
            key: TagKey::new(k)?,
            value: TagValue::new(v)?,
        })
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key, self.value)
    }
}

impl Serialize for Tag {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Tag::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A device's tags: at most [`Tags::MAX`], one value per key. Stored and returned as a JSON
/// object / DynamoDB map (`{"site":"A","line":"3"}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Tags(BTreeMap<TagKey, TagValue>);

impl Tags {
    pub const MAX: usize = 16;

    pub fn new(map: BTreeMap<TagKey, TagValue>) -> Result<Self, TagError> {
        if map.len() > Self::MAX {
            return Err(TagError::TooMany { count: map.len() });
        }
        Ok(Tags(map))
    }

    pub fn empty() -> Self {
        Tags::default()
    }

    pub fn get(&self, key: &TagKey) -> Option<&TagValue> {
        self.0.get(key)
    }

    pub fn has(&self, tag: &Tag) -> bool {
        self.0.get(&tag.key) == Some(&tag.value)
    }

    /// Every tag in `all` is held (the `tag=` filters of a list: all must match).
    pub fn has_all(&self, all: &[Tag]) -> bool {
        all.iter().all(|t| self.has(t))
    }

    pub fn iter(&self) -> impl Iterator<Item = Tag> + '_ {
        self.0.iter().map(|(k, v)| Tag::new(k.clone(), v.clone()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_map(&self) -> &BTreeMap<TagKey, TagValue> {
        &self.0
    }

    /// The groups these tags put a device in, of the keys that keep group rollups.
    pub fn groups<'a>(&'a self, keys: &'a [TagKey]) -> impl Iterator<Item = Tag> + 'a {
        self.iter().filter(|t| keys.contains(&t.key))
    }
}

impl<'de> Deserialize<'de> for Tags {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<TagKey, TagValue>::deserialize(d)?;
        Tags::new(map).map_err(serde::de::Error::custom)
    }
}

/// Tags from `from` on (until the next epoch's `from`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagEpoch {
    pub from: Timestamp,
    pub tags: Tags,
}

/// A device's tags over time, oldest first; before the first epoch a device has no tags.
///
/// At most [`TagHistory::MAX_EPOCHS`] epochs are kept (16 tags of the longest form are about
/// 1.6 KB an epoch, so the item stays far under 400 KB): past that, the oldest epoch is
/// dropped and readings older than the new first epoch count in no group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TagHistory {
    epochs: Vec<TagEpoch>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TagHistoryError {
    #[error(
        "a tag change must take effect at {earliest} or later (functions may already be \
         attributing readings up to then to the current tags); got {from}"
    )]
    TooSoon {
        earliest: Timestamp,
        from: Timestamp,
    },
}

impl TagHistory {
    pub const MAX_EPOCHS: usize = 64;

    /// A history from stored epochs (sorted here, so a hand-edited item still reads).
    pub fn from_epochs(mut epochs: Vec<TagEpoch>) -> Self {
        epochs.sort_by_key(|e| e.from);
        TagHistory { epochs }
    }

    pub fn epochs(&self) -> &[TagEpoch] {
        &self.epochs
    }

    /// The tags in force at `t` (none before the first epoch).
    pub fn at(&self, t: Timestamp) -> &Tags {
        static EMPTY: std::sync::OnceLock<Tags> = std::sync::OnceLock::new();
        let i = self.epochs.partition_point(|e| e.from <= t);
        match i {
            0 => EMPTY.get_or_init(Tags::empty),
            i => &self.epochs[i - 1].tags,
        }
    }

    /// The last tags declared (in force now, or announced to be).
    pub fn latest(&self) -> Option<&TagEpoch> {
        self.epochs.last()
    }

    /// Sets `tags` from `from` on. `from` must be at or after `earliest`
    /// ([`crate::LayoutLead::earliest_change`] of the request's clock): epochs starting at or
    /// after `from` were only announced and are replaced. Setting the tags already in force
    /// then changes nothing (`Ok(false)`).
    pub fn change(
        &mut self,
        from: Timestamp,
        tags: Tags,
        earliest: Timestamp,
    ) -> Result<bool, TagHistoryError> {
        if from < earliest {
            return Err(TagHistoryError::TooSoon { earliest, from });
        }
        let keep = self.epochs.partition_point(|e| e.from < from);
        let before = self.epochs[..keep].last().map(|e| e.tags.clone());
        if before.clone().unwrap_or_default() == tags && keep == self.epochs.len() {
            return Ok(false);
        }
        self.epochs.truncate(keep);
        if before.as_ref() != Some(&tags) {
            self.epochs.push(TagEpoch { from, tags });
        }
        while self.epochs.len() > Self::MAX_EPOCHS {
            self.epochs.remove(0);
        }
        Ok(true)
    }

    /// The spans of `[from, to)` and the tags in force over each, in time order: a range cut
    /// where membership changes (an hour a device moved in is two spans).
    pub fn spans(&self, from: Timestamp, to: Timestamp) -> Vec<(Timestamp, Timestamp, &Tags)> {
        let mut out = Vec::new();
        let mut start = from;
        while start < to {
            let next = self
                .epochs
                .iter()
                .map(|e| e.from)
                .find(|&f| f > start)
                .map_or(to, |f| f.min(to));
            out.push((start, next, self.at(start)));
            start = next;
        }
        out
    }

    /// The groups (tags of `keys`, the keys that keep group rollups) a reading at `t` counts
    /// in: the one rule the rollups role and the export attribute readings by.
    pub fn groups_at(&self, t: Timestamp, keys: &[TagKey]) -> Vec<Tag> {
        self.at(t).groups(keys).collect()
    }

    /// Whether the tags change inside `[from, to)` (a group rollup of that range must then
    /// attribute each reading by its own time).
    pub fn changes_within(&self, from: Timestamp, to: Timestamp) -> bool {
        self.epochs.iter().any(|e| e.from > from && e.from < to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        Tags::new(
            pairs
                .iter()
                .map(|(k, v)| (TagKey::new(k).unwrap(), TagValue::new(v).unwrap()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn a_tag_is_key_colon_value_split_at_the_first_colon() {
        let tag = Tag::parse("zone:eu:west/2").unwrap();
        assert_eq!(tag.key.as_str(), "zone");
        assert_eq!(tag.value.as_str(), "eu:west/2");
        assert_eq!(tag.to_string(), "zone:eu:west/2");
    }

    #[test]
    fn malformed_tags_are_refused_naming_the_rule() {
        assert!(matches!(Tag::parse("site"), Err(TagError::NotAPair(_))));
        assert!(Tag::parse("Site:A").is_err(), "keys are lowercase");
        assert!(Tag::parse("1site:A").is_err(), "keys start with a letter");
        assert!(Tag::parse("site:").is_err(), "values are not empty");
        assert!(Tag::parse("site:A#B").is_err(), "no # in a value");
        assert!(Tag::parse(&format!("{}:A", "k".repeat(33))).is_err());
        assert!(Tag::parse(&format!("k:{}", "v".repeat(65))).is_err());
        assert!(Tag::parse(&format!("{}:{}", "k".repeat(32), "v".repeat(64))).is_ok());
    }

    #[test]
    fn at_most_sixteen_tags() {
        let map = |n: usize| {
            (0..n)
                .map(|i| {
                    (
                        TagKey::new(&format!("k{i}")).unwrap(),
                        TagValue::new("v").unwrap(),
                    )
                })
                .collect::<BTreeMap<_, _>>()
        };
        assert!(Tags::new(map(16)).is_ok());
        assert_eq!(Tags::new(map(17)), Err(TagError::TooMany { count: 17 }));
        let json = serde_json::to_value(map(17)).unwrap();
        assert!(serde_json::from_value::<Tags>(json).is_err());
    }

    #[test]
    fn a_move_at_ten_counts_in_a_before_and_in_b_after() {
        let mut h = TagHistory::default();
        let early = t("2026-04-20T00:00:00Z");
        assert!(h.change(early, tags(&[("site", "A")]), early).unwrap());
        let ten = t("2026-04-20T10:00:00Z");
        assert!(h.change(ten, tags(&[("site", "B")]), ten).unwrap());
        let a = Tag::parse("site:A").unwrap();
        let b = Tag::parse("site:B").unwrap();
        assert!(h.at(t("2026-04-20T09:59:59.999999Z")).has(&a));
        assert!(h.at(ten).has(&b));
        assert!(h.at(t("2026-04-19T23:00:00Z")).is_empty());
        let spans = h.spans(t("2026-04-20T09:30:00Z"), t("2026-04-20T10:30:00Z"));
        assert_eq!(spans.len(), 2);
        assert!(spans[0].2.has(&a) && spans[1].2.has(&b));
        assert_eq!(spans[0].1, ten);
        assert!(h.changes_within(t("2026-04-20T09:00:00Z"), t("2026-04-20T11:00:00Z")));
        assert!(!h.changes_within(ten, t("2026-04-20T11:00:00Z")));
    }

    #[test]
    fn a_change_before_the_earliest_honourable_moment_is_refused() {
        let mut h = TagHistory::default();
        let now = t("2026-04-20T10:00:00Z");
        let earliest = t("2026-04-20T10:05:36Z");
        assert!(matches!(
            h.change(now, tags(&[("site", "A")]), earliest),
            Err(TagHistoryError::TooSoon { .. })
        ));
        assert!(h.epochs().is_empty());
    }

    #[test]
    fn an_announced_change_is_replaced_and_a_no_op_changes_nothing() {
        let mut h = TagHistory::default();
        let t0 = t("2026-04-20T10:00:00Z");
        h.change(t0, tags(&[("site", "A")]), t0).unwrap();
        let t1 = t("2026-04-20T11:00:00Z");
        h.change(t1, tags(&[("site", "B")]), t0).unwrap();
        // Announced for 11:00, replaced before it took effect by one from 10:30.
        let t2 = t("2026-04-20T10:30:00Z");
        h.change(t2, tags(&[("site", "C")]), t0).unwrap();
        assert_eq!(h.epochs().len(), 2);
        assert!(h.at(t1).has(&Tag::parse("site:C").unwrap()));
        assert!(!h.change(t1, tags(&[("site", "C")]), t0).unwrap());
        assert_eq!(h.epochs().len(), 2);
    }

    #[test]
    fn the_history_keeps_at_most_max_epochs() {
        let mut h = TagHistory::default();
        for i in 0..(TagHistory::MAX_EPOCHS + 5) {
            let at = Timestamp::from_epoch_millis(1_000 * (i as i64 + 1)).unwrap();
            h.change(at, tags(&[("n", &i.to_string())]), at).unwrap();
        }
        assert_eq!(h.epochs().len(), TagHistory::MAX_EPOCHS);
        assert_eq!(h.epochs()[0].tags, tags(&[("n", "5")]));
    }
}
