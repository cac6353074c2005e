//! `tidemark-admin rebuild`: a device's hourly and daily rollups recomputed exactly from its
//! raw readings, while the pipeline runs.
//!
//! Since the aggregator writes a closed hour only as the recomputation of its stored readings
//! (docs/design.md §5), a closed bucket is rebuilt the same way: from the table, read strongly
//! consistent after the bucket's item, on that item's version. An open bucket is left a
//! placeholder. The fence protocol below predates that and now only shapes the content of
//! open buckets, which readers do not read; it is kept until rebuild is reduced to the
//! aggregator's close.
//!
//! The table is ahead of the aggregator: it already holds readings whose stream records the
//! aggregator has not applied. "Recompute from the table and keep the watermark" would count
//! those twice; "recompute and set the watermark to now" would lose the changes in flight. So
//! the recomputation is pinned to a position in each source partition's stream order:
//!
//! 1. iterators at LATEST on every shard of the table's stream;
//! 2. per source partition `P` of the device (its partitions over the range): write a
//!    fence item (`#FENCE`) in `P` and read the stream until its record appears: `s0(P)`;
//! 3. read the raw readings of the whole days (strongly consistent, every page), layout
//!    epoch by layout epoch: single items, and packed slot parts decoded and kept within
//!    their epoch (an unreadable item is skipped, logged and counted);
//! 4. a second fence per `P`: `s1(P)`. The read reflects every record of `P` up to `s0` and
//!    none after `s1`; [`crate::window::readings_as_of`] turns it into the readings exactly as
//!    of `s0`;
//! 5. per bucket: read the aggregate item (version `v`; `w(P)` the furthest it got in `P`, its
//!    floor or its newest per-item mark); roll the readings forward to `max(s0, w)` (reading
//!    the stream further if `w > s1`), write the recomputed item with the floor `max(s0, w)`
//!    and no marks on the condition `version = v`; on a conflict (the aggregator wrote in
//!    between) read it again and redo this step.
//!
//! A bucket whose rollup is paged (the aggregator's [`tidemark_aggregator::pages`]) is
//! rewritten page by page with the same protocol: each metric stays in its page (emptied to
//! count 0 if no reading has it any more), metrics no page holds are placed as the
//! aggregator places new ones, every page takes the watermarks `max(s0, w)` (`w` the
//! furthest any page got), and the puts go in order, all read again on a lost race.
//!
//! The aggregator then applies exactly the records after the new floor. This relies on each
//! source partition's records reaching the stream in one shard's order (a fence marks a
//! position in one shard): a rebuild while a partition is split over two child shards is not
//! exact (docs/decisions/0002-exactly-once-rollups.md). Whole days are
//! rebuilt (a daily rollup needs all its hours). The device item (`latest`, `lastSeenAt`) and
//! alerts are left alone: they belong to the aggregator's alerts role, which derives alert
//! states again from the stored readings whenever they could change; the API's latest readings
//! come from the reading partitions, not from the device item. Readings TTL has already
//! deleted are not in the table any more, so rebuilding a day past retention drops them.

use std::collections::{BTreeMap, BTreeSet};

use tidemark_aggregator::DynamoStore;
use tidemark_aggregator::combine::BucketSummary;
use tidemark_aggregator::pages::{self, PagePut, Pages};
use tidemark_aggregator::records::cmp_seq;
use tidemark_aggregator::store::{AggregateStore, DeviceStore, ReadingStore, Written};
use tidemark_schema::{
    AggregateItem, Bucket, Day, DeviceId, Period, Timestamp, bucket_is_open, keys,
};
use tidemark_streams::DynamoDbStreamSource;

use crate::AdminError;
use crate::stream::{StreamCursor, remove_fence};
use crate::window::{Marks, Readings, readings_as_of};

/// Most days one rebuild covers (a guard against a mistyped range).
pub const MAX_DAYS: i32 = 62;

/// What to rebuild: every hourly and daily bucket of the days `from..=to` touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    pub device: DeviceId,
    pub from: Timestamp,
    pub to: Timestamp,
}

impl Rebuild {
    /// The days covered, checked.
    pub fn days(&self) -> Result<Vec<Day>, AdminError> {
        let (first, last) = (self.from.day(), self.to.day());
        if last < first {
            return Err(AdminError::Input("--to is before --from".into()));
        }
        let n = last.days_since_epoch() - first.days_since_epoch() + 1;
        if n > MAX_DAYS {
            return Err(AdminError::Input(format!(
                "{n} days asked for; rebuild at most {MAX_DAYS} at a time"
            )));
        }
        let mut days = vec![first];
        while let Some(next) = days.last().and_then(|d| d.next()).filter(|d| *d <= last) {
            days.push(next);
        }
        Ok(days)
    }
}

/// What a rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildReport {
    /// Source partitions fenced (the device's partitions over the days).
    pub partitions: usize,
    /// Raw readings read.
    pub readings: usize,
    /// The device has `percentiles: true`: the rollups written keep quantile sketches.
    pub sketched: bool,
    /// Aggregate items written.
    pub written: usize,
    /// Writes that lost a race with the aggregator and were redone.
    pub conflicts: usize,
    /// Of the buckets written, hours and days still open: left placeholders (readers take
    /// them from their readings and hours; the rollups role writes them when they close).
    pub left_open: usize,
    /// Items (single readings, slot parts) and slot part stream records that do not parse:
    /// skipped and logged with their key; the rebuilt rollups leave their readings out.
    pub unreadable: u64,
}

/// Rebuilds rollups in one table.
pub struct Rebuilder {
    ddb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    table: String,
    store: DynamoStore,
    /// [`pages::PAGE_BYTES`] except in tests of paged buckets.
    pub page_bytes: usize,
}

impl Rebuilder {
    pub fn new(
        ddb: aws_sdk_dynamodb::Client,
        streams: aws_sdk_dynamodbstreams::Client,
        table: impl Into<String>,
    ) -> Self {
        let table = table.into();
        Rebuilder {
            store: DynamoStore::new(ddb.clone(), table.clone()),
            ddb,
            streams,
            table,
            page_bytes: pages::PAGE_BYTES,
        }
    }

    pub async fn rebuild(&self, req: &Rebuild) -> Result<RebuildReport, AdminError> {
        let days = req.days()?;
        let (Some(first), Some(last)) = (days.first(), days.last()) else {
            return Ok(RebuildReport::default());
        };
        let start = first.start();
        let end = Bucket::Daily(*last).end_exclusive();
        let d = &req.device;
        // The device's rollups keep quantile sketches, as the rollups role writes them.
        let sketched = self.store.keeps_sketches(d).await?;
        let partitions: BTreeSet<String> = self
            .store
            .layout_history(d)
            .await?
            .partitions_over(start, end)
            .into_iter()
            .map(|s| keys::reading_pk(d, s))
            .collect();

        let source =
            DynamoDbStreamSource::for_table(&self.ddb, self.streams.clone(), &self.table).await?;
        let mut cursor = StreamCursor::open(source, partitions.clone()).await?;
        let mut s0 = BTreeMap::new();
        for p in &partitions {
            s0.insert(p.clone(), cursor.fence(&self.ddb, &self.table, p).await?);
        }
        // Single items and packed slot parts, epoch by epoch (unreadable ones skipped).
        let mut read = Readings::new();
        let walked = self
            .store
            .walk_readings(d, start, end, false, None, |at, m| {
                if at < end {
                    read.insert(at, m);
                }
            })
            .await?;
        let mut s1 = BTreeMap::new();
        for p in &partitions {
            s1.insert(p.clone(), cursor.fence(&self.ddb, &self.table, p).await?);
        }

        let mut report = RebuildReport {
            partitions: partitions.len(),
            readings: read.len(),
            sketched,
            unreadable: walked.unreadable,
            ..RebuildReport::default()
        };
        for bucket in buckets(&days) {
            let key = AggregateItem::key_for(d, bucket);
            let in_bucket: Readings = read
                .range(bucket.start()..bucket.end_exclusive())
                .map(|(t, m)| (*t, m.clone()))
                .collect();
            loop {
                let page0 = self
                    .store
                    .get_aggregates(std::slice::from_ref(&key))
                    .await?
                    .remove(&key);
                let overflow = if page0.as_ref().is_some_and(|p| p.sealed) {
                    self.store.aggregate_pages(d, bucket).await?
                } else {
                    Vec::new()
                };
                let pages = Pages::of(page0, overflow);
                let current = pages.pages.first().map(|(_, p)| p);
                let mut marks = BTreeMap::new();
                for p in &partitions {
                    // The furthest any page got (its floor or its newest mark): every page
                    // is rewritten as of it.
                    let w = pages
                        .pages
                        .iter()
                        .flat_map(|(_, page)| {
                            page.applied
                                .get(p)
                                .map(String::as_str)
                                .into_iter()
                                .chain(page.marks.seqs(p))
                        })
                        .max_by(|a, b| cmp_seq(a, b));
                    let upto = match w {
                        Some(w) if cmp_seq(w, &s0[p]).is_gt() => {
                            if cmp_seq(w, &s1[p]).is_gt() {
                                cursor.reach(p, w).await?;
                            }
                            w.to_owned()
                        }
                        _ => s0[p].clone(),
                    };
                    marks.insert(
                        p.clone(),
                        Marks {
                            s0: s0[p].clone(),
                            s1: s1[p].clone(),
                            upto,
                        },
                    );
                }
                let records: Vec<_> = cursor
                    .records
                    .iter()
                    .filter(|r| bucket.contains(r.at))
                    .cloned()
                    .collect();
                // A closed bucket is what the table holds, read strongly consistent after
                // the item: the aggregator recomputes a closed hour from the table on every
                // record it gets, so a record it applied before this read is in it, and one
                // after it makes the aggregator recompute again (docs/design.md §5). Only an
                // open bucket (a placeholder, its content unread) keeps the readings as of
                // the fences.
                let readings = if bucket_is_open(bucket, Timestamp::now()) {
                    readings_as_of(in_bucket.clone(), &records, &marks)
                } else {
                    let last = bucket.end_exclusive().pred().unwrap_or(bucket.start());
                    let mut fresh = Readings::new();
                    for (at, m) in self.store.readings_between(d, bucket.start(), last).await? {
                        fresh.entry(at).or_default().extend(m);
                    }
                    fresh
                };
                let single = match pages.pages.as_slice() {
                    [] => true,
                    [(0, p)] => !p.sealed,
                    _ => false,
                };
                let whole = if single {
                    match rebuilt(current, &key, &readings, &marks, sketched) {
                        None => break,
                        Some(item) if pages::size(&item)? <= self.page_bytes => Some(item),
                        Some(_) => None,
                    }
                } else {
                    None
                };
                let puts = match whole {
                    Some(item) => vec![PagePut {
                        number: 0,
                        expected: current.map(|c| c.version),
                        item,
                        added: Default::default(),
                    }],
                    None => {
                        let marks = marks.iter().map(|(p, m)| (p.clone(), m.upto.clone()));
                        pages::rebuild(
                            d,
                            bucket,
                            &pages,
                            &pages::recomputed(summary(&readings, sketched)),
                            &marks.collect(),
                            self.page_bytes,
                        )?
                    }
                };
                // A bucket still open stays a placeholder (docs/design.md §5): readers take
                // an open hour from its readings and sum an open day from its hours, and the
                // rollups role writes it when it closes, as usual.
                let mut puts = puts;
                let open = bucket_is_open(bucket, Timestamp::now());
                if open {
                    for put in puts.iter_mut().filter(|p| p.number == 0) {
                        put.item.open = true;
                    }
                }
                // In order (a seal before the pages after it); a lost race: read again.
                let mut lost = false;
                for put in &puts {
                    match self.store.put_aggregate(&put.item, put.expected).await? {
                        Written::Ok { .. } => report.written += 1,
                        Written::Conflict => {
                            lost = true;
                            break;
                        }
                    }
                }
                if !lost {
                    report.left_open += usize::from(open);
                    break;
                }
                report.conflicts += 1;
            }
        }
        for p in &partitions {
            remove_fence(&self.ddb, &self.table, p).await?;
        }
        report.unreadable += cursor.unreadable;
        Ok(report)
    }
}

/// Every hourly bucket of the days, then the days themselves.
fn buckets(days: &[Day]) -> Vec<Bucket> {
    let mut out = Vec::new();
    for day in days {
        let mut h = day.start();
        for _ in 0..24 {
            out.push(Period::Hourly.bucket(h));
            h = h.plus_millis(3_600_000).unwrap_or(Timestamp::MAX);
        }
        out.push(Bucket::Daily(*day));
    }
    out
}

/// `readings` folded as the rollups role folds a closed hour's (sketched for a device with
/// `percentiles: true`).
fn summary(readings: &Readings, sketched: bool) -> BucketSummary {
    let mut s = BucketSummary::new(sketched);
    for (at, values) in readings {
        s.add(*at, values);
    }
    s
}

/// The aggregate item holding `readings`, with the watermarks of `marks` (other partitions'
/// watermarks kept); `None` when there is nothing to write (no readings and no item).
pub fn rebuilt(
    current: Option<&AggregateItem>,
    key: &tidemark_schema::Key,
    readings: &Readings,
    marks: &BTreeMap<String, Marks>,
    sketched: bool,
) -> Option<AggregateItem> {
    if readings.is_empty() && current.is_none() {
        return None;
    }
    let metrics = summary(readings, sketched).stats;
    let mut applied = current.map(|c| c.applied.clone()).unwrap_or_default();
    for (p, m) in marks {
        applied.insert(p.clone(), m.upto.clone());
    }
    let (first_at, last_at) = match (readings.keys().next(), readings.keys().next_back()) {
        (Some(f), Some(l)) => (*f, *l),
        // No reading left: the item stays (its watermarks are what keep replays out).
        _ => current.map_or((Timestamp::MIN, Timestamp::MIN), |c| {
            (c.first_at, c.last_at)
        }),
    };
    Some(AggregateItem {
        pk: key.pk.clone(),
        sk: key.sk.clone(),
        metrics,
        first_at,
        last_at,
        applied,
        // The floors cover what the rebuild read; a record above them is not in `metrics`,
        // so no mark of the aggregator's may refuse it.
        marks: Default::default(),
        marked_at: 0,
        from_table: false,
        folded: Default::default(),
        version: current.map_or(0, |c| c.version) + 1,
        sealed: false,
        open: false,
    })
}

#[cfg(test)]
mod tests {
    use tidemark_schema::{MetricName, Stats};

    use super::*;

    fn tuple(s: &Stats) -> (u64, f64, f64, f64) {
        (s.count, s.sum, s.min, s.max)
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_epoch_millis(1_776_693_600_000 + s * 1_000).unwrap()
    }
    fn marks(p: &str, upto: &str) -> BTreeMap<String, Marks> {
        BTreeMap::from([(
            p.to_owned(),
            Marks {
                s0: "10".into(),
                s1: "20".into(),
                upto: upto.into(),
            },
        )])
    }
    fn key() -> tidemark_schema::Key {
        AggregateItem::key_for(&DeviceId::new("d").unwrap(), Period::Hourly.bucket(t(0)))
    }

    #[test]
    fn the_rebuilt_item_holds_the_readings_and_moves_only_the_fenced_watermarks() {
        let current = AggregateItem {
            pk: key().pk,
            sk: key().sk,
            metrics: BTreeMap::new(),
            first_at: t(0),
            last_at: t(0),
            applied: BTreeMap::from([
                ("DEVICE#d".to_owned(), "5".to_owned()),
                ("DEVICE#d#S1".to_owned(), "7".to_owned()),
            ]),
            marks: Default::default(),
            marked_at: 0,
            from_table: false,
            folded: Default::default(),
            version: 4,
            sealed: false,
            open: false,
        };
        let temp = MetricName::new("temperature").unwrap();
        let readings = Readings::from([
            (t(1), BTreeMap::from([(temp.clone(), 2.0)])),
            (t(3), BTreeMap::from([(temp.clone(), 6.0)])),
        ]);
        let item = rebuilt(
            Some(&current),
            &key(),
            &readings,
            &marks("DEVICE#d", "12"),
            false,
        )
        .unwrap();
        assert_eq!(tuple(&item.metrics[&temp]), (2, 8.0, 2.0, 6.0));
        assert_eq!((item.first_at, item.last_at), (t(1), t(3)));
        assert_eq!(item.applied["DEVICE#d"], "12");
        assert_eq!(item.applied["DEVICE#d#S1"], "7");
        assert_eq!(item.version, 5);
    }

    #[test]
    fn an_emptied_bucket_keeps_its_item_and_watermarks_and_an_empty_new_one_is_not_written() {
        assert_eq!(
            rebuilt(
                None,
                &key(),
                &Readings::new(),
                &marks("DEVICE#d", "10"),
                false
            ),
            None
        );
        let current = AggregateItem {
            pk: key().pk,
            sk: key().sk,
            metrics: BTreeMap::from([(
                MetricName::new("temperature").unwrap(),
                Stats::at(t(2), 1.0),
            )]),
            first_at: t(2),
            last_at: t(2),
            applied: BTreeMap::new(),
            marks: Default::default(),
            marked_at: 0,
            from_table: false,
            folded: Default::default(),
            version: 1,
            sealed: false,
            open: false,
        };
        let item = rebuilt(
            Some(&current),
            &key(),
            &Readings::new(),
            &marks("DEVICE#d", "10"),
            false,
        )
        .unwrap();
        assert!(item.metrics.is_empty());
        assert_eq!(item.applied["DEVICE#d"], "10");
        assert_eq!(item.version, 2);
    }

    #[test]
    fn a_rebuild_covers_whole_days_and_refuses_a_backwards_or_huge_range() {
        let d = DeviceId::new("d").unwrap();
        let r = Rebuild {
            device: d.clone(),
            from: t(0),
            to: t(2 * 86_400),
        };
        let days = r.days().unwrap();
        assert_eq!(days.len(), 3);
        assert_eq!(buckets(&days).len(), 3 * 25);
        let back = Rebuild {
            device: d.clone(),
            from: t(86_400),
            to: t(0),
        };
        assert!(back.days().unwrap_err().to_string().contains("before"));
        let huge = Rebuild {
            device: d,
            from: t(0),
            to: t(400 * 86_400),
        };
        assert!(huge.days().unwrap_err().to_string().contains("at most"));
    }
}
