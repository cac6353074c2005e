//! Group partials (docs/design.md §5 "Groups", `docs/decisions/0007-group-rollups.md`): the
//! rollups role's share of a group's hour until the export recomputes it.
//!
//! Per invocation the batch is named by its first record's sequence number. Its *done*
//! records are those before the first one the invocation reports in `batchItemFailures` (all
//! of them when it reports none): a retry starts at that record, so the done records are
//! exactly what no other batch will bring again under this name. What each done reading or
//! slot-part record changed ([`crate::records`], from its own old and new images) is
//! attributed to the groups of its device's tags at each reading's own time (the keys of
//! `GROUP_TAGS`) and folded per (group, hour) ([`fold`]); each fold is one
//! `GROUPPART#<tag>#<hour>` / `<sequence>` item (or numbered pieces).
//!
//! Written with the manifest protocol, so a retry of the batch replaces what an earlier
//! attempt wrote, even when it touches fewer groups or hours (a bisected half):
//!
//! 1. read the batch's manifest (`GROUPBATCH#<sequence>`, consistent);
//! 2. put the manifest listing old ∪ new (skipped when the old one already lists them all);
//! 3. put the partials (the store's retrying batch writer);
//! 4. delete the old partials this attempt no longer writes;
//! 5. put the manifest listing the new ones only (skipped when nothing was stale).
//!
//! A batch with nothing to write and no manifest writes nothing (its one request is the
//! manifest's read, which a retry of a batch that did write partials needs). A failure is
//! transient (the whole batch is reported from its first record, so the retry rewrites the
//! same key) unless [`tidemark_store::StoreError::is_permanent`]; then the set-aside rules
//! apply ([`crate::setaside`]): counted against the first record, set aside at the third
//! failure, and the hours it touched are made exact by the export's recompute.
//!
//! Limit: a manifest holds about 4,000 partial keys (DynamoDB's 400 KB item). A batch touching
//! more (group, hour)s (a store-and-forward upload of days of readings across hundreds of
//! groups) cannot write it, fails for good and is set aside at the third try: its hours lack
//! the batch's partials until the export recomputes them (closed hours are marked for it by
//! this role, open ones are recomputed once they close).

pub mod fold;
mod stores;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tidemark_schema::keys::Key;
use tidemark_schema::{
    Bucket, DeviceId, GROUP_PARTIAL_TTL_DAYS, GroupBatchItem, GroupPartialItem, Period, TagHistory,
    Timestamp,
};
use tidemark_store::StoreError;

use crate::AggregatorError;
use crate::function::Aggregator;
use crate::records::StreamChange;
use crate::report::Counters;
use crate::store::Store;

/// The table operations of group partials; implemented for DynamoDB and the in-memory store.
pub trait GroupStore {
    /// The tag histories of `devices`, each given with the latest reading time to attribute
    /// (a device without one is absent), as cached by the container while the cache still
    /// holds every change in force at that reading ([`tidemark_store::tags::TagBook`]).
    fn tag_histories(
        &self,
        devices: &[(DeviceId, Timestamp)],
        now: Timestamp,
    ) -> impl Future<Output = Result<HashMap<DeviceId, TagHistory>, StoreError>> + Send;
    /// The batch's manifest, read consistent.
    fn group_manifest(
        &self,
        batch: &str,
    ) -> impl Future<Output = Result<Option<GroupBatchItem>, StoreError>> + Send;
    /// Puts the manifest; the write units it consumed.
    fn put_group_manifest(
        &self,
        item: &GroupBatchItem,
    ) -> impl Future<Output = Result<f64, StoreError>> + Send;
    /// Puts the partials, all of them or an error; the write units they consumed.
    fn put_group_partials(
        &self,
        items: &[GroupPartialItem],
    ) -> impl Future<Output = Result<f64, StoreError>> + Send;
    /// Deletes the items (partials, a manifest); the write units consumed.
    fn delete_group_items(
        &self,
        keys: &[Key],
    ) -> impl Future<Output = Result<f64, StoreError>> + Send;
}

/// What the group step did, for the report and the tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupWrite {
    pub partials: usize,
    pub deleted: usize,
    pub manifests: usize,
    pub units: f64,
}

/// The batch's name: its first record's sequence number (`None`: the event has no record
/// with one, so there is nothing a retry could name either).
pub fn batch_name(event: &aws_lambda_events::event::dynamodb::Event) -> Option<String> {
    event
        .records
        .first()
        .and_then(|r| r.change.sequence_number.clone())
        .filter(|s| fold::valid_batch(s))
}

/// Writes `partials` under the batch's manifest (the protocol of the module docs).
pub async fn write_batch<S: GroupStore + Sync>(
    store: &S,
    batch: &str,
    partials: &[GroupPartialItem],
    ttl: i64,
) -> Result<GroupWrite, StoreError> {
    let mut done = GroupWrite::default();
    let new: Vec<Key> = partials
        .iter()
        .map(|p| Key {
            pk: p.pk.clone(),
            sk: p.sk.clone(),
        })
        .collect();
    let old = store.group_manifest(batch).await?;
    if partials.is_empty() && old.is_none() {
        return Ok(done);
    }
    let old_keys: BTreeSet<Key> = old.iter().flat_map(|m| m.parts.iter().cloned()).collect();
    let new_keys: BTreeSet<Key> = new.iter().cloned().collect();
    let union: BTreeSet<Key> = old_keys.union(&new_keys).cloned().collect();
    let stale: Vec<Key> = old_keys.difference(&new_keys).cloned().collect();
    if old.is_none() || union.len() > old_keys.len() {
        let m = fold::manifest(batch, union.into_iter().collect(), ttl);
        done.units += store.put_group_manifest(&m).await?;
        done.manifests += 1;
    }
    if !partials.is_empty() {
        done.units += store.put_group_partials(partials).await?;
        done.partials = partials.len();
    }
    if !stale.is_empty() {
        done.units += store.delete_group_items(&stale).await?;
        done.deleted = stale.len();
        if new.is_empty() {
            let key = tidemark_schema::EntityKey::GroupBatch(batch.to_owned()).key();
            done.units += store.delete_group_items(&[key]).await?;
        } else {
            done.units += store
                .put_group_manifest(&fold::manifest(batch, new, ttl))
                .await?;
        }
        done.manifests += 1;
    }
    Ok(done)
}

/// The hours the done records touched (what a set-aside of the group step names).
fn hours_of(done: &[&StreamChange]) -> Vec<Bucket> {
    done.iter()
        .map(|c| Period::Hourly.bucket(c.change.image().at))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

impl<S: Store> Aggregator<S> {
    /// The group partials of the batch's done records (`done`: those before the first record
    /// reported for a retry): see the module docs.
    pub(crate) async fn group_partials(
        &self,
        event: &aws_lambda_events::event::dynamodb::Event,
        done: &[&StreamChange],
        counters: &Counters,
    ) -> Result<GroupWrite, AggregatorError> {
        let keys = &self.config.group_tags;
        let Some(batch) = batch_name(event) else {
            return Ok(GroupWrite::default());
        };
        let mut latest: BTreeMap<DeviceId, Timestamp> = BTreeMap::new();
        for c in done {
            let img = c.change.image();
            let t = latest.entry(img.device.clone()).or_insert(img.at);
            *t = (*t).max(img.at);
        }
        let devices: Vec<(DeviceId, Timestamp)> = latest.into_iter().collect();
        let histories = if keys.is_empty() || devices.is_empty() {
            HashMap::new()
        } else {
            self.store
                .tag_histories(&devices, self.config.clock.now())
                .await?
        };
        let shares = fold::shares(done.iter().copied(), |d, t| {
            fold::groups_at(&histories, keys, d, t)
        });
        let now = self.config.clock.now();
        let ttl = now.epoch_seconds() + i64::from(GROUP_PARTIAL_TTL_DAYS) * 86_400;
        let partials: Vec<GroupPartialItem> = shares
            .into_iter()
            .flat_map(|((tag, hour), share)| fold::pieces(&tag, hour, share, &batch, ttl))
            .collect();
        let written = write_batch(&self.store, &batch, &partials, ttl).await?;
        Counters::add(
            &counters.write_milli_units,
            (written.units * 1000.0).round() as u64,
        );
        Counters::add(
            &counters.items_written,
            (written.partials + written.deleted + written.manifests) as u64,
        );
        Ok(written)
    }

    /// The group step of a rollups invocation, once everything else has settled which
    /// records it reports for a retry: the partials of the records before the first of them.
    /// Its failure reports the batch from its first record (the retry then rewrites the same
    /// key); a permanent one is counted and, at the third, set aside ([`crate::setaside`]).
    pub(crate) async fn groups_of_done(
        &self,
        event: &aws_lambda_events::event::dynamodb::Event,
        changes: &[StreamChange],
        counters: &Counters,
        stop: tokio::time::Instant,
        failed: &mut crate::failed::Failed,
    ) {
        let first_undone = failed
            .retry
            .iter()
            .copied()
            .min()
            .unwrap_or(event.records.len());
        let done: Vec<&StreamChange> = changes.iter().filter(|c| c.index < first_undone).collect();
        let work = crate::failed::guarded(self.group_partials(event, &done, counters));
        if let Err(e) = counters.until(stop, work).await {
            tracing::error!(error = %e, "group partials not written");
            let mut g = crate::failed::Failed::default();
            g.fail(0, &e, None, hours_of(&done));
            self.settle(event, &mut g, counters).await;
            failed.retry.extend(g.retry);
        }
    }
}

#[cfg(test)]
mod tests;
