//! A device's hourly and daily rollups (`GET /devices/{id}/aggregates`, AP7): stored buckets
//! as their items hold them (a paged bucket's pages merged), an hour still open as its
//! readings so far and a day still open as the sum of its hours (docs/design.md §5: a bucket
//! is written once it closes).

use serde_json::Value;
use tidemark_schema::{AggregateItem, Bucket, DeviceId, EntityKey, LayoutHistory, Period, keys};
use tidemark_store::Item;

use super::{DAY_MS, Reply, Start, WHOLE, device_not_found, list, resume_range};
use crate::App;
use crate::error::ApiError;
use crate::render;
use crate::request::Params;
#[allow(unused_imports)]
use crate::store::traits::*;
use crate::store::{QuerySpec, SkRange, Store};
use crate::validate;

impl<S: Store> App<S> {
    /// Hourly or daily rollups of a range (AP7): buckets whose start lies in `[from, to]`,
    /// widened to the buckets holding `from` and `to`.
    pub(super) async fn aggregates(&self, id: DeviceId, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let forward = validate::order(p, true)?;
        let period = match p.get("period") {
            None => Period::Hourly,
            Some(s) => Period::parse(s).ok_or_else(|| {
                ApiError::bad("period", format!("{s:?} is not one of: hourly, daily"))
            })?,
        };
        let default_span = match period {
            Period::Hourly => DAY_MS,
            Period::Daily => 30 * DAY_MS,
        };
        let scope = format!(
            "aggregates|{id}|{}|{}|{}",
            period.as_str(),
            validate::range_scope(p)?,
            if forward { "asc" } else { "desc" }
        );
        let (start, (from, to)) = match self.open(&scope, p)? {
            Some(state) => {
                let r = resume_range(&state)?;
                (Start::Resume(state), r)
            }
            None => {
                let (from, to) = validate::range(p, self.now(), default_span)?;
                if !self.device_exists(&id).await? {
                    return Err(device_not_found(&id));
                }
                (
                    Start::Fresh {
                        range: Some((from.to_string(), to.to_string())),
                        labels: vec![WHOLE.to_owned()],
                    },
                    (from, to),
                )
            }
        };
        let spec_for = |label: &str| {
            (label == WHOLE).then(|| {
                QuerySpec::table(
                    keys::device_pk(&id),
                    SkRange::Between(
                        keys::aggregate_sk(period.bucket(from)),
                        keys::aggregate_sk(period.bucket(to)),
                    ),
                    forward,
                )
            })
        };
        let (items, cursor) = self.page(&scope, start, spec_for, limit, |_| true).await?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(self.aggregate_with_pages(item).await?);
        }
        Ok(list(out, cursor))
    }

    /// One aggregate item as a bucket's rollup (rendered).
    async fn aggregate_with_pages(&self, item: Item) -> Result<Value, ApiError> {
        render::aggregate_item(self.bucket_content(item).await?)
    }

    /// One aggregate item as its bucket's whole rollup: its pages merged, an open hour from
    /// its readings, an open day from its hours.
    pub(super) async fn bucket_content(&self, item: Item) -> Result<AggregateItem, ApiError> {
        let rollup = self.bucket_rollup(item).await?;
        if !rollup.open {
            return Ok(rollup);
        }
        // An open bucket is a placeholder (docs/design.md §5): an hour is taken from its
        // readings, a day is the sum of its hours, each as fresh as the table.
        let Ok(EntityKey::Aggregate { device, bucket }) = EntityKey::parse(&rollup.pk, &rollup.sk)
        else {
            return Ok(rollup);
        };
        let history = self.history_of(&device).await?;
        if bucket.period() == Period::Hourly {
            return self.open_hour(&device, &history, bucket, rollup).await;
        }
        let last_hour = bucket.end_exclusive().pred().unwrap_or(bucket.start());
        let spec = QuerySpec::table(
            rollup.pk.clone(),
            SkRange::Between(
                keys::aggregate_sk(Period::Hourly.bucket(bucket.start())),
                keys::aggregate_sk(Period::Hourly.bucket(last_hour)),
            ),
            true,
        );
        let mut hours = Vec::new();
        for item in self.query_all(&spec).await? {
            let hour = self.bucket_rollup(item).await?;
            let hour = match EntityKey::parse(&hour.pk, &hour.sk) {
                Ok(EntityKey::Aggregate { bucket: h, .. }) if hour.open => {
                    self.open_hour(&device, &history, h, hour).await?
                }
                _ => hour,
            };
            hours.push(hour);
        }
        Ok(AggregateItem::day_of_hours(&rollup, hours))
    }

    /// An open hour's rollup, from its stored readings: the same walk the rollups role
    /// summarizes when the hour closes, so the two agree.
    async fn open_hour(
        &self,
        device: &DeviceId,
        history: &LayoutHistory,
        hour: Bucket,
        placeholder: AggregateItem,
    ) -> Result<AggregateItem, ApiError> {
        let mut out = AggregateItem::empty(&AggregateItem::key_for(device, hour));
        out.version = placeholder.version;
        let last = hour.end_exclusive().pred().unwrap_or(hour.start());
        tidemark_store::read::walk_readings(
            &self.store,
            device,
            history,
            hour.start(),
            last,
            false,
            None,
            |at, m| out.add_reading(at, &m),
        )
        .await?;
        Ok(out)
    }

    /// One aggregate item as its bucket's rollup: when it is page 0 of a paged bucket
    /// (`sealed`), its overflow pages are read and merged in (an ordinary item costs nothing
    /// more).
    async fn bucket_rollup(&self, item: Item) -> Result<AggregateItem, ApiError> {
        let page0: AggregateItem = tidemark_store::from_item(item)?;
        if !page0.sealed {
            return Ok(page0);
        }
        let Ok(EntityKey::Aggregate { bucket, .. }) = EntityKey::parse(&page0.pk, &page0.sk) else {
            return Ok(page0);
        };
        let spec = QuerySpec::table(
            page0.pk.clone(),
            SkRange::BeginsWith(keys::aggregate_page_sk_prefix(bucket)),
            true,
        );
        let mut pages = vec![page0];
        for i in self.query_all(&spec).await? {
            pages.push(tidemark_store::from_item(i)?);
        }
        Ok(AggregateItem::merge_pages(pages).expect("page 0 is there"))
    }

    /// Every item `spec` matches, page after page (a bucket's overflow pages, a day's hours:
    /// a few dozen items at most).
    pub(super) async fn query_all(&self, spec: &QuerySpec) -> Result<Vec<Item>, ApiError> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let page = self.store.query(spec, start, 100).await?;
            out.extend(page.items);
            start = page.last_key;
            if start.is_none() {
                return Ok(out);
            }
        }
    }
}
