//! Walking a device's stored readings in a time range, layout epoch by layout epoch
//! ([`LayoutHistory::segments`]): single items (`READING#<ts>`) where the device stored them
//! one by one, packed slot parts (`SLOT#<start>#<part>`, docs/design.md §2) where it packed them, in
//! every shard partition of each epoch. What the rollups' extremes, the alert derivations and
//! `tidemark-admin rebuild` read.
//!
//! The parts of one slot are not in time order among themselves (a late reading goes to the
//! open part), and one timestamp's metrics may be spread over several of them (a metric added
//! when its part was full), so a slot is handed on only once all its parts are read, joined by
//! the one rule every reader uses ([`tidemark_schema::join_parts`]). An unreadable item is skipped, logged with
//! its key and counted: it holds nothing the walk could use.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::table::attr;
use tidemark_schema::{
    DeviceId, MetricName, ReadingItem, Segment, SlotItem, SlotLen, SlotPart, Timestamp, join_parts,
    keys,
};
use tidemark_store::{Item, StoreError, from_stored};

use crate::store::DynamoStore;

/// Slot parts asked for per page when only the first readings are wanted (a slot part may
/// hold thousands).
const SLOT_PAGE: i32 = 4;

/// What a walk saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Walked {
    /// Readings handed to the visitor.
    pub readings: usize,
    /// Items skipped because they do not parse (single readings or slot parts).
    pub unreadable: u64,
}

/// One Query's shape: a partition, a sort key range, an order, a page size.
struct Ask {
    pk: String,
    lo: String,
    hi: String,
    newest_first: bool,
    page: Option<i32>,
}

/// One slot's parts read so far, joined and handed on in the asked order once all are read.
struct OpenSlot {
    start: Timestamp,
    parts: Vec<SlotPart>,
}

impl DynamoStore {
    /// Pages through the readings of `device` in `[from, to]`, handing each readable one to
    /// `visit`; with `per_partition`, at most that many of each partition and epoch, its
    /// first in the asked order (`newest_first` or oldest), and no epoch past the one that
    /// filled the limit.
    pub async fn walk_readings(
        &self,
        device: &DeviceId,
        from: Timestamp,
        to: Timestamp,
        newest_first: bool,
        per_partition: Option<usize>,
        mut visit: impl FnMut(Timestamp, BTreeMap<MetricName, f64>),
    ) -> Result<Walked, StoreError> {
        if per_partition == Some(0) {
            return Ok(Walked::default());
        }
        let mut segments = self.shard_history(device).await?.segments(from, to);
        if newest_first {
            segments.reverse();
        }
        let mut walked = Walked::default();
        for seg in segments {
            for shard in seg.shards() {
                let pk = keys::reading_pk(device, shard);
                let w = match seg.layout.slot {
                    None => {
                        self.walk_single(&seg, pk, newest_first, per_partition, &mut visit)
                            .await?
                    }
                    Some(len) => {
                        self.walk_packed(&seg, len, pk, newest_first, per_partition, &mut visit)
                            .await?
                    }
                };
                walked.readings += w.readings;
                walked.unreadable += w.unreadable;
            }
            // Later epochs only hold readings after (or before) all of these.
            if per_partition.is_some_and(|limit| walked.readings >= limit) {
                break;
            }
        }
        Ok(walked)
    }

    /// One Query, every page (or until `item` says stop).
    async fn query(&self, ask: &Ask, mut item: impl FnMut(Item) -> bool) -> Result<(), StoreError> {
        let mut start: Option<Item> = None;
        loop {
            let resp = self
                .client()
                .query()
                .table_name(self.table())
                .consistent_read(true)
                .scan_index_forward(!ask.newest_first)
                .set_limit(ask.page)
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
                .expression_attribute_names("#pk", attr::PK)
                .expression_attribute_names("#sk", attr::SK)
                .expression_attribute_values(":pk", AttributeValue::S(ask.pk.clone()))
                .expression_attribute_values(":lo", AttributeValue::S(ask.lo.clone()))
                .expression_attribute_values(":hi", AttributeValue::S(ask.hi.clone()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(StoreError::sdk("Query"))?;
            for i in resp.items.unwrap_or_default() {
                if !item(i) {
                    return Ok(());
                }
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(()),
            }
        }
    }

    async fn walk_single(
        &self,
        seg: &Segment,
        pk: String,
        newest_first: bool,
        per_partition: Option<usize>,
        visit: &mut impl FnMut(Timestamp, BTreeMap<MetricName, f64>),
    ) -> Result<Walked, StoreError> {
        let mut left = per_partition.unwrap_or(usize::MAX);
        let ask = Ask {
            pk,
            lo: keys::reading_sk(seg.from),
            hi: keys::reading_sk(seg.to),
            newest_first,
            page: per_partition.map(|l| i32::try_from(l).unwrap_or(i32::MAX)),
        };
        let mut walked = Walked::default();
        self.query(&ask, |i| {
            match from_stored::<ReadingItem>(i).map(|r| r.to_reading()) {
                Ok(Ok((reading, _))) => {
                    visit(reading.timestamp, reading.metrics);
                    walked.readings += 1;
                    left -= 1;
                }
                Ok(Err(e)) => {
                    tracing::warn!(key = %format!("{}/{}", e.pk, e.sk), "unreadable reading skipped");
                    walked.unreadable += 1;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable reading skipped");
                    walked.unreadable += 1;
                }
            }
            left > 0
        })
        .await?;
        Ok(walked)
    }

    async fn walk_packed(
        &self,
        seg: &Segment,
        len: SlotLen,
        pk: String,
        newest_first: bool,
        per_partition: Option<usize>,
        visit: &mut impl FnMut(Timestamp, BTreeMap<MetricName, f64>),
    ) -> Result<Walked, StoreError> {
        let (lo, hi) = keys::slot_sk_between(len.start_of(seg.from), len.start_of(seg.to));
        let ask = Ask {
            pk,
            lo,
            hi,
            newest_first,
            page: per_partition.map(|_| SLOT_PAGE),
        };
        let mut left = per_partition.unwrap_or(usize::MAX);
        let mut walked = Walked::default();
        let mut open: Option<OpenSlot> = None;
        // Hands on the slot read so far: its readings inside the segment, in the asked order.
        let mut flush = |slot: OpenSlot, walked: &mut Walked, left: &mut usize| {
            let (readings, _) = join_parts(slot.parts);
            let inside = readings
                .into_iter()
                .filter(|(at, _)| seg.from <= *at && *at <= seg.to);
            let ordered: Box<dyn Iterator<Item = _>> = if newest_first {
                Box::new(inside.rev())
            } else {
                Box::new(inside)
            };
            for (at, metrics) in ordered.take(*left) {
                visit(at, metrics);
                walked.readings += 1;
                *left -= 1;
            }
        };
        self.query(&ask, |i| {
            let part = match from_stored::<SlotItem>(i) {
                Ok(item) => item
                    .decode()
                    .map_err(|e| (format!("{}/{}", item.pk, item.sk), e.to_string())),
                Err(e) => Err(("?".to_owned(), e.to_string())),
            };
            let part = match part {
                Ok(p) => p,
                Err((key, error)) => {
                    tracing::warn!(%key, %error, "unreadable slot part skipped");
                    walked.unreadable += 1;
                    return true;
                }
            };
            if open.as_ref().is_some_and(|o| o.start != part.start) {
                if let Some(done) = open.take() {
                    flush(done, &mut walked, &mut left);
                }
                if left == 0 {
                    return false;
                }
            }
            open.get_or_insert_with(|| OpenSlot {
                start: part.start,
                parts: Vec::new(),
            })
            .parts
            .push(part);
            true
        })
        .await?;
        if let Some(done) = open.take() {
            flush(done, &mut walked, &mut left);
        }
        Ok(walked)
    }
}
