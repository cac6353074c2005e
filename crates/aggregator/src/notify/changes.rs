//! Stream records of alert items (decoded, [`crate::records::AlertRecord`]) → the state
//! changes to publish. Pure: no clock, no I/O; the same records always give the same changes
//! with the same IDs.

use aws_lambda_events::event::dynamodb::EventRecord;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tidemark_schema::{
    AlertId, AlertItem, AlertRule, AlertState, DeviceId, EntityKey, EventId, GroupAlertItem,
    GroupRuleSpec, MetricName, RuleSpec, Severity, Tag, Tags, Timestamp, keys,
};

use crate::records::{AlertRecordOf, Decoded, decode};

/// What happened to an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Opened,
    Acknowledged,
    Resolved,
    Snoozed,
    Unsnoozed,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Opened => "opened",
            ChangeKind::Acknowledged => "acknowledged",
            ChangeKind::Resolved => "resolved",
            ChangeKind::Snoozed => "snoozed",
            ChangeKind::Unsnoozed => "unsnoozed",
        }
    }

    /// Snooze silences what the readings do, never the snooze itself.
    fn silenced_by_snooze(self) -> bool {
        matches!(
            self,
            ChangeKind::Opened | ChangeKind::Acknowledged | ChangeKind::Resolved
        )
    }
}

/// One alert state change, ready to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertChange {
    /// Position of its stream record in the event (for partial batch failures).
    pub index: usize,
    pub kind: ChangeKind,
    /// The event's `detail`, `eventId` included.
    pub detail: Detail,
    /// The alert is snoozed past the change's time: counted, not published.
    pub suppressed: bool,
}

impl AlertChange {
    pub fn event_id(&self) -> &EventId {
        &self.detail.event_id
    }
}

/// The `detail` of an `Alert State Change` event (docs/guide.md, "Alert events"). Field names and
/// meanings are a published contract: add fields, never rename or drop one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    pub event_id: EventId,
    pub change: ChangeKind,
    /// The device whose alert it is; absent for a group rule's alert, which has `group`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_id: Option<DeviceId>,
    /// The group (`key:value`) of a group rule's alert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<Tag>,
    pub alert_id: AlertId,
    /// `threshold`, `offline`, `window`, `rate`, `stuck` or `group`.
    pub kind: &'static str,
    /// The metric of a threshold's or a rule's alert; absent for an offline one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<MetricName>,
    pub rule: AlertRule,
    /// The rule of `rules`, or the group rule, that raised it, as declared (absent for
    /// thresholds and offline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_spec: Option<AnyRuleSpec>,
    pub severity: Severity,
    /// The alert's state after the change.
    pub state: AlertState,
    /// The most extreme value seen while the alert was open.
    pub value: f64,
    pub threshold: f64,
    pub message: String,
    pub opened_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<Timestamp>,
    /// When the change happened: the alert's own time for it (openedAt, acknowledgedAt,
    /// resolvedAt), the stream record's creation time for a snooze change.
    pub changed_at: Timestamp,
    /// The alert in the API: `GET` it under the API's base URL.
    pub path: String,
    /// The device's tags as the alert item holds them (when it was opened or last written by
    /// the function that follows it), always an object: `{}` for a device without tags and
    /// for alerts written before tags existed. A rule routes on `detail.tags.<key>`. A group
    /// rule's alert carries its group as its one tag, so the same routing reaches it.
    pub tags: Tags,
}

/// A device's rule or a group rule, as declared.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AnyRuleSpec {
    Device(RuleSpec),
    Group(GroupRuleSpec),
}

/// What publishing needs of an alert item, device's or group's.
trait AlertImage {
    fn key(&self) -> keys::Key;
    fn state(&self) -> AlertState;
    fn acknowledged_at(&self) -> Option<Timestamp>;
    fn resolved_at(&self) -> Option<Timestamp>;
    fn snoozed_until(&self) -> Option<Timestamp>;
    fn opened_at(&self) -> Timestamp;
    fn last_breach_at(&self) -> Timestamp;
    /// The detail of a change of it (its ID, kind and time filled in by the caller).
    fn detail(&self, event_id: EventId, change: ChangeKind, changed_at: Timestamp) -> Detail;
}

/// The getters both alert items answer alike (their attributes are named the same).
macro_rules! same_attributes {
    () => {
        fn state(&self) -> AlertState {
            self.state
        }
        fn acknowledged_at(&self) -> Option<Timestamp> {
            self.acknowledged_at
        }
        fn resolved_at(&self) -> Option<Timestamp> {
            self.resolved_at
        }
        fn snoozed_until(&self) -> Option<Timestamp> {
            self.snoozed_until
        }
        fn opened_at(&self) -> Timestamp {
            self.opened_at
        }
        fn last_breach_at(&self) -> Timestamp {
            self.last_breach_at
        }
    };
}

/// A [`Detail`] of alert `$a`: the fields both alert items fill alike, and then those given
/// (who owns it, its metric, rule and tags).
macro_rules! detail_of {
    ($a:expr, $event_id:expr, $change:expr, $changed_at:expr, { $($field:ident: $value:expr),* $(,)? }) => {
        Detail {
            event_id: $event_id,
            change: $change,
            alert_id: $a.alert_id.clone(),
            kind: $a.rule.kind(),
            rule: $a.rule,
            severity: $a.severity,
            state: $a.state,
            value: $a.value,
            threshold: $a.threshold,
            message: $a.message.clone(),
            opened_at: $a.opened_at,
            acknowledged_at: $a.acknowledged_at,
            resolved_at: $a.resolved_at,
            snoozed_until: $a.snoozed_until,
            changed_at: $changed_at,
            $($field: $value),*
        }
    };
}

impl AlertImage for AlertItem {
    fn key(&self) -> keys::Key {
        EntityKey::Alert {
            device: self.device_id.clone(),
            alert: self.alert_id.clone(),
        }
        .key()
    }
    same_attributes!();
    fn detail(&self, event_id: EventId, change: ChangeKind, changed_at: Timestamp) -> Detail {
        detail_of!(self, event_id, change, changed_at, {
            path: format!("/devices/{}/alerts/{}", self.device_id, self.alert_id),
            device_id: Some(self.device_id.clone()),
            group: None,
            metric: self.metric.clone(),
            rule_spec: self.rule_spec.clone().map(AnyRuleSpec::Device),
            tags: self.tags.clone(),
        })
    }
}

impl AlertImage for GroupAlertItem {
    fn key(&self) -> keys::Key {
        EntityKey::GroupAlert {
            tag: self.group.clone(),
            alert: self.alert_id.clone(),
        }
        .key()
    }
    same_attributes!();
    fn detail(&self, event_id: EventId, change: ChangeKind, changed_at: Timestamp) -> Detail {
        let tags = Tags::new([(self.group.key.clone(), self.group.value.clone())].into())
            .unwrap_or_default();
        detail_of!(self, event_id, change, changed_at, {
            path: format!("/groups/{}/alerts/{}", self.group, self.alert_id),
            device_id: None,
            group: Some(self.group.clone()),
            metric: None,
            rule_spec: Some(AnyRuleSpec::Group(self.rule_spec.clone())),
            tags: tags,
        })
    }
}

/// The deterministic ID of a change: the alert's key, the stream record's sequence number
/// (leading zeros dropped, as DynamoDB Local pads them) and the kind. A replayed record gives
/// the same ID; a later write of the same alert has another sequence number, so another ID.
pub fn event_id(alert_key: &keys::Key, sequence: &str, kind: ChangeKind) -> EventId {
    let mut h = Sha256::new();
    for part in [
        alert_key.pk.as_str(),
        alert_key.sk.as_str(),
        sequence.trim_start_matches('0'),
        kind.as_str(),
    ] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let hex: String = h.finalize()[..EventId::LEN / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // 32 lowercase hex digits by construction.
    EventId::new(&hex).unwrap_or_else(|_| unreachable!("hex digest is a valid event ID"))
}

/// The kinds of change one record shows, in the order they happened.
fn transitions<T: AlertImage>(inserted: bool, old: Option<&T>, new: &T) -> Vec<ChangeKind> {
    let mut out = Vec::new();
    match (inserted, old) {
        (true, _) => {
            out.push(ChangeKind::Opened);
            if new.state() == AlertState::Acknowledged || new.acknowledged_at().is_some() {
                out.push(ChangeKind::Acknowledged);
            }
            if new.state() == AlertState::Resolved {
                out.push(ChangeKind::Resolved);
            }
        }
        (false, Some(old)) => {
            // A resolved alert whose episode a correction or late reading showed never ended
            // (this record's sequence number gives it an ID of its own).
            if old.state() == AlertState::Resolved && new.state() != AlertState::Resolved {
                out.push(ChangeKind::Opened);
            }
            if old.state() == AlertState::Open && new.state() == AlertState::Acknowledged {
                out.push(ChangeKind::Acknowledged);
            }
            if old.state() != AlertState::Resolved && new.state() == AlertState::Resolved {
                out.push(ChangeKind::Resolved);
            }
            match (old.snoozed_until(), new.snoozed_until()) {
                (o, Some(n)) if o != Some(n) => out.push(ChangeKind::Snoozed),
                (Some(_), None) => out.push(ChangeKind::Unsnoozed),
                _ => {}
            }
        }
        _ => {}
    }
    out
}

/// Every alert state change in `records`: INSERT → `opened` (and `acknowledged`/`resolved`
/// when the item is born so, e.g. a one-reading spike); MODIFY → one change per transition
/// between the old and new image (resolved → open or acknowledged, a reopening: `opened`).
/// REMOVEs, other items and unreadable alert images (logged) give nothing.
pub fn alert_changes(records: &[EventRecord]) -> Vec<AlertChange> {
    let decoded: Vec<Decoded> = records
        .iter()
        .enumerate()
        .map(|(i, r)| decode(i, r))
        .collect();
    changes_of(&decoded)
}

/// [`alert_changes`] of records decoded already.
pub fn changes_of(records: &[Decoded]) -> Vec<AlertChange> {
    records
        .iter()
        .flat_map(|r| match r {
            Decoded::Alert(a) => record_changes(a.as_ref()),
            Decoded::GroupAlert(a) => record_changes(a.as_ref()),
            _ => Vec::new(),
        })
        .collect()
}

/// The state changes one alert record shows.
fn record_changes<T: AlertImage>(rec: &AlertRecordOf<T>) -> Vec<AlertChange> {
    let new = &rec.new;
    let key = new.key();
    let mut out = Vec::new();
    for kind in transitions(rec.inserted, rec.old.as_ref(), new) {
        let at_record = rec.recorded_at;
        let changed_at = match kind {
            ChangeKind::Opened => Some(new.opened_at()),
            ChangeKind::Acknowledged => new.acknowledged_at().or(at_record),
            ChangeKind::Resolved => new.resolved_at().or(at_record),
            ChangeKind::Snoozed | ChangeKind::Unsnoozed => at_record,
        }
        .unwrap_or(new.last_breach_at());
        let suppressed =
            kind.silenced_by_snooze() && new.snoozed_until().is_some_and(|u| u > changed_at);
        out.push(AlertChange {
            index: rec.index,
            kind,
            suppressed,
            detail: new.detail(event_id(&key, &rec.seq, kind), kind, changed_at),
        });
    }
    out
}
