//! Device tags (docs/design.md §2 "Tags and groups"): `PUT /devices/{id}` declares them in the
//! device's tag history (`CONFIG` / `TAGS#<id>`, under an optimistic lock), effective from
//! `tagsEffectiveFrom` (default, and at the earliest, [`tidemark_schema::LayoutLead::earliest_change`]
//! of now, the lead layouts use: every function attributing readings to groups has read the
//! change by then), copies the latest declared tags to the device item (`tags`, `tagsFrom`),
//! and brings its entries in the tag index (`TAG#<key>:<value>#<n>`) to them; and
//! `GET /devices?tag=…` lists one tag's index, filtering the other tags and the status from
//! its entries.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use tidemark_schema::table::attr;
use tidemark_schema::{
    DeviceId, DeviceStatus, EntityKey, Tag, TagIndexItem, TagKey, TagValue, Tags, Timestamp, field,
    keys,
};
use tidemark_store::Item;
use tidemark_store::tags::{IndexPosition, history_from_item, history_key, index_page};

use super::{Reply, bad_cursor, list};
use crate::App;
use crate::access::Scope;
use crate::cursor::CursorState;
use crate::error::ApiError;
use crate::render;
use crate::request::Params;
#[allow(unused_imports)]
use crate::store::traits::*;
use crate::store::{DeviceRegistration, PutDevice, Store};

/// Tries of a tag change that loses the optimistic lock to another one, each after a
/// jittered wait (then a 409).
const TAG_ATTEMPTS: u32 = 8;
/// Index entries one listing page reads at most when filters drop most of them (the page
/// then comes back short, with a cursor).
const MAX_EVALUATED: usize = 5_000;

/// The device item's tags and status as stored before a `PUT`.
#[derive(Debug, Default)]
pub(super) struct Before {
    tags: Tags,
    status: Option<DeviceStatus>,
}

/// The tag history version a request took the latest declared tags from.
struct Declared {
    version: u64,
}

pub(super) fn stored_tags(item: &Item) -> Tags {
    item.get(field::TAGS)
        .and_then(|v| serde_dynamo::from_attribute_value(v.clone()).ok())
        .unwrap_or_default()
}

fn stored_status(item: &Item) -> Option<DeviceStatus> {
    item.get(field::STATUS)
        .and_then(|v| v.as_s().ok())
        .and_then(|s| DeviceStatus::parse(s).ok())
}

/// The scope a tag listing's cursor is bound to: the filters, in a canonical order.
fn tag_scope(kind: &str, tags: &[Tag], status: Option<DeviceStatus>) -> String {
    let mut t: Vec<String> = tags.iter().map(Tag::to_string).collect();
    t.sort();
    format!(
        "devices|{kind}|{}|{}",
        t.join(","),
        status.map_or("-", |s| s.as_str())
    )
}

impl<S: Store> App<S> {
    /// Registers the device with its tags: the tag change on the history first (the truth
    /// group rollups follow), then the device item with the latest declared tags, then the
    /// index. Should another request change the history before this one's device item is
    /// written, the item is written again with the newer tags, so the last writer of the item
    /// has always seen the last history.
    pub(super) async fn put_tagged(
        &self,
        reg: &mut DeviceRegistration,
        now: Timestamp,
    ) -> Result<PutDevice, ApiError> {
        let (before, mut declared) = self.declare_tags(reg, now).await?;
        let mut put = self.store.put_device(reg, now).await?;
        for _ in 0..TAG_ATTEMPTS {
            let stored = self.store.get(history_key(&reg.device_id), true).await?;
            let (history, version) = history_from_item(stored)?;
            if version == declared.version {
                break;
            }
            let latest = history.latest();
            reg.tags = latest.map(|e| e.tags.clone()).unwrap_or_default();
            reg.tags_from = latest.map(|e| e.from);
            declared = Declared { version };
            put = self.store.put_device(reg, now).await?;
        }
        self.index_tags(reg, &before).await?;
        Ok(put)
    }

    /// Applies the request's tag change to the device's tag history and sets `reg.tags` /
    /// `reg.tags_from` to the latest declared tags; returns what the device item held
    /// before, for the index. A change that loses the optimistic lock is read and made again.
    async fn declare_tags(
        &self,
        reg: &mut DeviceRegistration,
        now: Timestamp,
    ) -> Result<(Before, Declared), ApiError> {
        let id = reg.device_id.clone();
        let before = match self.device_item(&id, true).await? {
            Some(item) => Before {
                tags: stored_tags(&item),
                status: stored_status(&item),
            },
            None => Before::default(),
        };
        let request = reg.tag_request.clone();
        let earliest = self.config.layout_lead.earliest_change(now);
        let from = request.effective_from.unwrap_or(earliest);
        if request.changes() && from < earliest {
            return Err(ApiError::bad(
                "tagsEffectiveFrom",
                format!(
                    "{from} is too soon: a tag change takes effect at {earliest} or later \
                     (functions may be attributing readings up to then to the current tags)"
                ),
            ));
        }
        let retry = tidemark_store::retry::RetryPolicy::default();
        for attempt in 0..TAG_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(retry.delay(attempt)).await;
            }
            let stored = self.store.get(history_key(&id), true).await?;
            let (mut history, version) = history_from_item(stored)?;
            if request.changes() {
                let current = history.latest().map(|e| e.tags.clone()).unwrap_or_default();
                let wanted = request.applied_to(&current)?;
                let changed = history
                    .change(from, wanted, earliest)
                    .map_err(|e| ApiError::bad("tagsEffectiveFrom", e.to_string()))?;
                if changed {
                    if !self.store.replace_tags(&id, &history, version).await? {
                        continue;
                    }
                    let latest = history.latest();
                    reg.tags = latest.map(|e| e.tags.clone()).unwrap_or_default();
                    reg.tags_from = latest.map(|e| e.from);
                    return Ok((
                        before,
                        Declared {
                            version: version + 1,
                        },
                    ));
                }
            }
            let latest = history.latest();
            reg.tags = latest.map(|e| e.tags.clone()).unwrap_or_default();
            reg.tags_from = latest.map(|e| e.from);
            return Ok((before, Declared { version }));
        }
        Err(ApiError::Conflict(format!(
            "the tags of device {id} kept changing while this request ran; try again"
        )))
    }

    /// Brings the device's tag index entries to its latest declared tags and status: puts
    /// one entry per tag (each carries the status and all the tags) and deletes the entries
    /// of tags it no longer has. Nothing is written when neither changed.
    async fn index_tags(&self, reg: &DeviceRegistration, before: &Before) -> Result<(), ApiError> {
        let id = &reg.device_id;
        if before.tags == reg.tags && before.status == Some(reg.status) {
            return Ok(());
        }
        let puts: Vec<TagIndexItem> = reg
            .tags
            .iter()
            .map(|t| TagIndexItem::new(&t, id, reg.status, reg.tags.clone()))
            .collect();
        let deletes: Vec<tidemark_schema::Key> = before
            .tags
            .iter()
            .filter(|t| !reg.tags.has(t))
            .map(|tag| {
                EntityKey::TagIndex {
                    tag,
                    partition: keys::tag_index_partition(id),
                    device: id.clone(),
                }
                .key()
            })
            .collect();
        self.store.write_tag_index(&puts, &deletes).await?;
        Ok(())
    }

    /// `GET /devices?tag=…(&status=…)`: the members of the first tag (in sorted order) from
    /// its index, partition after partition, keeping the entries that hold every tag and
    /// the status; each shown from its device item (a summary, as the status listing's, with
    /// `tags` and `tagsFrom`). A caller limited to sites walks its sites' indexes instead
    /// (`TAG#site:<v>`), one site after another (only the site `tag` asks for, if any), with
    /// or without `tag`: a single-site caller reads exactly its devices.
    pub(super) async fn tagged_devices(
        &self,
        p: &Params,
        tags: Vec<Tag>,
        status: Option<DeviceStatus>,
        limit: usize,
    ) -> Result<Reply, ApiError> {
        let caller = Scope::caller();
        let scope = tag_scope("tags", &tags, status);
        let mut sorted = tags.clone();
        sorted.sort();
        let walk: Vec<Tag> = match caller.site_tags() {
            None => {
                let Some(first) = sorted.first() else {
                    return Err(ApiError::bad("tag", "at least one tag is required"));
                };
                vec![first.clone()]
            }
            Some(sites) => match tags.iter().find(|t| t.key.as_str() == TagKey::SITE) {
                Some(asked) => sites.into_iter().filter(|s| s == asked).collect(),
                None => sites,
            },
        };
        // Where the walk stands: which of `walk` (scoped callers' cursors say, in `at`), and
        // where in its index.
        let (mut at, mut from) = match self.open(&scope, p)? {
            None => (0, None),
            Some(state) => {
                let at = match state.at.as_deref() {
                    None => 0,
                    Some(a) => a.parse::<usize>().map_err(|_| bad_cursor())?,
                };
                let from = if state.parts.is_empty() {
                    None
                } else {
                    Some(index_position(&state)?)
                };
                (at, from)
            }
        };
        let keep = |e: &TagIndexItem| {
            e.tags.has_all(&tags) && status.is_none_or(|s| e.status == s) && caller.sees(&e.tags)
        };
        let mut entries = Vec::new();
        let mut next: Option<(usize, Option<IndexPosition>)> = None;
        while at < walk.len() {
            if entries.len() >= limit {
                next = Some((at, None));
                break;
            }
            let page = index_page(
                &self.store,
                &walk[at],
                from.take(),
                limit - entries.len(),
                MAX_EVALUATED,
                keep,
            )
            .await?;
            entries.extend(page.items);
            if let Some(pos) = page.next {
                next = Some((at, Some(pos)));
                break;
            }
            at += 1;
        }
        let scoped = caller != Scope::All;
        let cursor = next.map(|(at, pos)| {
            self.cursor_key().seal(
                &scope,
                &CursorState {
                    at: scoped.then(|| at.to_string()),
                    parts: pos
                        .map(|pos| vec![(pos.partition.to_string(), pos.after.map(|a| vec![a]))])
                        .unwrap_or_default(),
                    ..CursorState::default()
                },
            )
        });
        let ids: Vec<DeviceId> = entries.into_iter().map(|e| e.device_id).collect();
        let mut by_id = self.device_items(&ids).await?;
        let mut items = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(item) = by_id.remove(&id) else {
                continue;
            };
            // The index lags a request that failed half-way: the device item decides.
            let held = stored_tags(&item);
            if !held.has_all(&tags)
                || !caller.sees(&held)
                || status.is_some_and(|s| stored_status(&item) != Some(s))
            {
                continue;
            }
            items.push(render::tagged_device(item)?);
        }
        Ok(list(items, cursor))
    }

    /// The device items of `ids` that exist, by ID (one BatchGetItem per 100).
    pub(super) async fn device_items(
        &self,
        ids: &[DeviceId],
    ) -> Result<HashMap<DeviceId, Item>, ApiError> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let keys = ids
            .iter()
            .map(|d| EntityKey::Device(d.clone()).key())
            .collect();
        Ok(self
            .store
            .batch_get(keys)
            .await?
            .into_iter()
            .filter_map(|item| {
                let text = |a: &str| match item.get(a) {
                    Some(AttributeValue::S(s)) => Some(s.as_str()),
                    _ => None,
                };
                match EntityKey::parse(text(attr::PK)?, text(attr::SK)?) {
                    Ok(EntityKey::Device(id)) => Some((id, item)),
                    _ => None,
                }
            })
            .collect())
    }
}

/// The cursor scope of `GET /devices?connectivity=offline` with `tags`.
pub(super) fn offline_scope(tags: &[Tag]) -> String {
    if tags.is_empty() {
        "devices|offline".to_owned()
    } else {
        tag_scope("offline", tags, None)
    }
}

/// Whether a rendered device is one of the caller's (its `site` tag).
pub(super) fn shows_scope(device: &serde_json::Value, caller: &Scope) -> bool {
    let site = device["tags"][TagKey::SITE]
        .as_str()
        .and_then(|s| TagValue::new(s).ok());
    caller.sees_site(site.as_ref())
}

/// Whether a rendered device holds every tag of `tags`.
pub(super) fn shows_tags(device: &serde_json::Value, tags: &[Tag]) -> bool {
    tags.iter()
        .all(|t| device["tags"][t.key.as_str()].as_str() == Some(t.value.as_str()))
}

pub(super) fn index_position(state: &CursorState) -> Result<IndexPosition, ApiError> {
    let [(label, after)] = state.parts.as_slice() else {
        return Err(bad_cursor());
    };
    let pos = IndexPosition {
        partition: label.parse().map_err(|_| bad_cursor())?,
        after: match after.as_deref() {
            None => None,
            Some([sk]) => Some(sk.clone()),
            Some(_) => return Err(bad_cursor()),
        },
    };
    if !pos.is_valid() {
        return Err(bad_cursor());
    }
    Ok(pos)
}
