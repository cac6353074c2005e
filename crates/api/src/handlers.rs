//! One function per route. Each validates everything before touching the store.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use http::StatusCode;
use lambda_http::Request;
use serde_json::{Value, json};
use tidemark_schema::table::attr;
use tidemark_schema::{
    AlertState, DeviceId, DeviceItem, DeviceStatus, EntityKey, QuarantineReason, Severity,
    Timestamp, keys,
};
use tidemark_store::Item;
use tidemark_store::read::{PagedPartition, interleaved_page};

use crate::App;
use crate::access::{self, Rule, Scope};
use crate::cursor::CursorState;
use crate::error::ApiError;
use crate::render;
use crate::request::{Params, path_segments, query_pairs};
use crate::routes::{Route, resolve};
#[allow(unused_imports)]
use crate::store::traits::*;
use crate::store::{AlertOwner, QuerySpec, SkRange, Store};
use crate::validate;

mod aggregates;
mod alert_actions;
mod groups;
mod layout;
mod readings;
mod series;
mod tagging;

type Reply = (StatusCode, Value);

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Devices `GET /latest` reads at once.
const LATEST_CONCURRENCY: usize = 16;
/// The label of a device's only partition, in cursors.
const WHOLE: &str = "-";

/// `true` when the item's `ttl` (epoch seconds) has passed: DynamoDB deletes expired items
/// only eventually (up to days later), so reads drop them themselves.
fn expired(item: &Item, now: Timestamp) -> bool {
    item.get(attr::TTL)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<i64>().ok())
        .is_some_and(|ttl| ttl < now.epoch_seconds())
}

fn partition_label(shard: Option<u16>) -> String {
    shard.map_or_else(|| WHOLE.to_owned(), |n| n.to_string())
}

fn parse_partition_label(label: &str) -> Option<Option<u16>> {
    if label == WHOLE {
        return Some(None);
    }
    label
        .parse::<u16>()
        .ok()
        .filter(|n| *n < tidemark_schema::partition::MAX_PARTITIONS)
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
fn require_scope(req: &Request, scope: &str) -> Result<(), ApiError> {
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
        .is_some_and(|s| s.iter().any(|s| s == scope))
    {
        Ok(())
    } else {
        Err(ApiError::Forbidden(scope.to_owned()))
    }
}

fn device_not_found(id: &DeviceId) -> ApiError {
    ApiError::NotFound(format!("device {id} is not registered"))
}

/// The group a path names (`/groups/{group}/…`) as an alert's owner, if it is one of the
/// caller's ([`Scope::sees_group`]).
fn callers_group(raw: &str, caller: &Scope) -> Result<AlertOwner, ApiError> {
    let group = validate::group(raw)?;
    if !caller.sees_group(&group) {
        return Err(ApiError::OutsideScope(format!(
            "group {group} is not one of the sites this caller may see"
        )));
    }
    Ok(AlertOwner::Group(group))
}

impl<S: Store> App<S> {
    pub(crate) async fn dispatch(&self, req: &Request) -> Result<Reply, ApiError> {
        let segments = path_segments(req)?;
        // Who is asking, before anything is said about routes (401 without a token's claims
        // where the deployment takes tokens).
        let caller = Scope::of_request(req, &self.config)?;
        let m = resolve(req.method(), &segments)?;
        require_scope(req, self.config.scopes.name(m.route.scope()))?;
        // Before anything is read: a caller past its limit costs this one write.
        self.count_caller(req).await?;
        caller.clone().serve(self.route(req, &m, &caller)).await
    }

    /// Counts the request against its caller's limit per minute (`CALLER_RATE_LIMIT`,
    /// [`crate::rate`]): a 429 past it. Off (0), or for a request naming no caller, nothing is
    /// written. A count that fails lets the request through (the limit fails open).
    async fn count_caller(&self, req: &Request) -> Result<(), ApiError> {
        let limit = self.config.caller_rate_limit;
        if limit == 0 {
            return Ok(());
        }
        let Some(caller) = crate::rate::caller_of(req) else {
            return Ok(());
        };
        let now = self.config.clock.now();
        let count = tidemark_schema::CallerRateItem::new(&caller, now);
        match self.store.count_call(&count, limit).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ApiError::RateLimited {
                limit,
                retry_after: tidemark_schema::seconds_left_in_minute(now),
            }),
            Err(e) => {
                tracing::warn!(error = ?e, "counting the caller's request failed; served uncounted");
                Ok(())
            }
        }
    }

    /// Answers a matched route for `caller`: a route naming a device first checks the device
    /// is the caller's ([`Rule::DeviceScoped`]); lists and groups keep to it as they read.
    async fn route(
        &self,
        req: &Request,
        m: &crate::routes::Matched,
        caller: &Scope,
    ) -> Result<Reply, ApiError> {
        let pairs = query_pairs(req)?;
        let id = || validate::device_id(&m.params[0]);
        let p = Params::new(pairs, m.query)?;
        let p = &p;
        if *caller != Scope::All {
            match access::rule(req.method(), m.template) {
                Rule::DeviceScoped => self.callers_device(&id()?, caller).await?,
                Rule::FleetWideAdminOnly => {
                    return Err(ApiError::OutsideScope(
                        "this route reads the whole fleet; a caller limited to sites may not \
                         use it"
                            .into(),
                    ));
                }
                Rule::FilteredList | Rule::SiteGroup | Rule::Public => {}
            }
        }
        match m.route {
            Route::GetDevice => self.get_device(id()?).await,
            Route::PutDevice => self.put_device(id()?, req.body().as_ref()).await,
            Route::GetShards => self.get_shards(id()?).await,
            Route::PutShards => self.put_shards(id()?, req.body().as_ref()).await,
            Route::GetLayout => self.get_layout(id()?).await,
            Route::PutLayout => self.put_layout(id()?, req.body().as_ref()).await,
            Route::ListDevices => self.list_devices(p).await,
            Route::Readings => self.readings(id()?, p).await,
            Route::LatestReading => self.latest_reading(id()?).await,
            Route::LatestOfDevices => self.latest_of_devices(p).await,
            Route::DeviceAlerts => self.device_alerts(id()?, p).await,
            Route::AckAlert => {
                let owner = AlertOwner::Device(id()?);
                self.ack(owner, validate::alert_id(&m.params[1])?).await
            }
            Route::SnoozeAlert => {
                let alert = validate::alert_id(&m.params[1])?;
                let owner = AlertOwner::Device(id()?);
                self.snooze(owner, alert, req.body().as_ref()).await
            }
            Route::UnsnoozeAlert => {
                let owner = AlertOwner::Device(id()?);
                self.unsnooze(owner, validate::alert_id(&m.params[1])?)
                    .await
            }
            Route::GroupAckAlert => {
                let owner = callers_group(&m.params[0], caller)?;
                self.ack(owner, validate::alert_id(&m.params[1])?).await
            }
            Route::GroupSnoozeAlert => {
                let alert = validate::alert_id(&m.params[1])?;
                let owner = callers_group(&m.params[0], caller)?;
                self.snooze(owner, alert, req.body().as_ref()).await
            }
            Route::GroupUnsnoozeAlert => {
                let owner = callers_group(&m.params[0], caller)?;
                self.unsnooze(owner, validate::alert_id(&m.params[1])?)
                    .await
            }
            Route::Alerts => self.alerts(p).await,
            Route::Aggregates => self.aggregates(id()?, p).await,
            Route::Series => self.series(id()?, p).await,
            Route::GroupSeries => self.group_series(p).await,
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
            if let Some(after) = resume_at(&spec, after)? {
                sources.push(PagedPartition::new(label, spec, after));
            }
        }
        let page = interleaved_page(&self.store, sources, limit, keep).await?;
        let cursor = (!page.rest.is_empty()).then(|| {
            self.cursor_key().seal(
                scope,
                &CursorState {
                    range,
                    at: None,
                    parts: page.rest,
                    ..CursorState::default()
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

    /// The device's item, read strongly `consistent` or not; `None` when it is not registered.
    pub(crate) async fn device_item(
        &self,
        id: &DeviceId,
        consistent: bool,
    ) -> Result<Option<Item>, ApiError> {
        Ok(self
            .store
            .get(EntityKey::Device(id.clone()).key(), consistent)
            .await?)
    }

    /// A device outside a scoped caller's sites is, to that caller, not registered: the same
    /// 404 a missing device answers (one strongly consistent GetItem, so access follows a
    /// site change at once). A missing device is left to the route (`PUT` may create it).
    async fn callers_device(&self, id: &DeviceId, caller: &Scope) -> Result<(), ApiError> {
        match self.device_item(id, true).await? {
            Some(item) if !caller.sees(&tagging::stored_tags(&item)) => Err(device_not_found(id)),
            _ => Ok(()),
        }
    }

    async fn device_exists(&self, id: &DeviceId) -> Result<bool, ApiError> {
        Ok(self.device_item(id, false).await?.is_some())
    }

    /// The device item with `lastSeenAt` and `latest` taken from its newest stored reading
    /// when that is newer ([`DeviceItem::seen`]): a GetItem, the layouts' BatchGetItem and a
    /// newest-first query per shard of the newest layout.
    async fn get_device(&self, id: DeviceId) -> Result<Reply, ApiError> {
        let item = self
            .device_item(&id, true)
            .await?
            .ok_or_else(|| device_not_found(&id))?;
        let mut device: DeviceItem = tidemark_store::from_item(item)?;
        let history = self.history_of(&id).await?;
        if let Some(newest) = self.newest_reading(&id, &history, self.now(), true).await? {
            device.seen(render::latest(newest)?);
        }
        Ok((
            StatusCode::OK,
            render::device(&device, self.config.offline_after_default)?,
        ))
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
        let mut reg = validate::registration(id, body, self.config.status_partitions)?;
        self.stays_in_scope(&reg).await?;
        let now = self.now();
        let put = self.put_tagged(&mut reg, now).await?;
        let status = if put.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok((
            status,
            render::device(&put.device, self.config.offline_after_default)?,
        ))
    }

    /// A scoped caller may register a device, or change its tags, only into one of its
    /// sites: the tags the request leaves the device with must hold one of them.
    async fn stays_in_scope(&self, reg: &crate::store::DeviceRegistration) -> Result<(), ApiError> {
        let caller = Scope::caller();
        if caller == Scope::All {
            return Ok(());
        }
        let current = self
            .device_item(&reg.device_id, true)
            .await?
            .map(|i| tagging::stored_tags(&i))
            .unwrap_or_default();
        let after = if reg.tag_request.changes() {
            reg.tag_request.applied_to(&current)?
        } else {
            current
        };
        if caller.sees(&after) {
            return Ok(());
        }
        Err(ApiError::OutsideScope(format!(
            "device {} would be left outside the sites this caller may see: give it the tag \
             site with one of them",
            reg.device_id
        )))
    }

    async fn list_devices(&self, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let tags = validate::tag_filters(p)?;
        if let Some(c) = p.get("connectivity") {
            validate::connectivity(c, p.get("status").is_some())?;
            return self.offline_devices(p, limit, &tags).await;
        }
        let status = p
            .get("status")
            .map(|s| DeviceStatus::parse(s).map_err(|e| ApiError::bad("status", e.to_string())))
            .transpose()?;
        // A scoped caller's devices are listed from its sites' tag indexes.
        if !tags.is_empty() || Scope::caller() != Scope::All {
            return self.tagged_devices(p, tags, status, limit).await;
        }
        let scope = format!("devices|{}", status.map_or("-", |s| s.as_str()));
        // Devices may sit under the plain status key (registered before status sharding, or
        // by the pipeline) or under one of its shards: list them all, merged by device ID.
        let shards = self.config.status_partitions;
        let partition_labels = |st: DeviceStatus| {
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
                    .flat_map(partition_labels)
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
            .map(render::device_summary)
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
    }

    /// Offline devices by ID, from GSI2's offline partitions merged in ID order (keys only:
    /// the device items are read after, so each shows as `GET /devices/{id}` would); with
    /// `tags`, those of them whose device item holds every tag (a filter after the limit: a
    /// page may be short).
    async fn offline_devices(
        &self,
        p: &Params,
        limit: usize,
        tags: &[tidemark_schema::Tag],
    ) -> Result<Reply, ApiError> {
        let scope = &tagging::offline_scope(tags);
        let partitions = keys::offline_gsi2pks();
        let start = match self.open(scope, p)? {
            Some(s) => Start::Resume(s),
            None => Start::Fresh {
                range: None,
                labels: partitions.clone(),
            },
        };
        let spec_for = |label: &str| {
            partitions.iter().any(|p| p == label).then(|| {
                QuerySpec::gsi2(
                    label.to_owned(),
                    SkRange::BeginsWith(keys::DEVICE_PREFIX.to_owned()),
                    true,
                )
            })
        };
        let (found, cursor) = self.page(scope, start, spec_for, limit, |_| true).await?;
        let wanted: Vec<tidemark_schema::Key> = found
            .iter()
            .filter_map(|i| {
                let text = |a: &str| match i.get(a) {
                    Some(AttributeValue::S(s)) => Some(s.clone()),
                    _ => None,
                };
                EntityKey::parse(&text(attr::PK)?, &text(attr::SK)?)
                    .ok()
                    .map(|k| k.key())
            })
            .collect();
        let mut by_key: HashMap<(String, String), Item> = self
            .store
            .batch_get(wanted.clone())
            .await?
            .into_iter()
            .filter_map(|i| {
                let k = match (i.get(attr::PK), i.get(attr::SK)) {
                    (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => {
                        (pk.clone(), sk.clone())
                    }
                    _ => return None,
                };
                Some((k, i))
            })
            .collect();
        let window = self.config.offline_after_default;
        let caller = Scope::caller();
        // An item back online since the index was read is left out (the index lags).
        let items = wanted
            .into_iter()
            .filter_map(|k| by_key.remove(&(k.pk, k.sk)))
            .map(|i| render::device_item(i, window))
            .filter(|d| {
                d.as_ref().map_or(true, |v| {
                    v["connectivity"] == "offline"
                        && tagging::shows_tags(v, tags)
                        && tagging::shows_scope(v, &caller)
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
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
        let tags = validate::tag_filters(p)?;
        let mut scope = format!(
            "alerts|{}|{}",
            severity.map_or("-", |s| s.as_str()),
            state_str.unwrap_or("-")
        );
        for t in &tags {
            scope = format!("{scope}|{t}");
        }
        let start = match self.open(&scope, p)? {
            Some(s) => Start::Resume(s),
            None => Start::Fresh {
                range: None,
                labels: severity
                    .map_or(Severity::ALL.to_vec(), |s| vec![s])
                    .into_iter()
                    .flat_map(keys::severity_gsi1pks)
                    .collect(),
            },
        };
        let spec_for = |label: &str| {
            keys::parse_severity_gsi1pk(label)?;
            Some(QuerySpec {
                filter_eq: state_str.map(|s| (tidemark_schema::field::STATE, s.to_owned())),
                ..QuerySpec::gsi1(
                    label.to_owned(),
                    SkRange::BeginsWith(keys::ALERT_PREFIX.to_owned()),
                    false,
                )
            })
        };
        let (mut items, cursor) = self.page(&scope, start, spec_for, limit, |_| true).await?;
        if !tags.is_empty() || Scope::caller() != Scope::All {
            items = self.of_devices_holding(items, &tags).await?;
        }
        let items = self
            .with_rule_specs(items)
            .await?
            .into_iter()
            .map(render::alert)
            .collect::<Result<_, _>>()?;
        Ok(list(items, cursor))
    }

    /// `items` (alerts read from GSI1) with the `ruleSpec` of each rule's alert (window, rate,
    /// stuck, group), and a group alert's `members` and `offlineMembers` (or a window rule's
    /// `readings`), copied from its
    /// item: the index does not project them (adding them to the projection would mean
    /// rebuilding the index), so the page's rule alerts are read whole, one BatchGetItem,
    /// and none at all for a page of threshold and offline alerts. Only those are taken: the
    /// rest stays as the index answered it.
    async fn with_rule_specs(&self, mut items: Vec<Item>) -> Result<Vec<Item>, ApiError> {
        let key_of = |i: &Item| match (i.get(attr::PK), i.get(attr::SK)) {
            (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) => {
                Some((pk.clone(), sk.clone()))
            }
            _ => None,
        };
        let wanted: Vec<(String, String)> = items
            .iter()
            .filter(|i| {
                !i.contains_key(tidemark_schema::field::RULE_SPEC) && render::is_rule_alert(i)
            })
            .filter_map(key_of)
            .collect();
        if wanted.is_empty() {
            return Ok(items);
        }
        let keys = wanted
            .iter()
            .map(|(pk, sk)| EntityKey::parse(pk, sk).map(|k| k.key()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::Corrupt(e.to_string()))?;
        // A group alert's counts are not projected either: taken along.
        const TAKEN: [&str; 4] = [
            tidemark_schema::field::RULE_SPEC,
            tidemark_schema::field::MEMBERS,
            tidemark_schema::field::OFFLINE_MEMBERS,
            tidemark_schema::field::READINGS,
        ];
        let mut whole: HashMap<(String, String), Item> = self
            .store
            .batch_get(keys)
            .await?
            .into_iter()
            .filter_map(|w| Some((key_of(&w)?, w)))
            .collect();
        for i in &mut items {
            if let Some(mut w) = key_of(i).and_then(|k| whole.remove(&k)) {
                for f in TAKEN {
                    if let Some(v) = w.remove(f) {
                        i.insert(f.to_owned(), v);
                    }
                }
            }
        }
        Ok(items)
    }

    /// The alerts of `items` whose device holds every one of `tags` now (its latest declared
    /// tags) and is the caller's, and the group alerts whose group is all of `tags` and the
    /// caller's: one BatchGetItem of the page's devices. The page may come out short, or empty;
    /// its cursor goes on after the alerts read, kept or not.
    async fn of_devices_holding(
        &self,
        items: Vec<Item>,
        tags: &[tidemark_schema::Tag],
    ) -> Result<Vec<Item>, ApiError> {
        let device_of = |i: &Item| match i.get(tidemark_schema::field::DEVICE_ID) {
            Some(AttributeValue::S(s)) => DeviceId::new(s).ok(),
            _ => None,
        };
        let mut ids: Vec<DeviceId> = items.iter().filter_map(device_of).collect();
        ids.sort();
        ids.dedup();
        let keys = ids
            .into_iter()
            .map(|d| EntityKey::Device(d).key())
            .collect();
        let caller = Scope::caller();
        let holding: std::collections::HashSet<DeviceId> = self
            .store
            .batch_get(keys)
            .await?
            .into_iter()
            .filter_map(|i| tidemark_store::from_item::<DeviceItem>(i).ok())
            .filter(|d| d.tags.has_all(tags) && caller.sees(&d.tags))
            .map(|d| d.device_id)
            .collect();
        // A group rule's alert holds its group as its one tag.
        let group_holds = |i: &Item| {
            render::alert_group(i).is_some_and(|g| {
                tidemark_schema::Tags::new([(g.key.clone(), g.value.clone())].into())
                    .is_ok_and(|t| t.has_all(tags) && caller.sees(&t))
            })
        };
        Ok(items
            .into_iter()
            .filter(|i| device_of(i).is_some_and(|d| holding.contains(&d)) || group_holds(i))
            .collect())
    }

    /// Quarantined records of a UTC day (default today), oldest first, merged over the
    /// day's partitions, each with its whole payload (put back together from its parts). A
    /// page holds at most [`QUARANTINE_PAGE_BYTES`] of payload (and always one record), so a
    /// page of megabyte records stays within Lambda's response limit. `reason` keeps the
    /// records of one reason (`unprocessable`: what the pipeline set aside).
    async fn quarantine(&self, p: &Params) -> Result<Reply, ApiError> {
        let limit = validate::limit(p)?;
        let now = self.now();
        let reason = p
            .get("reason")
            .map(|r| {
                QuarantineReason::parse(r).ok_or_else(|| {
                    let known: Vec<&str> =
                        QuarantineReason::ALL.iter().map(|r| r.as_str()).collect();
                    ApiError::bad(
                        "reason",
                        format!("unknown reason; one of {}", known.join(", ")),
                    )
                })
            })
            .transpose()?;
        let asked = p
            .get("day")
            .map(|s| {
                tidemark_schema::Day::parse(s)
                    .map_err(|e| ApiError::bad("day", format!("{e} (expected YYYY-MM-DD)")))
            })
            .transpose()?;
        // Without `day` the listing is of today, as of its first page: the day travels in the
        // (signed) cursor, so a walk started before midnight goes on with the same day.
        let mut scope = match asked {
            Some(d) => format!("quarantine|{d}"),
            None => "quarantine|today".to_owned(),
        };
        if let Some(r) = reason {
            scope = format!("{scope}|{}", r.as_str());
        }
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
        let keep = |it: &Item| {
            !expired(it, now)
                && render::is_quarantined_record(it)
                && reason.is_none_or(|r| render::quarantine_reason(it) == Some(r))
        };
        let (mut items, mut cursor) = self.page(&scope, first, spec_for, limit, keep).await?;
        let fitting = render::records_within(&items, QUARANTINE_PAGE_BYTES);
        if fitting < items.len() {
            // The same page again, shorter: the cursor then points after the last record kept.
            (items, cursor) = self
                .page(&scope, start()?.0, spec_for, fitting, keep)
                .await?;
        }
        let items = self.callers_records(items).await?;
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

    /// The quarantined records a scoped caller sees: those whose partition key names one of
    /// its devices (with `DEVICE_IDENTITY=partition-key` the key is the device the record
    /// spoke for); a record whose key names no device of its sites is left out, so a page
    /// may come out short. One BatchGetItem of the page's devices.
    async fn callers_records(&self, items: Vec<Item>) -> Result<Vec<Item>, ApiError> {
        let caller = Scope::caller();
        if caller == Scope::All {
            return Ok(items);
        }
        let device_of = |i: &Item| match i.get("partitionKey") {
            Some(AttributeValue::S(s)) => DeviceId::new(s).ok(),
            _ => None,
        };
        let mut ids: Vec<DeviceId> = items.iter().filter_map(device_of).collect();
        ids.sort();
        ids.dedup();
        let devices = self.device_items(&ids).await?;
        Ok(items
            .into_iter()
            .filter(|i| {
                device_of(i)
                    .and_then(|d| devices.get(&d))
                    .is_some_and(|d| caller.sees(&tagging::stored_tags(d)))
            })
            .collect())
    }
}

/// Payload bytes one page of `GET /quarantine` carries at most (base64 makes it a third more;
/// Lambda's response limit is 6 MB).
pub const QUARANTINE_PAGE_BYTES: u64 = 3 * 1024 * 1024;

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

/// Where a partition resumes ([`QuerySpec::resume`]); a position that does not fit its
/// partition is a bad cursor.
#[allow(clippy::type_complexity)]
fn resume_at(
    spec: &QuerySpec,
    after: Option<Vec<String>>,
) -> Result<Option<Option<Vec<String>>>, ApiError> {
    spec.resume(after).map_err(|_| bad_cursor())
}

/// The range a cursor fixed on its first page.
fn resume_range(state: &CursorState) -> Result<(Timestamp, Timestamp), ApiError> {
    let (f, t) = state.range.as_ref().ok_or_else(bad_cursor)?;
    let from = Timestamp::parse_canonical(f).map_err(|_| bad_cursor())?;
    let to = Timestamp::parse_canonical(t).map_err(|_| bad_cursor())?;
    Ok((from, to))
}
