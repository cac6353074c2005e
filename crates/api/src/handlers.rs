//! One function per route. Each validates everything before touching the store.

use std::collections::HashMap;

use futures::future::try_join_all;
use futures::{StreamExt, TryStreamExt};
use http::StatusCode;
use lambda_http::Request;
use serde_json::{Value, json};
use tidemark_schema::table::attr;
use tidemark_schema::{
    AlertState, DeviceId, DeviceStatus, EntityKey, Period, Severity, ShardConfigItem, ShardHistory,
    ShardHistoryError, Timestamp, keys,
};
use tidemark_store::Item;

use crate::App;
use crate::cursor::CursorState;
use crate::error::ApiError;
use crate::merge::{Source, merged_page};
use crate::render;
use crate::request::{Params, path_segments, query_pairs};
use crate::routes::{Route, Scope, resolve};
use crate::store::{Place, QuerySpec, SkRange, Store};
use crate::validate;

mod alert_actions;

type Reply = (StatusCode, Value);

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Devices `GET /latest` reads at once.
const LATEST_CONCURRENCY: usize = 16;
/// The label of a partition that is not sharded, in cursors.
const WHOLE: &str = "-";

/// `true` when the item's `ttl` (epoch seconds) has passed: DynamoDB deletes expired items
/// only eventually (up to days later), so reads drop them themselves.
fn expired(item: &Item, now: Timestamp) -> bool {
    item.get(attr::TTL)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<i64>().ok())
        .is_some_and(|ttl| ttl < now.epoch_seconds())
}

fn shard_label(shard: Option<u16>) -> String {
    shard.map_or_else(|| WHOLE.to_owned(), |n| n.to_string())
}

fn parse_shard_label(label: &str) -> Option<Option<u16>> {
    if label == WHOLE {
        return Some(None);
    }
    label
        .parse::<u16>()
        .ok()
        .filter(|n| *n < tidemark_schema::shard::MAX_SHARDS)
        .map(Some)
}

fn list(items: Vec<Value>, cursor: Option<String>) -> Reply {
    (StatusCode::OK, json!({"items": items, "cursor": cursor}))
}

fn bad_cursor() -> ApiError {
    ApiError::bad(
        "cursor",
        "not a cursor returned by this query; start again without one",
    )
}

/// With a JWT authorizer API Gateway already checked the route's scope; this holds the
/// function to the same map (and to it alone, should a route be misconfigured). Without JWT
/// claims (IAM auth, or a local stack) there are no scopes to check.
fn require_scope(req: &Request, scope: Scope) -> Result<(), ApiError> {
    use lambda_http::RequestExt;
    use lambda_http::request::RequestContext;
    let Some(RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref() else {
        return Ok(());
    };
    let Some(jwt) = ctx.authorizer.as_ref().and_then(|a| a.jwt.as_ref()) else {
        return Ok(());
    };
    if jwt
        .scopes
        .as_ref()
        .is_some_and(|s| s.iter().any(|s| s == scope.as_str()))
    {
        Ok(())
    } else {
        Err(ApiError::Forbidden(scope.as_str()))
    }
}

fn device_not_found(id: &DeviceId) -> ApiError {
    ApiError::NotFound(format!("device {id} is not registered"))
}

impl<S: Store> App<S> {
    pub(crate) async fn dispatch(&self, req: &Request) -> Result<Reply, ApiError> {
        let segments = path_segments(req)?;
        let m = resolve(req.method(), &segments)?;
        require_scope(req, m.route.scope())?;
        let pairs = query_pairs(req)?;
        let id = || validate::device_id(&m.params[0]);
        let p = Params::new(pairs, m.query)?;
        let p = &p;
        match m.route {
            Route::GetDevice => self.get_device(id()?).await,
            Route::PutDevice => self.put_device(id()?, req.body().as_ref()).await,
            Route::GetShards => self.get_shards(id()?).await,
            Route::PutShards => self.put_shards(id()?, req.body().as_ref()).await,
            Route::ListDevices => self.list_devices(p).await,
            Route::Readings => self.readings(id()?, p).await,
            Route::LatestReading => self.latest_reading(id()?).await,
            Route::LatestOfDevices => self.latest_of_devices(p).await,
            Route::DeviceAlerts => self.device_alerts(id()?, p).await,
            Route::AckAlert => self.ack(id()?, validate::alert_id(&m.params[1])?).await,
            Route::SnoozeAlert => {
                let alert = validate::alert_id(&m.params[1])?;
                self.snooze(id()?, alert, req.body().as_ref()).await
            }
            Route::UnsnoozeAlert => {
                self.unsnooze(id()?, validate::alert_id(&m.params[1])?)
                    .await
            }
            Route::Alerts => self.alerts(p).await,
            Route::Aggregates => self.aggregates(id()?, p).await,
            Route::Quarantine => self.quarantine(p).await,
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.config.clock.now()
    }

    /// Opens the cursor (if any) or starts every partition; then reads one merged page.
    /// `spec_for` maps a partition label to its query, `None` for a label this query never
    /// makes (only a bug could sign one; treated as a bad cursor).
    async fn page(
        &self,
        scope: &str,
        start: Start,
        spec_for: impl Fn(&str) -> Option<QuerySpec>,
        limit: usize,
        keep: impl Fn(&Item) -> bool,
    ) -> Result<(Vec<Item>, Option<String>), ApiError> {
        let (range, parts) = match start {
            Start::Fresh { range, labels } => {
                (range, labels.into_iter().map(|l| (l, None)).collect())
            }
            Start::Resume(state) => (state.range, state.parts),
        };
        let mut sources = Vec::with_capacity(parts.len());
        for (label, after) in parts {
            let spec = spec_for(&label).ok_or_else(bad_cursor)?;
            if after
                .as_ref()
                .is_some_and(|a| a.len() != spec.position_attrs().len())
            {
                return Err(bad_cursor());
            }
            // A position the range has moved past (the retention edge overtook a cursor kept
            // too long) is not a valid ExclusiveStartKey: DynamoDB would refuse it. The
            // readings between it and the edge have expired, so the walk goes on from the
            // edge, or the partition is done if the walk was heading away from it.
            let after = match after.as_ref().map(|a| spec.place_of(&a[0])) {
                Some(Place::Inside) | None => after,
                Some(Place::Before) if spec.forward => None,
                Some(Place::After) if !spec.forward => None,
                Some(_) => continue,
            };
            sources.push(Source { label, spec, after });
        }
        let page = merged_page(&self.store, sources, limit, keep).await?;
        let cursor = (!page.rest.is_empty()).then(|| {
            self.cursor_key().seal(
                scope,
                &CursorState {
                    range,
                    parts: page.rest,
                },
            )
        });
        Ok((page.items, cursor))
    }

    fn open(&self, scope: &str, p: &Params) -> Result<Option<CursorState>, ApiError> {
        p.get("cursor")
            .map(|c| self.cursor_key().open(scope, c))
            .transpose()
    }

    async fn device_exists(&self, id: &DeviceId) -> Result<bool, ApiError> {
        Ok(self
            .store
            .get(EntityKey::Device(id.clone()).key(), false)
            .await?
            .is_some())
    }

    async fn get_device(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let item = self
            .store
            .get(EntityKey::Device(id.clone()).key(), true)
            .await?
            .ok_or_else(|| device_not_found(&id))?;
        Ok((StatusCode::OK, render::device_item(item)?))
    }

    pub(crate) fn within_body_limit<'b>(&self, body: &'b [u8]) -> Result<&'b [u8], ApiError> {
        if body.len() > self.config.max_body_bytes {
            return Err(ApiError::PayloadTooLarge {
                size: body.len(),
                limit: self.config.max_body_bytes,
            });
        }
        Ok(body)
    }

    async fn put_device(&self, id: DeviceId, body: &[u8]) -> Result<Reply, ApiError> {
        let body = self.within_body_limit(body)?;
        let reg = validate::registration(id, body, self.config.status_shards)?;
        let now = self.now();
        let put = self.store.put_device(&reg, now).await?;
        let status = if put.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok((status, render::device(&put.device)?))
    }

    async fn list_devices(&self, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let status = p
            .get("status")
            .map(|s| DeviceStatus::parse(s).map_err(|e| ApiError::bad("status", e.to_string())))
            .transpose()?;
        let scope = format!("devices|{}", status.map_or("-", |s| s.as_str()));
        // Devices may sit under the plain status key (registered before status sharding, or
        // by the pipeline) or under one of its shards: list them all, merged by device ID.
        let shards = self.config.status_shards;
        let shard_labels = |st: DeviceStatus| {
            let mut v = vec![st.as_str().to_owned()];
            if shards > 1 {
                v.extend((0..shards).map(|n| format!("{st}#{n}")));
            }
            v
        };
        let start = match self.open(&scope, p)? {
            Some(s) => Start::Resume(s),
            None => Start::Fresh {
                range: None,
                labels: status
                    .map_or(DeviceStatus::ALL.to_vec(), |s| vec![s])
                    .into_iter()
                    .flat_map(shard_labels)
                    .collect(),
            },
        };
        let spec_for = |label: &str| {
            let (st, n) = match label.split_once('#') {
                Some((st, n)) => (st, Some(n.parse::<u16>().ok()?)),
                None => (label, None),
            };
            let st = DeviceStatus::parse(st).ok()?;
            Some(QuerySpec::gsi1(
                keys::status_gsi1pk(st, n),
                SkRange::BeginsWith(keys::DEVICE_PREFIX.to_owned()),
                true,
            ))
        };
        let (items, cursor) = self.page(&scope, start, spec_for, limit, |_| true).await?;
        let items = items
            .into_iter()
            .map(render::device_item)
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
    }

    /// The shard history and whether the device is registered, in one BatchGetItem.
    async fn shards_of(&self, id: &DeviceId) -> Result<Shards, ApiError> {
        let cfg_key = EntityKey::ShardConfig(id.clone()).key();
        let dev_key = EntityKey::Device(id.clone()).key();
        let items = self
            .store
            .batch_get(vec![cfg_key.clone(), dev_key.clone()])
            .await?;
        let mut out = Shards::default();
        for item in items {
            let sk = item.get(attr::SK).and_then(|v| v.as_s().ok());
            if sk == Some(&cfg_key.sk) {
                let c: ShardConfigItem = tidemark_store::from_item(item)?;
                out.history = c.epochs;
                out.version = c.version;
            } else if sk == Some(&dev_key.sk) {
                out.exists = true;
            }
        }
        if !out.exists {
            return Err(device_not_found(id));
        }
        Ok(out)
    }

    async fn get_shards(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let s = self.shards_of(&id).await?;
        Ok((StatusCode::OK, render::shards(&id, &s.history, self.now())))
    }

    /// Schedules a shard-count change of a hot device. It takes effect no earlier than
    /// ingest containers can have learnt of it ([`tidemark_schema::ShardLead`]), so every
    /// reading, in flight or re-sent, keeps the partition it was or will be written to, and
    /// nothing moves. An announced change not yet in use is replaced; repeating a change is
    /// a no-op; of two racing changes one gets a 409.
    async fn put_shards(&self, id: DeviceId, body: &[u8]) -> Result<Reply, ApiError> {
        let change = validate::shard_change(self.within_body_limit(body)?)?;
        let now = self.now();
        let lead = self.config.shard_lead;
        let from = change
            .effective_from
            .unwrap_or_else(|| lead.earliest_change(now));
        let current = self.shards_of(&id).await?;
        let next = current
            .history
            .planned(from, change.count, now, lead)
            .map_err(|e| match e {
                ShardHistoryError::Count(_) => ApiError::bad("count", e.to_string()),
                ShardHistoryError::TooSoon { .. } => ApiError::bad("effectiveFrom", e.to_string()),
                ShardHistoryError::NotAfterLast { .. } => ApiError::Conflict(e.to_string()),
            })?;
        if next != current.history
            && !self
                .store
                .replace_shards(&id, &next, current.version)
                .await?
        {
            return Err(ApiError::Conflict(format!(
                "the shard history of device {id} changed while this request ran; read it \
                 (GET /devices/{id}/shards) and try again"
            )));
        }
        Ok((StatusCode::OK, render::shards(&id, &next, now)))
    }

    /// Readings of a range (AP3), across every shard the device had over it.
    ///
    /// Expired readings: a reading's `ttl` is its time plus the retention, so every reading
    /// older than `now - retention` is expired and every newer one is not. The key condition
    /// starts at that instant, so DynamoDB never reads the expired ones; the check after the
    /// read only catches readings written under a shorter retention, a small minority, which
    /// is why it is not the "filter that throws most items away" DESIGN §6 forbids.
    async fn readings(&self, id: DeviceId, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let forward = validate::order(p, true)?;
        let scope = format!(
            "readings|{id}|{}|{}",
            validate::range_scope(p)?,
            if forward { "asc" } else { "desc" }
        );
        let now = self.now();
        let (start, (from, to)) = match self.open(&scope, p)? {
            Some(state) => {
                let r = resume_range(&state)?;
                (Start::Resume(state), r)
            }
            None => {
                let (from, to) = validate::range(p, now, HOUR_MS)?;
                let history = self.shards_of(&id).await?.history;
                let lo = from.max(self.config.retention_start(now));
                let labels = if lo > to {
                    Vec::new()
                } else {
                    history
                        .shards_over(lo, to)
                        .into_iter()
                        .map(shard_label)
                        .collect()
                };
                (
                    Start::Fresh {
                        range: Some((from.to_string(), to.to_string())),
                        labels,
                    },
                    (from, to),
                )
            }
        };
        let lo = from.max(self.config.retention_start(now));
        if lo > to {
            return Ok(list(Vec::new(), None));
        }
        let spec_for = |label: &str| {
            let shard = parse_shard_label(label)?;
            Some(QuerySpec::table(
                keys::reading_pk(&id, shard),
                SkRange::Between(keys::reading_sk(lo), keys::reading_sk(to)),
                forward,
            ))
        };
        let (items, cursor) = self
            .page(&scope, start, spec_for, limit, |it| !expired(it, now))
            .await?;
        let items = items
            .into_iter()
            .map(render::reading)
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
    }

    /// The newest unexpired reading (AP4).
    async fn latest_reading(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let now = self.now();
        let history = self.shards_of(&id).await?.history;
        let newest = self
            .newest_reading(&id, &history, now, true)
            .await?
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "device {id} has no readings in the last {} days",
                    self.config.retention_days
                ))
            })?;
        Ok((StatusCode::OK, render::reading(newest)?))
    }

    /// A newest-first query of one item on every shard that may hold an unexpired reading
    /// of the device, in parallel; the newest of their answers.
    async fn newest_reading(
        &self,
        id: &DeviceId,
        history: &ShardHistory,
        now: Timestamp,
        consistent: bool,
    ) -> Result<Option<Item>, ApiError> {
        let lo = self.config.retention_start(now);
        let specs: Vec<QuerySpec> = history
            .shards_over(lo, Timestamp::MAX)
            .into_iter()
            .map(|shard| QuerySpec {
                consistent,
                ..QuerySpec::table(
                    keys::reading_pk(id, shard),
                    SkRange::Between(keys::reading_sk(lo), keys::reading_sk(Timestamp::MAX)),
                    false,
                )
            })
            .collect();
        let pages = try_join_all(specs.iter().map(|s| self.store.query(s, None, 1))).await?;
        let sk = |i: &Item| i.get(attr::SK).and_then(|v| v.as_s().ok()).cloned();
        Ok(pages
            .into_iter()
            .flat_map(|p| p.items)
            .filter(|it| !expired(it, now))
            .max_by_key(sk))
    }

    /// Latest reading of up to 100 devices, read from their reading partitions (so as
    /// fresh as ingest): one BatchGetItem for their shard counts, then a one-item query per
    /// device and live shard, [`LATEST_CONCURRENCY`] devices at a time.
    async fn latest_of_devices(&self, p: &Params) -> Result<Reply, ApiError> {
        let raw = p.get("ids").ok_or_else(|| {
            ApiError::bad("ids", "required: a comma-separated list of device IDs")
        })?;
        let mut ids: Vec<DeviceId> = Vec::new();
        for part in raw.split(',') {
            let id = DeviceId::new(part).map_err(|e| ApiError::bad("ids", e.to_string()))?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        if ids.len() > validate::MAX_IDS {
            return Err(ApiError::bad(
                "ids",
                format!("{} IDs; at most {} at once", ids.len(), validate::MAX_IDS),
            ));
        }
        let configs = self
            .store
            .batch_get(
                ids.iter()
                    .map(|id| EntityKey::ShardConfig(id.clone()).key())
                    .collect(),
            )
            .await?;
        let mut histories: HashMap<DeviceId, ShardHistory> = HashMap::new();
        for item in configs {
            let c: ShardConfigItem = tidemark_store::from_item(item)?;
            if let Ok(EntityKey::ShardConfig(id)) = EntityKey::parse(&c.pk, &c.sk) {
                histories.insert(id, c.epochs);
            }
        }
        let now = self.now();
        let none = ShardHistory::default();
        let lo = self.config.retention_start(now);
        let queries: usize = ids
            .iter()
            .map(|id| {
                histories
                    .get(id)
                    .unwrap_or(&none)
                    .shards_over(lo, Timestamp::MAX)
                    .len()
            })
            .sum();
        if queries > validate::MAX_LATEST_QUERIES {
            return Err(ApiError::bad(
                "ids",
                format!(
                    "these {} devices span {queries} partitions (their shards); at most {} \
                     can be read in one request: ask for fewer devices",
                    ids.len(),
                    validate::MAX_LATEST_QUERIES
                ),
            ));
        }
        let reads: Vec<_> = ids
            .iter()
            .map(|id| self.newest_reading(id, histories.get(id).unwrap_or(&none), now, false))
            .collect();
        let newest: Vec<Option<Item>> = futures::stream::iter(reads)
            .buffered(LATEST_CONCURRENCY)
            .try_collect()
            .await?;
        let out = newest
            .into_iter()
            .flatten()
            .map(render::reading)
            .collect::<Result<_, _>>()?;
        Ok(list(out, None))
    }

    /// Alerts of one device, newest first (AP5): alert IDs start with their opening time.
    async fn device_alerts(&self, id: DeviceId, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let scope = format!("device-alerts|{id}");
        let start = match self.open(&scope, p)? {
            Some(s) => Start::Resume(s),
            None => {
                if !self.device_exists(&id).await? {
                    return Err(device_not_found(&id));
                }
                Start::whole()
            }
        };
        let spec_for = |label: &str| {
            (label == WHOLE).then(|| {
                QuerySpec::table(
                    keys::device_pk(&id),
                    SkRange::BeginsWith(keys::ALERT_PREFIX.to_owned()),
                    false,
                )
            })
        };
        let (items, cursor) = self.page(&scope, start, spec_for, limit, |_| true).await?;
        let items = items
            .into_iter()
            .map(render::alert)
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
    }

    /// Unresolved alerts fleet-wide (AP6), newest first, from GSI1.
    ///
    /// Only open and acknowledged alerts are in the index (resolving removes the keys), so
    /// `state=resolved` is a 400 rather than a Scan: resolved alerts are listed per device.
    /// `state=open|acknowledged` filters within the index, where both states are alerts still
    /// needing attention, so the filter drops a minority, never the bulk of the table.
    async fn alerts(&self, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let severity = p
            .get("severity")
            .map(|s| Severity::parse(s).map_err(|e| ApiError::bad("severity", e.to_string())))
            .transpose()?;
        let state = match p.get("state") {
            None => None,
            Some("open") => Some(AlertState::Open),
            Some("acknowledged") => Some(AlertState::Acknowledged),
            Some("resolved") => {
                return Err(ApiError::bad(
                    "state",
                    "resolved alerts are not indexed fleet-wide; list a device's alerts \
                     (GET /devices/{id}/alerts) to see resolved ones",
                ));
            }
            Some(s) => {
                return Err(ApiError::bad(
                    "state",
                    format!("{s:?} is not one of: open, acknowledged"),
                ));
            }
        };
        let state_str = state.map(|s| match s {
            AlertState::Open => "open",
            AlertState::Acknowledged => "acknowledged",
            AlertState::Resolved => "resolved",
        });
        let scope = format!(
            "alerts|{}|{}",
            severity.map_or("-", |s| s.as_str()),
            state_str.unwrap_or("-")
        );
        let start = match self.open(&scope, p)? {
            Some(s) => Start::Resume(s),
            None => Start::Fresh {
                range: None,
                labels: severity
                    .map_or(Severity::ALL.to_vec(), |s| vec![s])
                    .into_iter()
                    .map(|s| s.as_str().to_owned())
                    .collect(),
            },
        };
        let spec_for = |label: &str| {
            let sev = Severity::parse(label).ok()?;
            Some(QuerySpec {
                filter_eq: state_str.map(|s| (tidemark_schema::field::STATE, s.to_owned())),
                ..QuerySpec::gsi1(
                    keys::severity_gsi1pk(sev),
                    SkRange::BeginsWith(keys::ALERT_PREFIX.to_owned()),
                    false,
                )
            })
        };
        let (items, cursor) = self.page(&scope, start, spec_for, limit, |_| true).await?;
        let items = items
            .into_iter()
            .map(render::alert)
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
    }

    /// Hourly or daily rollups of a range (AP7): buckets whose start lies in `[from, to]`,
    /// widened to the buckets holding `from` and `to`.
    async fn aggregates(&self, id: DeviceId, p: &Params) -> Result<Reply, ApiError> {
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
        let items = items
            .into_iter()
            .map(render::aggregate)
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
    }

    /// Quarantined records of a UTC day (default today), oldest first, merged over the
    /// day's partitions, each with its whole payload (put back together from its parts). A
    /// page holds at most [`QUARANTINE_PAGE_BYTES`] of payload (and always one record), so a
    /// page of megabyte records stays within Lambda's response limit.
    async fn quarantine(&self, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let now = self.now();
        let asked = p
            .get("day")
            .map(|s| {
                tidemark_schema::Day::parse(s)
                    .map_err(|e| ApiError::bad("day", format!("{e} (expected YYYY-MM-DD)")))
            })
            .transpose()?;
        // Without `day` the listing is of today, as of its first page: the day travels in the
        // (signed) cursor, so a walk started before midnight goes on with the same day.
        let scope = match asked {
            Some(d) => format!("quarantine|{d}"),
            None => "quarantine|today".to_owned(),
        };
        let start = || -> Result<(Start, tidemark_schema::Day), ApiError> {
            Ok(match self.open(&scope, p)? {
                Some(s) => {
                    let day = s
                        .range
                        .as_ref()
                        .and_then(|(d, _)| tidemark_schema::Day::parse(d).ok())
                        .ok_or_else(bad_cursor)?;
                    (Start::Resume(s), day)
                }
                None => {
                    let day = asked.unwrap_or(now.day());
                    let labels = (0..keys::QUARANTINE_PARTITIONS)
                        .map(|n| n.to_string())
                        .collect();
                    let range = Some((day.to_string(), day.to_string()));
                    (Start::Fresh { range, labels }, day)
                }
            })
        };
        let (first, day) = start()?;
        let spec_for = |label: &str| {
            let n = label
                .parse::<u16>()
                .ok()
                .filter(|n| *n < keys::QUARANTINE_PARTITIONS)?;
            Some(QuerySpec::table(
                keys::quarantine_pk(day, n),
                SkRange::All,
                true,
            ))
        };
        // A record's further payload parts share its partition; they are read by key below.
        let keep = |it: &Item| !expired(it, now) && render::is_quarantined_record(it);
        let (mut items, mut cursor) = self.page(&scope, first, spec_for, limit, keep).await?;
        let fitting = render::records_within(&items, QUARANTINE_PAGE_BYTES);
        if fitting < items.len() {
            // The same page again, shorter: the cursor then points after the last record kept.
            (items, cursor) = self
                .page(&scope, start()?.0, spec_for, fitting, keep)
                .await?;
        }
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let parts = render::quarantine_part_keys(&item)?;
            let parts = if parts.is_empty() {
                Vec::new()
            } else {
                self.store.batch_get(parts).await?
            };
            out.push(render::quarantined(item, parts)?);
        }
        Ok(list(out, cursor))
    }
}

/// Payload bytes one page of `GET /quarantine` carries at most (base64 makes it a third more;
/// Lambda's response limit is 6 MB).
pub const QUARANTINE_PAGE_BYTES: u64 = 3 * 1024 * 1024;

/// A device's stored shard history.
#[derive(Debug, Default)]
struct Shards {
    history: ShardHistory,
    version: u64,
    exists: bool,
}

/// Where a list starts: fresh (every partition from its beginning) or from a cursor.
enum Start {
    Fresh {
        range: Option<(String, String)>,
        labels: Vec<String>,
    },
    Resume(CursorState),
}

impl Start {
    fn whole() -> Self {
        Start::Fresh {
            range: None,
            labels: vec![WHOLE.to_owned()],
        }
    }
}

/// The range a cursor fixed on its first page.
fn resume_range(state: &CursorState) -> Result<(Timestamp, Timestamp), ApiError> {
    let (f, t) = state.range.as_ref().ok_or_else(bad_cursor)?;
    let from = Timestamp::parse_canonical(f).map_err(|_| bad_cursor())?;
    let to = Timestamp::parse_canonical(t).map_err(|_| bad_cursor())?;
    Ok((from, to))
}
