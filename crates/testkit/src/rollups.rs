//! The check every exactness test ends with: the hourly and daily rollups stored in a table
//! equal a recomputation from the raw readings in that same table, stored singly or packed.

use std::collections::BTreeMap;

use tidemark_schema::{
    AggregateItem, DeviceId, EntityKey, Key, MetricName, Period, ReadingItem, SlotItem, SlotPart,
    Stats, Timestamp, join_parts,
};
use tidemark_store::Item;

/// One bucket's rollup, as stored or as recomputed.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollup {
    pub metrics: BTreeMap<MetricName, Stats>,
    pub first_at: tidemark_schema::Timestamp,
    pub last_at: tidemark_schema::Timestamp,
}

fn s(i: &Item, a: &str) -> String {
    i.get(a)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

/// Every reading among `items`: single reading items, and the readings of packed slot parts
/// (a part that does not decode is left out, as the aggregator leaves it out), joined as
/// every reader joins them ([`tidemark_schema::join_parts`]: a timestamp's metrics merge
/// across parts, the later part winning a value two hold).
pub fn readings(items: &[Item]) -> Vec<(DeviceId, Timestamp, BTreeMap<MetricName, f64>)> {
    let mut out = Vec::new();
    let mut parts: BTreeMap<DeviceId, Vec<SlotPart>> = BTreeMap::new();
    for i in items {
        match EntityKey::parse(&s(i, "pk"), &s(i, "sk")) {
            Ok(EntityKey::Reading { device, at, .. }) => {
                let r: ReadingItem = tidemark_store::from_item(i.clone())
                    .unwrap_or_else(|e| panic!("reading {} / {}: {e}", s(i, "pk"), s(i, "sk")));
                out.push((device, at, r.metrics));
            }
            Ok(EntityKey::Slot { .. }) => {
                let Ok(part) = tidemark_store::from_item::<SlotItem>(i.clone())
                    .map_err(|e| e.to_string())
                    .and_then(|p| p.decode().map_err(|e| e.to_string()))
                else {
                    continue;
                };
                parts.entry(part.device.clone()).or_default().push(part);
            }
            _ => {}
        }
    }
    for (device, parts) in parts {
        let (readings, _) = join_parts(parts);
        out.extend(readings.into_iter().map(|(at, m)| (device.clone(), at, m)));
    }
    out
}

/// Hourly and daily rollups of every reading among `items` ([`readings`]), by aggregate key.
pub fn recompute(items: &[Item]) -> BTreeMap<Key, Rollup> {
    let mut out: BTreeMap<Key, Rollup> = BTreeMap::new();
    for (device, at, metrics) in readings(items) {
        for period in [Period::Hourly, Period::Daily] {
            let key = AggregateItem::key_for(&device, period.bucket(at));
            let e = out.entry(key).or_insert_with(|| Rollup {
                metrics: BTreeMap::new(),
                first_at: at,
                last_at: at,
            });
            e.first_at = e.first_at.min(at);
            e.last_at = e.last_at.max(at);
            for (m, v) in &metrics {
                e.metrics
                    .entry(m.clone())
                    .and_modify(|st| st.merge(&Stats::at_sketched(at, *v)))
                    .or_insert_with(|| Stats::at_sketched(at, *v));
            }
        }
    }
    out
}

/// The rollups stored among `items` (those with at least one metric), by key: aggregate
/// items, each merged with its overflow pages when its bucket is paged
/// ([`AggregateItem::merge_pages`]), an open hour as its readings and an open day as the sum
/// of its hours.
pub fn stored(items: &[Item]) -> BTreeMap<Key, Rollup> {
    let mut pages: BTreeMap<Key, Vec<AggregateItem>> = BTreeMap::new();
    for i in items {
        let key = match EntityKey::parse(&s(i, "pk"), &s(i, "sk")) {
            Ok(EntityKey::Aggregate { device, bucket }) => AggregateItem::key_for(&device, bucket),
            Ok(EntityKey::AggregatePage { device, bucket, .. }) => {
                AggregateItem::key_for(&device, bucket)
            }
            _ => continue,
        };
        let a: AggregateItem = tidemark_store::from_item(i.clone())
            .unwrap_or_else(|e| panic!("aggregate {} / {}: {e}", s(i, "pk"), s(i, "sk")));
        let e = pages.entry(key).or_default();
        // Page 0 first, the order a reader merges in.
        if a.sk.starts_with(tidemark_schema::keys::AGG_PREFIX) {
            e.insert(0, a);
        } else {
            e.push(a);
        }
    }
    // An hour still open is a placeholder: what it stores is its readings, as the API
    // serves it (AggregateItem::add_reading).
    let raw = readings(items);
    let of_readings = |hour: AggregateItem| -> AggregateItem {
        let Ok(EntityKey::Aggregate { device, bucket }) = EntityKey::parse(&hour.pk, &hour.sk)
        else {
            return hour;
        };
        let mut out = AggregateItem::empty(&AggregateItem::key_for(&device, bucket));
        out.version = hour.version;
        out.open = true;
        for (d, at, m) in &raw {
            if *d == device && bucket.contains(*at) {
                out.add_reading(*at, m);
            }
        }
        out
    };
    let merged: BTreeMap<Key, AggregateItem> = pages
        .into_iter()
        .filter(|(_, p)| p[0].sk.starts_with(tidemark_schema::keys::AGG_PREFIX))
        .filter_map(|(k, p)| Some((k, AggregateItem::merge_pages(p)?)))
        .map(|(k, a)| {
            let hourly =
                k.sk.starts_with(&tidemark_schema::keys::aggregate_sk_prefix(Period::Hourly));
            (k, if a.open && hourly { of_readings(a) } else { a })
        })
        .collect();
    // A day still open is a placeholder: what it stores is the sum of its hours, as the API
    // serves it (AggregateItem::day_of_hours).
    let hours_of = |day: &AggregateItem| -> Vec<AggregateItem> {
        let Ok(EntityKey::Aggregate { bucket, .. }) = EntityKey::parse(&day.pk, &day.sk) else {
            return Vec::new();
        };
        merged
            .values()
            .filter(|h| {
                h.pk == day.pk
                    && matches!(
                        EntityKey::parse(&h.pk, &h.sk),
                        Ok(EntityKey::Aggregate { bucket: b, .. })
                            if b.period() == Period::Hourly && bucket.contains(b.start())
                    )
            })
            .cloned()
            .collect()
    };
    merged
        .iter()
        .map(|(k, a)| {
            let daily =
                k.sk.starts_with(&tidemark_schema::keys::aggregate_sk_prefix(Period::Daily));
            let a = if a.open && daily {
                AggregateItem::day_of_hours(a, hours_of(a))
            } else {
                a.clone()
            };
            (
                k.clone(),
                Rollup {
                    metrics: a.metrics,
                    first_at: a.first_at,
                    last_at: a.last_at,
                },
            )
        })
        .filter(|(_, r)| !r.metrics.is_empty())
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// One metric's rollup equal to another's as far as addition order allows: counts, extremes,
/// first and last reading exactly; sums and standard deviations to 1e-9 relative; quantile
/// sketches, where both have one (only devices with `percentiles: true` keep them), exactly.
pub fn same_stats(x: &Stats, y: &Stats) -> bool {
    x.count == y.count
        && close(x.sum, y.sum)
        && x.min == y.min
        && x.max == y.max
        && x.first == y.first
        && x.last == y.last
        && match (x.stddev(), y.stddev()) {
            (Some(a), Some(b)) => close(a, b),
            (a, b) => a == b,
        }
        && match (&x.sketch, &y.sketch) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
}

fn same(a: &Rollup, b: &Rollup) -> bool {
    a.first_at == b.first_at
        && a.last_at == b.last_at
        && a.metrics.len() == b.metrics.len()
        && a.metrics
            .iter()
            .all(|(m, x)| b.metrics.get(m).is_some_and(|y| same_stats(x, y)))
}

/// Every way the stored rollups among `items` differ from the recomputation (empty: exact).
/// Sums and standard deviations are compared to 1e-9 relative, since they are added up in
/// another order; first and last readings exactly.
pub fn differences(items: &[Item]) -> Vec<String> {
    let want = recompute(items);
    let got = stored(items);
    let mut out = Vec::new();
    for (k, w) in &want {
        match got.get(k) {
            None => out.push(format!("{k}: missing, expected {w:?}")),
            Some(g) if !same(g, w) => out.push(format!("{k}: stored {g:?}, expected {w:?}")),
            Some(_) => {}
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(k)) {
        out.push(format!("{k}: stored without any reading"));
    }
    out
}
