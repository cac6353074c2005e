//! Reading device tags (docs/design.md §2 "Tags and groups"): a device's tag history
//! (`CONFIG` / `TAGS#<id>`), many devices' at once, a per-container [`TagBook`] that keeps
//! them for the layout cache's time, and one tag's index (`TAG#<key>:<value>#<n>`) listed
//! partition after partition from a resumable [`IndexPosition`]. Writing them is
//! `write::tag_change`'s, apart so that a function that only reads tags is not granted the
//! writes (the policy test follows module paths).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use tidemark_schema::keys::{self, TAG_INDEX_PARTITIONS};
use tidemark_schema::{
    DeviceId, EntityKey, Key, Tag, TagHistory, TagHistoryItem, TagIndexItem, Tags, Timestamp,
};

use crate::batch_get::{GetOptions, batch_get};
use crate::read::{QuerySpec, QueryStore, SkRange};
use crate::{Item, StoreError, from_stored};

/// The key of `device`'s tag history.
pub fn history_key(device: &DeviceId) -> Key {
    EntityKey::TagHistory(device.clone()).key()
}

/// The history in a stored item and its version; no item: no tags, version 0.
pub fn history_from_item(item: Option<Item>) -> Result<(TagHistory, u64), StoreError> {
    match item {
        None => Ok((TagHistory::default(), 0)),
        Some(item) => {
            let h: TagHistoryItem = from_stored(item)?;
            Ok((h.epochs, h.version))
        }
    }
}

/// `device`'s tag history and its version (0: none stored), for reading or for replacing it
/// (`write::tag_change::replace_history`; read it `consistent` then).
pub async fn read_history(
    client: &Client,
    table: &str,
    device: &DeviceId,
    consistent: bool,
) -> Result<(TagHistory, u64), StoreError> {
    let options = GetOptions {
        consistent,
        keys_only: false,
    };
    let items = batch_get(client, table, &[history_key(device)], options).await?;
    history_from_item(items.into_iter().next())
}

/// The histories in `items` (tag history items as read) by device, and how many were
/// unreadable (skipped and logged: one bad item must not stop a function). A device asked for
/// and absent has no tags.
pub fn histories_from_items(
    items: impl IntoIterator<Item = Item>,
) -> (HashMap<DeviceId, (TagHistory, u64)>, u64) {
    let mut out = HashMap::new();
    let mut unreadable = 0;
    for item in items {
        let parsed = from_stored::<TagHistoryItem>(item).and_then(|h| {
            match EntityKey::parse(&h.pk, &h.sk) {
                Ok(EntityKey::TagHistory(id)) => Ok((id, h.epochs, h.version)),
                _ => Err(StoreError::Unreadable {
                    key: format!("{}/{}", h.pk, h.sk),
                    message: "not a tag history key".into(),
                }),
            }
        });
        match parsed {
            Ok((id, epochs, version)) => {
                out.insert(id, (epochs, version));
            }
            Err(e) => {
                unreadable += 1;
                tracing::warn!(error = %e, "unreadable tag history skipped");
            }
        }
    }
    (out, unreadable)
}

/// One `BatchGetItem` (100 keys a call) of `devices`' tag histories: those stored, by device,
/// and how many were unreadable.
pub async fn read_histories(
    client: &Client,
    table: &str,
    devices: &[DeviceId],
    consistent: bool,
) -> Result<(HashMap<DeviceId, (TagHistory, u64)>, u64), StoreError> {
    let keys: Vec<Key> = devices.iter().map(history_key).collect();
    let options = GetOptions {
        consistent,
        keys_only: false,
    };
    let items = batch_get(client, table, &keys, options).await?;
    Ok(histories_from_items(items))
}

/// A container's tag histories, each trusted for the readings dated before its read time plus
/// `valid_for`: the lead a tag change is announced by, less the clocks' skew
/// (`LAYOUT_CACHE_SECONDS` + `MAX_FUTURE_SECONDS`; [`tidemark_schema::LayoutLead`]). A change
/// made after a history was read takes effect later than that
/// ([`tidemark_schema::LayoutLead::earliest_change`] adds the skew the two hosts' clocks may
/// disagree by), so the history already holds every change in force at those readings,
/// however late the records carrying them are processed. A batch of readings of the past
/// minutes therefore reads no history it has read before.
#[derive(Debug, Clone, Default)]
pub struct TagBook {
    valid_for: Duration,
    cached: HashMap<DeviceId, (TagHistory, Timestamp)>,
}

impl TagBook {
    pub fn new(valid_for: Duration) -> Self {
        TagBook {
            valid_for,
            cached: HashMap::new(),
        }
    }

    /// The book of a deployment whose tag changes are announced `lead` ahead.
    pub fn for_lead(lead: tidemark_schema::LayoutLead) -> Self {
        TagBook::new(lead.layout_cache + lead.max_future)
    }

    pub fn valid_for(&self) -> Duration {
        self.valid_for
    }

    /// Those of `devices` (each with the latest reading time to attribute, each once) whose
    /// history is not cached, or was read too long before that reading: those to read.
    pub fn stale<'a>(
        &self,
        devices: impl IntoIterator<Item = (&'a DeviceId, Timestamp)>,
    ) -> Vec<DeviceId> {
        let valid_for = i64::try_from(self.valid_for.as_millis()).unwrap_or(i64::MAX);
        let mut out: Vec<DeviceId> = devices
            .into_iter()
            .filter(|(d, latest)| {
                self.cached.get(*d).is_none_or(|(_, loaded)| {
                    latest.epoch_millis() >= loaded.epoch_millis().saturating_add(valid_for)
                })
            })
            .map(|(d, _)| d.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Records one read of `asked`'s histories, started at `loaded` (taken before the read, so
    /// the age is never understated): `items` are the tag history items it found; a device
    /// asked for without one has no tags. Returns how many items were unreadable (their
    /// devices keep what was cached, and are asked again next time).
    pub fn record(&mut self, asked: &[DeviceId], items: Vec<Item>, loaded: Timestamp) -> u64 {
        let (mut found, unreadable) = histories_from_items(items);
        let unreadable_devices = unreadable > 0;
        for d in asked {
            match found.remove(d) {
                Some((h, _)) => {
                    self.cached.insert(d.clone(), (h, loaded));
                }
                // A device whose item could not be read is not taken as untagged.
                None if unreadable_devices => {}
                None => {
                    self.cached
                        .insert(d.clone(), (TagHistory::default(), loaded));
                }
            }
        }
        unreadable
    }

    /// Reads the histories of those of `devices` that are stale for their readings (one
    /// `BatchGetItem`, at `now`); returns how many items were unreadable.
    pub async fn refresh(
        &mut self,
        client: &Client,
        table: &str,
        devices: &[(DeviceId, Timestamp)],
        now: Timestamp,
    ) -> Result<u64, StoreError> {
        let stale = self.stale(devices.iter().map(|(d, t)| (d, *t)));
        if stale.is_empty() {
            return Ok(0);
        }
        let keys: Vec<Key> = stale.iter().map(history_key).collect();
        let items = batch_get(client, table, &keys, GetOptions::default()).await?;
        Ok(self.record(&stale, items, now))
    }

    /// `device`'s history as last read (`None`: never read).
    pub fn history(&self, device: &DeviceId) -> Option<&TagHistory> {
        self.cached.get(device).map(|(h, _)| h)
    }

    /// The tags `device` had at `t` (none when its history was never read).
    pub fn at(&self, device: &DeviceId, t: Timestamp) -> &Tags {
        static NONE: std::sync::OnceLock<Tags> = std::sync::OnceLock::new();
        match self.cached.get(device) {
            Some((h, _)) => h.at(t),
            None => NONE.get_or_init(Tags::empty),
        }
    }
}

/// Where a tag index listing goes on: in partition `partition` (0..16), after the entry
/// whose sort key is `after` (`None`: from the partition's start).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexPosition {
    pub partition: u16,
    pub after: Option<String>,
}

impl IndexPosition {
    /// Whether it names a partition of the index (a cursor may have been tampered with).
    pub fn is_valid(&self) -> bool {
        self.partition < TAG_INDEX_PARTITIONS
            && self
                .after
                .as_deref()
                .is_none_or(|sk| sk.starts_with(keys::DEVICE_PREFIX))
    }
}

/// One page of a tag's members.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IndexPage {
    /// The entries kept, partition after partition, each partition in device ID order.
    pub items: Vec<TagIndexItem>,
    /// Where the next page starts; `None`: the listing is done.
    pub next: Option<IndexPosition>,
    /// Entries skipped because they could not be read (logged).
    pub unreadable: u64,
}

/// Entries one query asks for at most (small items: a page of them stays far under 1 MB).
const MAX_QUERY_ITEMS: usize = 1000;

/// The query of one partition of `tag`'s index.
pub fn index_spec(tag: &Tag, partition: u16) -> QuerySpec {
    QuerySpec::table(
        keys::tag_index_pk(tag, partition),
        SkRange::BeginsWith(keys::DEVICE_PREFIX.to_owned()),
        true,
    )
}

/// Up to `limit` entries of `tag`'s index that `keep` accepts, from `from` (`None`: the
/// start), reading its 16 partitions one after another. Each query asks for at most
/// `limit` entries, so a page without a filter reads no more than it returns (plus one
/// empty query at a partition's end); with a filter, a page stops early once it has
/// evaluated `max_evaluated` entries (its `next` says where to go on), so a filter that keeps
/// few entries cannot make one request read a whole large tag.
pub async fn index_page<S: QueryStore + Sync>(
    store: &S,
    tag: &Tag,
    from: Option<IndexPosition>,
    limit: usize,
    max_evaluated: usize,
    keep: impl Fn(&TagIndexItem) -> bool,
) -> Result<IndexPage, StoreError> {
    let mut pos = from.unwrap_or_default();
    if !pos.is_valid() {
        return Err(StoreError::Request {
            operation: "Query",
            message: "a tag index position outside the index".into(),
        });
    }
    let limit = limit.max(1);
    let max_evaluated = max_evaluated.max(limit);
    let mut page = IndexPage::default();
    let mut evaluated = 0usize;
    loop {
        let spec = index_spec(tag, pos.partition);
        let start = pos
            .after
            .as_ref()
            .and_then(|sk| spec.start_key(std::slice::from_ref(sk)));
        let want = (limit - page.items.len()).min(MAX_QUERY_ITEMS);
        let p = store
            .query(&spec, start, i32::try_from(want).unwrap_or(1))
            .await?;
        let n = p.items.len();
        let mut consumed = 0;
        for item in p.items {
            consumed += 1;
            evaluated += 1;
            pos.after = item
                .get(tidemark_schema::table::attr::SK)
                .and_then(|v| v.as_s().ok())
                .cloned();
            match from_stored::<TagIndexItem>(item) {
                Ok(entry) if keep(&entry) => page.items.push(entry),
                Ok(_) => {}
                Err(e) => {
                    page.unreadable += 1;
                    tracing::warn!(error = %e, "unreadable tag index entry skipped");
                }
            }
            if page.items.len() >= limit || evaluated >= max_evaluated {
                break;
            }
        }
        if consumed == n && p.last_key.is_none() {
            pos = IndexPosition {
                partition: pos.partition + 1,
                after: None,
            };
            if pos.partition >= TAG_INDEX_PARTITIONS {
                return Ok(page);
            }
        }
        if page.items.len() >= limit || evaluated >= max_evaluated {
            page.next = Some(pos);
            return Ok(page);
        }
    }
}

/// The number of tag history changes ever made in the table: the sum of its counts
/// (`CONFIG / #TAG_CHANGES#<n>`, one consistent Query), which only grows. Whoever keeps
/// something made from every tag history (the export's devices table) remakes it when this
/// moved.
pub async fn tag_changes<Q: crate::read::QueryStore + Sync>(q: &Q) -> Result<u64, StoreError> {
    use crate::read::{QuerySpec, SkRange, query_all};
    let spec = QuerySpec {
        consistent: true,
        ..QuerySpec::table(
            tidemark_schema::keys::CONFIG_PK.to_owned(),
            SkRange::BeginsWith(tidemark_schema::keys::TAG_CHANGES_PREFIX.to_owned()),
            true,
        )
    };
    let mut sum = 0u64;
    query_all(q, &spec, 100, |item| {
        sum += item
            .get(tidemark_schema::field::CHANGES)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    })
    .await?;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use tidemark_schema::{DeviceStatus, TagKey, TagValue};

    use super::*;
    use crate::memory::MemTable;

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

    fn dev(i: usize) -> DeviceId {
        DeviceId::new(&format!("dev-{i:03}")).unwrap()
    }

    #[test]
    fn a_history_serves_the_readings_dated_before_its_read_time_plus_the_lead() {
        let mut book = TagBook::new(Duration::from_secs(330));
        let (a, b) = (dev(1), dev(2));
        let t0 = t("2026-04-20T10:00:00Z");
        assert_eq!(
            book.stale([(&a, t0), (&b, t0), (&a, t0)]),
            vec![a.clone(), b.clone()]
        );
        let mut h = TagHistory::default();
        h.change(t0, tags(&[("site", "A")]), t0).unwrap();
        let item = crate::to_item(&TagHistoryItem {
            pk: history_key(&a).pk,
            sk: history_key(&a).sk,
            epochs: h,
            version: 1,
        })
        .unwrap();
        assert_eq!(book.record(&[a.clone(), b.clone()], vec![item], t0), 0);
        assert!(book.at(&a, t0).has(&Tag::parse("site:A").unwrap()));
        assert!(book.at(&b, t0).is_empty(), "no item: no tags");
        assert!(book.history(&b).is_some());
        // However long after the read a batch is processed, readings dated before the read
        // plus the lead need no new read: no change made since can be in force at them.
        let old = t("2026-04-20T09:00:00Z");
        assert!(book.stale([(&a, old), (&b, old)]).is_empty());
        let last = t("2026-04-20T10:05:29.999Z");
        assert!(book.stale([(&a, last), (&b, last)]).is_empty());
        let beyond = t("2026-04-20T10:05:30Z");
        assert_eq!(book.stale([(&a, beyond), (&b, old)]), vec![a.clone()]);
    }

    #[tokio::test]
    async fn an_index_listing_walks_the_partitions_in_order_and_resumes_where_it_stopped() {
        let table = MemTable::new().with_page_cap(3);
        let site_a = Tag::parse("site:A").unwrap();
        let site_b = Tag::parse("site:B").unwrap();
        let mut want = Vec::new();
        for i in 0..60 {
            let (tag, status) = if i % 5 == 0 {
                (&site_b, DeviceStatus::Active)
            } else if i % 3 == 0 {
                (&site_a, DeviceStatus::Inactive)
            } else {
                (&site_a, DeviceStatus::Active)
            };
            let entry = TagIndexItem::new(tag, &dev(i), status, tags(&[("site", "x")]));
            if tag == &site_a {
                want.push((keys::tag_index_partition(&dev(i)), dev(i)));
            }
            table.put_entity(&entry).unwrap();
        }
        want.sort();
        let partitions: std::collections::BTreeSet<u16> = want.iter().map(|w| w.0).collect();
        assert!(partitions.len() > 4, "the devices spread over partitions");
        let mut got = Vec::new();
        let mut pos = None;
        let mut pages = 0;
        loop {
            let page = index_page(&table, &site_a, pos, 7, 1000, |_| true)
                .await
                .unwrap();
            assert!(page.items.len() <= 7);
            got.extend(page.items.iter().map(|e| e.device_id.clone()));
            pages += 1;
            match page.next {
                Some(p) => pos = Some(p),
                None => break,
            }
        }
        let want_ids: Vec<DeviceId> = want.iter().map(|w| w.1.clone()).collect();
        assert_eq!(got, want_ids);
        assert!(pages >= want_ids.len() / 7);

        // A filter keeps only what it accepts; a page that evaluated its bound stops short.
        let inactive = |e: &TagIndexItem| e.status == DeviceStatus::Inactive;
        let mut got = Vec::new();
        let mut pos = None;
        loop {
            let page = index_page(&table, &site_a, pos, 100, 5, inactive)
                .await
                .unwrap();
            got.extend(page.items.into_iter().map(|e| e.device_id));
            match page.next {
                Some(p) => pos = Some(p),
                None => break,
            }
        }
        let inactive_ids: Vec<DeviceId> = want
            .iter()
            .filter(|(_, d)| {
                let i: usize = d.as_str()[4..].parse().unwrap();
                i % 3 == 0
            })
            .map(|w| w.1.clone())
            .collect();
        assert_eq!(got, inactive_ids);

        let unknown = Tag::parse("site:nowhere").unwrap();
        let page = index_page(&table, &unknown, None, 10, 1000, |_| true)
            .await
            .unwrap();
        assert!(page.items.is_empty() && page.next.is_none());
        let outside = IndexPosition {
            partition: TAG_INDEX_PARTITIONS,
            after: None,
        };
        assert!(
            index_page(&table, &site_a, Some(outside), 10, 10, |_| true)
                .await
                .is_err()
        );
    }
}
