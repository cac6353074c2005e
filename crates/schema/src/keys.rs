//! Every key of the table, built and parsed in one place (docs/design.md §2).
//!
//! `#` separates key parts. No validated ID or label can contain `#`, so parsing is exact and
//! no input can build a key that parses as another entity.

use std::fmt;

use thiserror::Error;

use crate::ids::{AlertId, AlertRule, DeviceId, DeviceStatus, EventId, MetricName, Severity};
use crate::tags::Tag;
use crate::time::{Bucket, Day, Period, Timestamp};

pub const DEVICE_PREFIX: &str = "DEVICE#";
pub const DEVICE_METADATA_SK: &str = "#METADATA";
pub const READING_PREFIX: &str = "READING#";
/// Packed readings (docs/decisions/0001-packed-readings.md): `SLOT#<slot start>#<part>`, in the same partitions as single
/// readings. A slot that would outgrow its item continues in part 1, 2, …
pub const SLOT_PREFIX: &str = "SLOT#";
pub const ALERT_PREFIX: &str = "ALERT#";
/// `DEVICE#<id>` / `METRICS#<day>`: the distinct metric names a device's readings of one UTC
/// day were admitted with, under its cap (docs/design.md §4, "Metric names per day"); written
/// by ingest only when a name is new to it, expiring a few days after the day.
pub const METRIC_NAMES_PREFIX: &str = "METRICS#";
pub const AGG_PREFIX: &str = "AGG#";
/// Overflow pages of a large bucket's rollup: `AGGPAGE#<period>#<bucket>#<n>` (n = 1, 2, …),
/// page 0 being the aggregate item itself. Outside `AGG#`, so range queries over a device's
/// aggregates never meet them.
pub const AGG_PAGE_PREFIX: &str = "AGGPAGE#";
pub const QUARANTINE_PREFIX: &str = "QUARANTINE#";
pub const CONFIG_PK: &str = "CONFIG";
pub const LAYOUT_HISTORY_PREFIX: &str = "SHARDS#";
/// `CONFIG` / `#DEFAULT_LAYOUT`: the layout history of every device without one of its own.
pub const DEFAULT_LAYOUT_SK: &str = "#DEFAULT_LAYOUT";
pub const DEVICE_STATUS_PREFIX: &str = "DEVICE_STATUS#";
pub const ALERT_SEVERITY_PREFIX: &str = "ALERT_SEVERITY#";
/// Marks a hot device's reading partition in its partition key: `DEVICE#<id>#S<n>`.
pub const PARTITION_MARK: &str = "#S";
/// Sort key of `tidemark-admin rebuild`'s fence item, written under a reading partition
/// (`DEVICE#<id>[#S<n>]`) so its stream record marks a position in that partition's stream
/// order. It parses as no entity, so the aggregator and the API ignore it.
pub const FENCE_SK: &str = "#FENCE";
/// Partition key prefix of an alert notification's "published" marker:
/// `NOTIFIED#<eventId>` / `#MARKER`. Each marker is its own partition (the writes spread over
/// the table, and no device-partition query can ever meet one).
pub const NOTIFIED_PREFIX: &str = "NOTIFIED#";
pub const NOTIFY_MARKER_SK: &str = "#MARKER";
/// The pipeline's heartbeats: `PIPELINE` / `HEARTBEAT#<Kinesis shard ID>`, one item per ingest
/// shard, written by ingest when the watchdog's heartbeat record has passed it and marked by
/// the alerts role when it has passed that too (docs/design.md §5, "Offline devices").
pub const PIPELINE_PK: &str = "PIPELINE";
pub const HEARTBEAT_PREFIX: &str = "HEARTBEAT#";
/// `PIPELINE` / `FAILURES#<function>#<record>`: how often a function failed on one record
/// with an error no retry cures (docs/design.md §4, "What is retried, what is set aside").
/// Written only when that happens, so it costs nothing while nothing fails.
pub const FAILURES_PREFIX: &str = "FAILURES#";
/// `REPAIR#<role>` / `<set aside at>#<record>`: a table-stream record an aggregator role
/// (`rollups`, `alerts`) set aside after it failed for good, naming what to recompute from the
/// table (docs/design.md §5, "What is retried, what is set aside"). One partition per role,
/// time-ordered, so the role reads its open repairs with one query; written only when a
/// record is set aside (three failed attempts each), far below a partition's write rate.
pub const REPAIR_PREFIX: &str = "REPAIR#";
/// The Parquet export's state: `EXPORT` / `#CURSOR` (the newest hour the schedule exported)
/// and `EXPORT` / `DIRTY#<hour>` (an hour changed after it closed, to export again). Written
/// rarely: once an hour, and on a late change.
pub const EXPORT_PK: &str = "EXPORT";
pub const EXPORT_CURSOR_SK: &str = "#CURSOR";
pub const EXPORT_DIRTY_PREFIX: &str = "DIRTY#";
/// `EXPORT` sort keys of the hours being exported in slices: `JOB#<hour>`.
pub const EXPORT_JOB_PREFIX: &str = "JOB#";
/// GSI2 partitions of devices watched for silence, `OFFLINE_WATCH#<n>`, sorted by the time
/// their silence would need checking ([`watch_gsi2sk`]): the watchdog reads only those due.
pub const OFFLINE_WATCH_PREFIX: &str = "OFFLINE_WATCH#";
/// Watched devices are spread over this many GSI2 partitions: a watched device's check time
/// moves about once per three quarters of its window, a delete and a put in its partition,
/// so a million devices at a 300 s window make about 8,900 index writes a second, and more
/// in the bursts of devices moving in step (`bench/SCALE.md`: about 2,600 on the busiest of
/// 16 partitions in the worst second, 680 of 64). The watchdog queries each once a run.
pub const OFFLINE_WATCH_PARTITIONS: u16 = 64;
/// The GSI2 partitions of devices that are offline now (`GET /devices?connectivity=offline`),
/// `CONNECTIVITY#offline#<n>` ([`offline_gsi2pk`]), sorted by device; this plain key alone
/// held them before they were spread, and the listing still reads it.
pub const OFFLINE_GSI2PK: &str = "CONNECTIVITY#offline";
/// Fleet-wide listings whose key every member of a kind would otherwise share (offline
/// devices, open alerts by severity) are spread over this many index partitions, by a hash
/// of the member's partition key: a mass outage, its return or a threshold storm over a
/// million devices moves thousands of members a second (`bench/SCALE.md`), and one key takes
/// 1,000 writes a second. A listing queries every partition (and the plain key of before).
pub const LISTING_PARTITIONS: u16 = 16;

/// GSI2 partitions of the devices with readings in an hour, `ACTIVE#<hour>#<n>`, sorted by
/// device ([`active_gsi2sk`]): every device's hourly rollup item (page 0) is in one while it
/// exists, so an hour's export walks the devices with readings in it, found from an item
/// the rollups role writes anyway, not every registered device.
pub const ACTIVE_PREFIX: &str = "ACTIVE#";
/// An hour's devices are spread over this many GSI2 partitions: at the top of an hour every
/// sending device's first batch writes its new hour's item, 1,000,000 devices within a
/// minute about 16,700 index writes a second on average, but each stream shard's rollups
/// invocation writes its devices' new hours in a burst, at its write concurrency: with
/// every shard's burst in the same second, about 1,450 on the busiest of 64 partitions,
/// 390 of 256 (`bench/SCALE.md`; DynamoDB takes 1,000).
pub const ACTIVE_PARTITIONS: u16 = 256;

/// Quarantined records of a day are spread over this many partitions, so a burst of bad
/// records cannot make one partition hot; listing a day queries each of them.
pub const QUARANTINE_PARTITIONS: u16 = 4;
/// `CONFIG` / `TAGS#<id>`: a device's tag history ([`crate::tags::TagHistory`]).
pub const TAGS_PREFIX: &str = "TAGS#";
/// `CONFIG` sort keys of the counts of tag history changes, `#TAG_CHANGES#<n>` (n below
/// [`TAG_CHANGE_COUNTS`], by a hash of the device): every change of a device's tag history
/// adds one to its device's count in the same transaction, so the export rewrites its
/// devices table only when their sum moved.
pub const TAG_CHANGES_PREFIX: &str = "#TAG_CHANGES#";
/// Count items the tag changes are spread over (a fleet tagged in bulk contends on 16 keys,
/// not one).
pub const TAG_CHANGE_COUNTS: u16 = 16;
/// `TAG#<key>:<value>#<n>` / `DEVICE#<id>`: the devices holding a tag now (or announced to),
/// for `GET /devices?tag=`; written only by `PUT /devices/{id}`.
pub const TAG_INDEX_PREFIX: &str = "TAG#";
/// Partitions the tag index spreads one tag over, so that registering a fleet of 100,000
/// devices into one site stays under a partition's write rate.
pub const TAG_INDEX_PARTITIONS: u16 = 16;
/// `TAG#<key>:<value>#<n>` / `#COUNT`: how many devices partition n of the tag's index holds
/// and how many of them are offline ([`crate::entities::TagCountItem`]). In the partition it
/// counts, so a group's counts spread over the index's partitions as its members do.
pub const TAG_COUNT_SK: &str = "#COUNT";
/// `GROUP#<key>:<value>` / `HOUR#<metric>#<hour>` or `DAY#<metric>#<day>`: a group's rollup
/// of a closed bucket, recomputed from its members' readings by the export (§5 "Groups");
/// `ALERT#<alertId>`: an alert of a group rule; `RULE#<rule tag>`: that rule's state
/// (§5 "Group rules").
pub const GROUP_PREFIX: &str = "GROUP#";
pub const GROUP_RULE_PREFIX: &str = "RULE#";
pub const GROUP_HOUR_PREFIX: &str = "HOUR#";
pub const GROUP_DAY_PREFIX: &str = "DAY#";
/// `GROUPPART#<key>:<value>#<hour>` / `<sequence>`: what one rollups-role batch (named by its
/// first stream record's sequence number) added to a group's hour, until the hour's rollup is
/// recomputed.
pub const GROUP_PARTIAL_PREFIX: &str = "GROUPPART#";
/// `GROUPBATCH#<sequence>` / `#MANIFEST`: the partials a batch starting at that record wrote,
/// so a retry of the batch replaces every one of them.
pub const GROUP_BATCH_PREFIX: &str = "GROUPBATCH#";
pub const GROUP_BATCH_SK: &str = "#MANIFEST";
/// `CALLER#<caller hash>` / `RATE#<minute start>`: how many requests one API caller made in
/// one UTC minute, counted only when `CALLER_RATE_LIMIT` is on (docs/design.md §6 "Rate
/// limits per caller"). A caller's own partition, so callers never share a hot key; the
/// caller's identity is stored only as a hash ([`CallerHash`]). Expires minutes after the
/// minute ends.
pub const CALLER_PREFIX: &str = "CALLER#";
pub const CALLER_RATE_PREFIX: &str = "RATE#";

/// A primary key.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Key {
    pub pk: String,
    pub sk: String,
}

impl Key {
    fn new(pk: String, sk: impl Into<String>) -> Self {
        Key { pk, sk: sk.into() }
    }
}

/// Why a key did not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("key pk={pk:?} sk={sk:?} is not a Tidemark key: {reason}")]
pub struct KeyError {
    pub pk: String,
    pub sk: String,
    pub reason: String,
}

/// What an item's primary key says it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EntityKey {
    Device(DeviceId),
    /// `partition` is `None` for the device's own partition, `Some(n)` for `DEVICE#<id>#S<n>`
    /// (one of a hot device's write partitions).
    Reading {
        device: DeviceId,
        partition: Option<u16>,
        at: Timestamp,
    },
    /// One part of a packed slot of readings ([`crate::layout`]).
    Slot {
        device: DeviceId,
        partition: Option<u16>,
        start: Timestamp,
        part: u16,
    },
    Alert {
        device: DeviceId,
        alert: AlertId,
    },
    Aggregate {
        device: DeviceId,
        bucket: Bucket,
    },
    /// The metric names a device was admitted with on one UTC day (see
    /// [`METRIC_NAMES_PREFIX`]).
    MetricNames {
        device: DeviceId,
        day: Day,
    },
    /// Overflow page `page` (1-based; page 0 is [`EntityKey::Aggregate`]) of a bucket's
    /// rollup that outgrew one item.
    AggregatePage {
        device: DeviceId,
        bucket: Bucket,
        page: u16,
    },
    Quarantine {
        day: Day,
        partition: u16,
        received: Timestamp,
        sequence: String,
    },
    /// The `part`-th piece (1-based after the record's own item) of a large quarantined
    /// payload: `<received>#<sequence>#<part>`, sorting right after its record.
    QuarantinePart {
        day: Day,
        partition: u16,
        received: Timestamp,
        sequence: String,
        part: u16,
    },
    DeviceLayout(DeviceId),
    /// The fleet's default layout history ([`crate::layout`]).
    DefaultLayout,
    /// An alert notification already published (see [`NOTIFIED_PREFIX`]).
    NotifyMarker(EventId),
    /// The heartbeat of one ingest (Kinesis) shard (see [`PIPELINE_PK`]).
    Heartbeat(ShardName),
    /// A function's count of permanent failures on one record (see [`FAILURES_PREFIX`]).
    Failures(FailedRecord),
    /// A stream record an aggregator role set aside, to repair (see [`REPAIR_PREFIX`]).
    Repair {
        at: Timestamp,
        record: FailedRecord,
    },
    /// The export schedule's position (see [`EXPORT_PK`]).
    ExportCursor,
    /// An hour (its start) to export again (see [`EXPORT_PK`]).
    ExportDirty(Timestamp),
    /// An hour (its start) whose slices are being exported (see [`EXPORT_PK`]).
    ExportJob(Timestamp),
    /// One of the counts of tag history changes (see [`TAG_CHANGES_PREFIX`]).
    TagChanges(u16),
    /// A device's tag history (see [`TAGS_PREFIX`]).
    TagHistory(DeviceId),
    /// A device in the index of one tag (see [`TAG_INDEX_PREFIX`]).
    TagIndex {
        tag: Tag,
        partition: u16,
        device: DeviceId,
    },
    /// The member and offline counts of one partition of a tag's index (see [`TAG_COUNT_SK`]).
    TagCount {
        tag: Tag,
        partition: u16,
    },
    /// An alert of a group rule (see [`GROUP_PREFIX`]).
    GroupAlert {
        tag: Tag,
        alert: AlertId,
    },
    /// A group rule's state; `rule` is its tag, 8 hex digits (see [`GROUP_PREFIX`]).
    GroupRule {
        tag: Tag,
        rule: String,
    },
    /// A group's rollup of one metric in one bucket (see [`GROUP_PREFIX`]).
    GroupBucket {
        tag: Tag,
        metric: MetricName,
        bucket: Bucket,
    },
    /// One batch's partial of a group's hour (see [`GROUP_PARTIAL_PREFIX`]).
    GroupPartial {
        tag: Tag,
        hour: Timestamp,
        batch: String,
    },
    /// The partials one batch wrote (see [`GROUP_BATCH_PREFIX`]).
    GroupBatch(String),
    /// One API caller's requests in one UTC minute (see [`CALLER_PREFIX`]); `minute` is the
    /// minute's start.
    CallerRate {
        caller: CallerHash,
        minute: Timestamp,
    },
}

/// An API caller's identity (a token's subject, an IAM ARN) as a key part: the first 128
/// bits of its SHA-256, 32 lowercase hex digits. Subjects are not stored as they are, and
/// the key's length is bounded whatever the identity's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallerHash(String);

impl CallerHash {
    pub const LEN: usize = 32;

    /// The hash of a caller identity.
    pub fn of(caller: &str) -> Self {
        use sha2::Digest;
        use std::fmt::Write;
        let digest = sha2::Sha256::digest(caller.as_bytes());
        let mut hex = String::with_capacity(Self::LEN);
        for b in &digest[..Self::LEN / 2] {
            let _ = write!(hex, "{b:02x}");
        }
        CallerHash(hex)
    }

    /// A stored hash: exactly [`Self::LEN`] lowercase hex digits.
    pub fn parse(s: &str) -> Option<Self> {
        let ok = s.len() == Self::LEN && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| CallerHash(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A Kinesis shard ID as a key part (`shardId-000000000000`): letters, digits, `-` and `_`,
/// at most 128 characters, so it can never hold a `#`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardName(String);

impl ShardName {
    pub fn new(s: &str) -> Option<Self> {
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_');
        ok.then(|| ShardName(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ShardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A record one function failed on: the function (`ingest`, `rollups`, `alerts`) and the
/// record's ID in its source (a Kinesis sequence number, `<sequence>.<index>` for a user
/// record of a KPL aggregate, or a table stream record's event ID). Both are short runs of
/// `[A-Za-z0-9._:-]`, so the pair can never hold another entity's key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FailedRecord {
    function: String,
    record: String,
}

impl FailedRecord {
    pub fn new(function: &str, record: &str) -> Option<Self> {
        let word = |s: &str, max: usize| {
            !s.is_empty()
                && s.len() <= max
                && s.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
        };
        (word(function, 32) && word(record, 200)).then(|| FailedRecord {
            function: function.to_owned(),
            record: record.to_owned(),
        })
    }

    pub fn function(&self) -> &str {
        &self.function
    }

    pub fn record(&self) -> &str {
        &self.record
    }
}

impl EntityKey {
    pub fn key(&self) -> Key {
        match self {
            EntityKey::Device(d) => Key::new(device_pk(d), DEVICE_METADATA_SK),
            EntityKey::Reading {
                device,
                partition: shard,
                at,
            } => Key::new(reading_pk(device, *shard), reading_sk(*at)),
            EntityKey::Slot {
                device,
                partition: shard,
                start,
                part,
            } => Key::new(reading_pk(device, *shard), slot_sk(*start, *part)),
            EntityKey::Alert { device, alert } => Key::new(device_pk(device), alert_sk(alert)),
            EntityKey::Aggregate { device, bucket } => {
                Key::new(device_pk(device), aggregate_sk(*bucket))
            }
            EntityKey::AggregatePage {
                device,
                bucket,
                page,
            } => Key::new(device_pk(device), aggregate_page_sk(*bucket, *page)),
            EntityKey::MetricNames { device, day } => {
                Key::new(device_pk(device), format!("{METRIC_NAMES_PREFIX}{day}"))
            }
            EntityKey::Quarantine {
                day,
                partition,
                received,
                sequence,
            } => Key::new(
                quarantine_pk(*day, *partition),
                quarantine_sk(*received, sequence),
            ),
            EntityKey::QuarantinePart {
                day,
                partition,
                received,
                sequence,
                part,
            } => Key::new(
                quarantine_pk(*day, *partition),
                quarantine_part_sk(*received, sequence, *part),
            ),
            EntityKey::DeviceLayout(d) => Key::new(CONFIG_PK.to_owned(), device_layout_sk(d)),
            EntityKey::DefaultLayout => Key::new(CONFIG_PK.to_owned(), DEFAULT_LAYOUT_SK),
            EntityKey::NotifyMarker(e) => Key::new(notify_marker_pk(e), NOTIFY_MARKER_SK),
            EntityKey::Heartbeat(s) => Key::new(PIPELINE_PK.to_owned(), heartbeat_sk(s)),
            EntityKey::Failures(f) => Key::new(
                PIPELINE_PK.to_owned(),
                format!("{FAILURES_PREFIX}{}#{}", f.function, f.record),
            ),
            EntityKey::Repair { at, record } => Key::new(
                repair_pk(&record.function),
                format!("{at}#{}", record.record),
            ),
            EntityKey::ExportCursor => Key::new(EXPORT_PK.to_owned(), EXPORT_CURSOR_SK),
            EntityKey::ExportDirty(hour) => {
                Key::new(EXPORT_PK.to_owned(), format!("{EXPORT_DIRTY_PREFIX}{hour}"))
            }
            EntityKey::ExportJob(hour) => {
                Key::new(EXPORT_PK.to_owned(), format!("{EXPORT_JOB_PREFIX}{hour}"))
            }
            EntityKey::TagHistory(d) => Key::new(CONFIG_PK.to_owned(), tag_history_sk(d)),
            EntityKey::TagChanges(n) => {
                Key::new(CONFIG_PK.to_owned(), format!("{TAG_CHANGES_PREFIX}{n}"))
            }
            EntityKey::TagIndex {
                tag,
                partition,
                device,
            } => Key::new(tag_index_pk(tag, *partition), device_pk(device)),
            EntityKey::TagCount { tag, partition } => {
                Key::new(tag_index_pk(tag, *partition), TAG_COUNT_SK)
            }
            EntityKey::GroupAlert { tag, alert } => Key::new(group_pk(tag), alert_sk(alert)),
            EntityKey::GroupRule { tag, rule } => {
                Key::new(group_pk(tag), format!("{GROUP_RULE_PREFIX}{rule}"))
            }
            EntityKey::GroupBucket {
                tag,
                metric,
                bucket,
            } => Key::new(group_pk(tag), group_bucket_sk(metric, *bucket)),
            EntityKey::GroupPartial { tag, hour, batch } => {
                Key::new(group_partial_pk(tag, *hour), batch.clone())
            }
            EntityKey::GroupBatch(batch) => Key::new(group_batch_pk(batch), GROUP_BATCH_SK),
            EntityKey::CallerRate { caller, minute } => Key::new(
                format!("{CALLER_PREFIX}{}", caller.0),
                format!("{CALLER_RATE_PREFIX}{}", minute.minute_start()),
            ),
        }
    }

    pub fn parse(pk: &str, sk: &str) -> Result<EntityKey, KeyError> {
        let err = |reason: &str| KeyError {
            pk: pk.to_owned(),
            sk: sk.to_owned(),
            reason: reason.to_owned(),
        };
        if pk == CONFIG_PK {
            if sk == DEFAULT_LAYOUT_SK {
                return Ok(EntityKey::DefaultLayout);
            }
            if let Some(n) = sk.strip_prefix(TAG_CHANGES_PREFIX) {
                return n
                    .parse::<u16>()
                    .ok()
                    .filter(|n| *n < TAG_CHANGE_COUNTS)
                    .map(EntityKey::TagChanges)
                    .ok_or_else(|| err("a tag change count's number must be below 16"));
            }
            if let Some(id) = sk.strip_prefix(TAGS_PREFIX) {
                return DeviceId::new(id)
                    .map(EntityKey::TagHistory)
                    .map_err(|e| err(&e.to_string()));
            }
            let id = sk
                .strip_prefix(LAYOUT_HISTORY_PREFIX)
                .ok_or_else(|| err("config sort key must be SHARDS#<id> or #DEFAULT_LAYOUT"))?;
            return DeviceId::new(id)
                .map(EntityKey::DeviceLayout)
                .map_err(|e| err(&e.to_string()));
        }
        if pk == EXPORT_PK {
            if sk == EXPORT_CURSOR_SK {
                return Ok(EntityKey::ExportCursor);
            }
            let hour = |prefix: &str| {
                sk.strip_prefix(prefix)
                    .and_then(|t| Timestamp::parse_canonical(t).ok())
                    .filter(|t| t.hour_start() == *t)
            };
            return hour(EXPORT_DIRTY_PREFIX)
                .map(EntityKey::ExportDirty)
                .or_else(|| hour(EXPORT_JOB_PREFIX).map(EntityKey::ExportJob))
                .ok_or_else(|| {
                    err("export sort key must be #CURSOR, DIRTY#<hour start> or JOB#<hour start>")
                });
        }
        if pk == PIPELINE_PK {
            if let Some(rest) = sk.strip_prefix(FAILURES_PREFIX) {
                return rest
                    .split_once('#')
                    .and_then(|(f, r)| FailedRecord::new(f, r))
                    .map(EntityKey::Failures)
                    .ok_or_else(|| {
                        err("failure count sort key must be FAILURES#<function>#<record>")
                    });
            }
            return sk
                .strip_prefix(HEARTBEAT_PREFIX)
                .and_then(ShardName::new)
                .map(EntityKey::Heartbeat)
                .ok_or_else(|| err("pipeline sort key must be HEARTBEAT#<shard id>"));
        }
        if let Some(rest) = pk.strip_prefix(TAG_INDEX_PREFIX) {
            let (tag, n) = rest
                .rsplit_once('#')
                .ok_or_else(|| err("tag index pk is TAG#<key>:<value>#<n>"))?;
            let tag = Tag::parse(tag).map_err(|e| err(&e.to_string()))?;
            let partition = parse_small(n)
                .filter(|n| *n < TAG_INDEX_PARTITIONS)
                .ok_or_else(|| err("bad tag index partition"))?;
            if sk == TAG_COUNT_SK {
                return Ok(EntityKey::TagCount { tag, partition });
            }
            let device = sk
                .strip_prefix(DEVICE_PREFIX)
                .ok_or_else(|| err("tag index sk is DEVICE#<id>"))
                .and_then(|id| DeviceId::new(id).map_err(|e| err(&e.to_string())))?;
            return Ok(EntityKey::TagIndex {
                tag,
                partition,
                device,
            });
        }
        if let Some(tag) = pk.strip_prefix(GROUP_PREFIX) {
            let tag = Tag::parse(tag).map_err(|e| err(&e.to_string()))?;
            if let Some(a) = sk.strip_prefix(ALERT_PREFIX) {
                let alert = AlertId::new(a)
                    .ok()
                    .filter(|a| AlertId::parts(a.as_str()).is_ok_and(|p| p.2 == AlertRule::Group))
                    .ok_or_else(|| {
                        err("group alert sk is ALERT#<opened at>-group.<8 hex digits>")
                    })?;
                return Ok(EntityKey::GroupAlert { tag, alert });
            }
            if let Some(rule) = sk.strip_prefix(GROUP_RULE_PREFIX) {
                if rule.len() != 8 || !rule.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                {
                    return Err(err("group rule sk is RULE#<8 hex digits>"));
                }
                return Ok(EntityKey::GroupRule {
                    tag,
                    rule: rule.to_owned(),
                });
            }
            let (period, rest) = if let Some(r) = sk.strip_prefix(GROUP_HOUR_PREFIX) {
                (Period::Hourly, r)
            } else if let Some(r) = sk.strip_prefix(GROUP_DAY_PREFIX) {
                (Period::Daily, r)
            } else {
                return Err(err(
                    "group sk is HOUR#<metric>#<hour> or DAY#<metric>#<day>",
                ));
            };
            let (metric, label) = rest
                .split_once('#')
                .ok_or_else(|| err("group sk is HOUR#<metric>#<hour> or DAY#<metric>#<day>"))?;
            let metric = MetricName::new(metric).map_err(|e| err(&e.to_string()))?;
            let bucket = Bucket::parse(period, label).map_err(|e| err(&e.to_string()))?;
            return Ok(EntityKey::GroupBucket {
                tag,
                metric,
                bucket,
            });
        }
        if let Some(rest) = pk.strip_prefix(GROUP_PARTIAL_PREFIX) {
            let (tag, hour) = rest
                .rsplit_once('#')
                .ok_or_else(|| err("group partial pk is GROUPPART#<key>:<value>#<hour>"))?;
            let tag = Tag::parse(tag).map_err(|e| err(&e.to_string()))?;
            let hour = Bucket::parse(Period::Hourly, hour)
                .map(Bucket::start)
                .map_err(|_| err("group partial pk ends with an hour (2026-04-20T14:00:00Z)"))?;
            let piece_ok = match sk.split_once('.') {
                None => valid_sequence(sk),
                Some((seq, n)) => valid_sequence(seq) && parse_small(n).is_some_and(|n| n > 0),
            };
            if !piece_ok {
                return Err(err(
                    "group partial sk is a stream sequence number, then .<n> for a later piece",
                ));
            }
            return Ok(EntityKey::GroupPartial {
                tag,
                hour,
                batch: sk.to_owned(),
            });
        }
        if let Some(batch) = pk.strip_prefix(GROUP_BATCH_PREFIX) {
            if sk != GROUP_BATCH_SK || !valid_sequence(batch) {
                return Err(err("group batch key is GROUPBATCH#<sequence> / #MANIFEST"));
            }
            return Ok(EntityKey::GroupBatch(batch.to_owned()));
        }
        if let Some(hash) = pk.strip_prefix(CALLER_PREFIX) {
            let caller = CallerHash::parse(hash)
                .ok_or_else(|| err("caller pk is CALLER#<32 lowercase hex digits>"))?;
            return sk
                .strip_prefix(CALLER_RATE_PREFIX)
                .and_then(|t| Timestamp::parse_canonical(t).ok())
                .filter(|t| t.minute_start() == *t)
                .map(|minute| EntityKey::CallerRate { caller, minute })
                .ok_or_else(|| err("caller sort key must be RATE#<minute start>"));
        }
        if let Some(function) = pk.strip_prefix(REPAIR_PREFIX) {
            return sk
                .split_once('#')
                .and_then(|(at, r)| {
                    Some(EntityKey::Repair {
                        at: Timestamp::parse_canonical(at).ok()?,
                        record: FailedRecord::new(function, r)?,
                    })
                })
                .ok_or_else(|| err("repair key must be REPAIR#<role> / <time>#<record>"));
        }
        if let Some(id) = pk.strip_prefix(NOTIFIED_PREFIX) {
            if sk != NOTIFY_MARKER_SK {
                return Err(err("notification marker sort key must be #MARKER"));
            }
            return EventId::new(id)
                .map(EntityKey::NotifyMarker)
                .map_err(|e| err(&e.to_string()));
        }
        if let Some(rest) = pk.strip_prefix(QUARANTINE_PREFIX) {
            let (day, n) = rest
                .split_once('#')
                .ok_or_else(|| err("quarantine pk is QUARANTINE#<day>#<n>"))?;
            let day = Day::parse(day).map_err(|e| err(&e.to_string()))?;
            let partition = parse_small(n).ok_or_else(|| err("bad quarantine partition"))?;
            if partition >= QUARANTINE_PARTITIONS {
                return Err(err("quarantine partition out of range"));
            }
            let (received, rest) = sk
                .split_once('#')
                .ok_or_else(|| err("quarantine sk is <received>#<sequence>[#<part>]"))?;
            let received = Timestamp::parse_canonical(received).map_err(|e| err(&e.to_string()))?;
            let (sequence, part) = match rest.split_once('#') {
                Some((seq, n)) => (
                    seq,
                    Some(
                        parse_small(n)
                            .filter(|n| *n > 0)
                            .ok_or_else(|| err("bad quarantine part"))?,
                    ),
                ),
                None => (rest, None),
            };
            if !valid_quarantine_sequence(sequence) {
                return Err(err(
                    "sequence number must be decimal digits, with .<index> for a user record \
                     of a KPL aggregate",
                ));
            }
            let sequence = sequence.to_owned();
            return Ok(match part {
                None => EntityKey::Quarantine {
                    day,
                    partition,
                    received,
                    sequence,
                },
                Some(part) => EntityKey::QuarantinePart {
                    day,
                    partition,
                    received,
                    sequence,
                    part,
                },
            });
        }
        let rest = pk
            .strip_prefix(DEVICE_PREFIX)
            .ok_or_else(|| err("unknown partition key prefix"))?;
        let (id, shard) = match rest.split_once(PARTITION_MARK) {
            Some((id, n)) => (
                id,
                Some(parse_small(n).ok_or_else(|| err("bad shard number"))?),
            ),
            None => (rest, None),
        };
        let device = DeviceId::new(id).map_err(|e| err(&e.to_string()))?;
        if let Some(ts) = sk.strip_prefix(READING_PREFIX) {
            let at = Timestamp::parse_canonical(ts).map_err(|e| err(&e.to_string()))?;
            return Ok(EntityKey::Reading {
                device,
                partition: shard,
                at,
            });
        }
        if let Some(rest) = sk.strip_prefix(SLOT_PREFIX) {
            let (start, part) = rest
                .split_once('#')
                .ok_or_else(|| err("slot sk is SLOT#<start>#<part>"))?;
            let start = Timestamp::parse_canonical(start).map_err(|e| err(&e.to_string()))?;
            let part = parse_small(part).ok_or_else(|| err("bad slot part"))?;
            return Ok(EntityKey::Slot {
                device,
                partition: shard,
                start,
                part,
            });
        }
        if shard.is_some() {
            return Err(err("only readings live in partitions"));
        }
        if sk == DEVICE_METADATA_SK {
            return Ok(EntityKey::Device(device));
        }
        if let Some(a) = sk.strip_prefix(ALERT_PREFIX) {
            let alert = AlertId::new(a).map_err(|e| err(&e.to_string()))?;
            return Ok(EntityKey::Alert { device, alert });
        }
        if let Some(d) = sk.strip_prefix(METRIC_NAMES_PREFIX) {
            let day = Day::parse(d)
                .ok()
                .filter(|day| day.to_string() == d)
                .ok_or_else(|| err("metric names sk is METRICS#<YYYY-MM-DD>"))?;
            return Ok(EntityKey::MetricNames { device, day });
        }
        if let Some(rest) = sk.strip_prefix(AGG_PAGE_PREFIX) {
            let (period, rest) = rest
                .split_once('#')
                .ok_or_else(|| err("aggregate page sk is AGGPAGE#<period>#<bucket>#<n>"))?;
            let (label, page) = rest
                .rsplit_once('#')
                .ok_or_else(|| err("aggregate page sk is AGGPAGE#<period>#<bucket>#<n>"))?;
            let period = Period::parse(period).ok_or_else(|| err("unknown period"))?;
            let bucket = Bucket::parse(period, label).map_err(|e| err(&e.to_string()))?;
            let page = parse_small(page)
                .filter(|n| *n > 0)
                .ok_or_else(|| err("bad aggregate page number"))?;
            return Ok(EntityKey::AggregatePage {
                device,
                bucket,
                page,
            });
        }
        if let Some(rest) = sk.strip_prefix(AGG_PREFIX) {
            let (period, label) = rest
                .split_once('#')
                .ok_or_else(|| err("aggregate sk is AGG#<period>#<bucket>"))?;
            let period = Period::parse(period).ok_or_else(|| err("unknown period"))?;
            let bucket = Bucket::parse(period, label).map_err(|e| err(&e.to_string()))?;
            return Ok(EntityKey::Aggregate { device, bucket });
        }
        Err(err("unknown sort key"))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} / {}", self.pk, self.sk)
    }
}

fn parse_small(s: &str) -> Option<u16> {
    // Canonical decimal only, so a key has exactly one spelling.
    if s.is_empty() || s.len() > 5 || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    if !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Kinesis sequence numbers are decimal strings (up to 128 digits).
pub fn valid_sequence(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|c| c.is_ascii_digit())
}

/// A quarantine key's sequence: the record's, or `<sequence>.<index>` for one user record of
/// a KPL aggregate (the index in canonical decimal).
fn valid_quarantine_sequence(s: &str) -> bool {
    match s.split_once('.') {
        None => valid_sequence(s),
        Some((seq, i)) => {
            valid_sequence(seq)
                && !i.is_empty()
                && i.len() <= 10
                && (i == "0" || !i.starts_with('0'))
                && i.bytes().all(|c| c.is_ascii_digit())
        }
    }
}

pub fn device_pk(d: &DeviceId) -> String {
    format!("{DEVICE_PREFIX}{d}")
}

/// The partition a reading is written to: the device's own, or write partition `n` of a hot device.
pub fn reading_pk(d: &DeviceId, partition: Option<u16>) -> String {
    match partition {
        None => device_pk(d),
        Some(n) => format!("{DEVICE_PREFIX}{d}{PARTITION_MARK}{n}"),
    }
}

pub fn reading_sk(at: Timestamp) -> String {
    format!("{READING_PREFIX}{at}")
}

/// The sort keys of every part of the slot starting at `start` begin with this.
pub fn slot_sk_prefix(start: Timestamp) -> String {
    format!("{SLOT_PREFIX}{start}#")
}

pub fn slot_sk(start: Timestamp, part: u16) -> String {
    format!("{}{part}", slot_sk_prefix(start))
}

/// The bounds of a `BETWEEN` on sort keys that holds every part of the slots starting from
/// `first` to `last` (inclusive) and nothing else: part numbers are digits, and `~` sorts
/// after every digit.
pub fn slot_sk_between(first: Timestamp, last: Timestamp) -> (String, String) {
    (slot_sk_prefix(first), format!("{}~", slot_sk_prefix(last)))
}

/// The slot start of a sort key in a slot's key range (`SLOT#<start>#…`), whatever follows
/// it: a reader groups what a query returns by slot before it parses each part.
pub fn slot_start_of_sk(sk: &str) -> Option<Timestamp> {
    let (start, _) = sk.strip_prefix(SLOT_PREFIX)?.split_once('#')?;
    Timestamp::parse_canonical(start).ok()
}

pub fn alert_sk(a: &AlertId) -> String {
    format!("{ALERT_PREFIX}{a}")
}

/// The sort-key range `[lo, hi]` of a device's alerts whose IDs were made at or after
/// `from` (an alert ID starts with its compact opening time, so IDs sort by it).
pub fn alert_sk_range_from(from: Timestamp) -> (String, String) {
    (
        format!("{ALERT_PREFIX}{}", from.to_compact_string()),
        format!("{ALERT_PREFIX}~"),
    )
}

/// Prefix shared by every aggregate sort key of one period, for range queries.
pub fn aggregate_sk_prefix(p: Period) -> String {
    format!("{AGG_PREFIX}{}#", p.as_str())
}

pub fn aggregate_sk(b: Bucket) -> String {
    format!("{}{}", aggregate_sk_prefix(b.period()), b.label())
}

/// Every overflow page of the bucket `b` (and nothing else) has a sort key starting with this.
pub fn aggregate_page_sk_prefix(b: Bucket) -> String {
    format!("{AGG_PAGE_PREFIX}{}#{}#", b.period().as_str(), b.label())
}

/// Page `n` (1-based) of the bucket `b`; page 0 is [`aggregate_sk`].
pub fn aggregate_page_sk(b: Bucket, n: u16) -> String {
    format!("{}{n}", aggregate_page_sk_prefix(b))
}

pub fn quarantine_pk(day: Day, partition: u16) -> String {
    format!("{QUARANTINE_PREFIX}{day}#{partition}")
}

pub fn quarantine_sk(received: Timestamp, sequence: &str) -> String {
    format!("{received}#{sequence}")
}

pub fn quarantine_part_sk(received: Timestamp, sequence: &str, part: u16) -> String {
    format!("{received}#{sequence}#{part}")
}

/// The partition of `role`'s repairs ([`REPAIR_PREFIX`]).
pub fn repair_pk(role: &str) -> String {
    format!("{REPAIR_PREFIX}{role}")
}

pub fn notify_marker_pk(e: &EventId) -> String {
    format!("{NOTIFIED_PREFIX}{e}")
}

pub fn tag_history_sk(d: &DeviceId) -> String {
    format!("{TAGS_PREFIX}{d}")
}

/// The tag index partition `n` of `tag`.
pub fn tag_index_pk(tag: &Tag, n: u16) -> String {
    format!("{TAG_INDEX_PREFIX}{tag}#{n}")
}

/// Every partition of `tag`'s index, in order (a listing reads them one after another).
pub fn tag_index_pks(tag: &Tag) -> Vec<String> {
    (0..TAG_INDEX_PARTITIONS)
        .map(|n| tag_index_pk(tag, n))
        .collect()
}

/// The index partition a device's entry of any tag lives in.
pub fn tag_index_partition(d: &DeviceId) -> u16 {
    status_partition_for(d, TAG_INDEX_PARTITIONS).unwrap_or(0)
}

pub fn group_pk(tag: &Tag) -> String {
    format!("{GROUP_PREFIX}{tag}")
}

/// `HOUR#<metric>#<hour>` or `DAY#<metric>#<day>`: one metric's buckets of a period sort
/// together in time order, so a series is one Query.
pub fn group_bucket_sk(metric: &MetricName, bucket: Bucket) -> String {
    let prefix = match bucket.period() {
        Period::Hourly => GROUP_HOUR_PREFIX,
        Period::Daily => GROUP_DAY_PREFIX,
    };
    format!("{prefix}{metric}#{}", bucket.label())
}

/// The sort-key prefix of one metric's buckets of a period.
pub fn group_bucket_sk_prefix(metric: &MetricName, period: Period) -> String {
    let prefix = match period {
        Period::Hourly => GROUP_HOUR_PREFIX,
        Period::Daily => GROUP_DAY_PREFIX,
    };
    format!("{prefix}{metric}#")
}

pub fn group_partial_pk(tag: &Tag, hour: Timestamp) -> String {
    format!("{GROUP_PARTIAL_PREFIX}{tag}#{}", hour.to_hour_string())
}

pub fn group_batch_pk(batch: &str) -> String {
    format!("{GROUP_BATCH_PREFIX}{batch}")
}

pub fn device_layout_sk(d: &DeviceId) -> String {
    format!("{LAYOUT_HISTORY_PREFIX}{d}")
}

/// GSI1 partition of devices with a status; `shard` spreads a large fleet over several keys.
pub fn status_gsi1pk(status: DeviceStatus, shard: Option<u16>) -> String {
    match shard {
        None => format!("{DEVICE_STATUS_PREFIX}{status}"),
        Some(n) => format!("{DEVICE_STATUS_PREFIX}{status}#{n}"),
    }
}

/// The most GSI1 partitions one device status may be spread over (`STATUS_PARTITIONS`; the API,
/// which lists all of them in parallel, and the aggregator, which registers devices into
/// them, check the same bound).
pub const MAX_STATUS_PARTITIONS: u16 = 64;

/// The status-key partition of a device when a fleet spreads each status over `shards` GSI1
/// partitions (`DEVICE_STATUS#<status>#<n>`); `None` (the plain key) below two. Stable for a
/// device, so a status change moves it between partitions of the same `n`.
pub fn status_partition_for(d: &DeviceId, shards: u16) -> Option<u16> {
    (shards > 1).then(|| (fnv1a(d.as_str()) % u64::from(shards)) as u16)
}

/// FNV-1a: stable across platforms and releases, unlike `DefaultHasher`.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// GSI1 partition key of a device with `status` in a fleet of `shards` status partitions.
pub fn device_status_gsi1pk(d: &DeviceId, status: DeviceStatus, shards: u16) -> String {
    status_gsi1pk(status, status_partition_for(d, shards))
}

/// Every GSI1 partition holding devices of `status` (what a listing must query).
pub fn status_gsi1pks(status: DeviceStatus, shards: u16) -> Vec<String> {
    if shards > 1 {
        (0..shards)
            .map(|n| status_gsi1pk(status, Some(n)))
            .collect()
    } else {
        vec![status_gsi1pk(status, None)]
    }
}

/// GSI1 sort key of a device: `DEVICE#<id>`, the same text as its partition key.
pub fn device_gsi1sk(d: &DeviceId) -> String {
    device_pk(d)
}

/// GSI1 partition key of an open alert of severity `s` whose item's partition key is
/// `owner_pk` (the device's or the group's): `ALERT_SEVERITY#<s>#<n>`.
pub fn severity_gsi1pk(s: Severity, owner_pk: &str) -> String {
    format!(
        "{ALERT_SEVERITY_PREFIX}{s}#{}",
        listing_partition_of(owner_pk)
    )
}

/// Every GSI1 partition of open alerts of severity `s`, the plain key of before last (what
/// a listing queries).
pub fn severity_gsi1pks(s: Severity) -> Vec<String> {
    (0..LISTING_PARTITIONS)
        .map(|n| format!("{ALERT_SEVERITY_PREFIX}{s}#{n}"))
        .chain([format!("{ALERT_SEVERITY_PREFIX}{s}")])
        .collect()
}

pub fn alert_gsi1sk(a: &AlertId) -> String {
    alert_sk(a)
}

pub fn heartbeat_sk(s: &ShardName) -> String {
    format!("{HEARTBEAT_PREFIX}{s}")
}

/// GSI2 partition key of a device watched for silence: its watch partition.
pub fn watch_gsi2pk(d: &DeviceId) -> String {
    let n = status_partition_for(d, OFFLINE_WATCH_PARTITIONS).unwrap_or(0);
    format!("{OFFLINE_WATCH_PREFIX}{n}")
}

/// Every watch partition (what the watchdog queries).
pub fn watch_gsi2pks() -> Vec<String> {
    (0..OFFLINE_WATCH_PARTITIONS)
        .map(|n| format!("{OFFLINE_WATCH_PREFIX}{n}"))
        .collect()
}

/// GSI2 sort key of a watched device: when its silence needs checking, canonical (sorts
/// as time).
pub fn watch_gsi2sk(check_at: Timestamp) -> String {
    check_at.to_string()
}

/// GSI2 partition key of `d`'s hourly rollup item for the hour `hour` ([`ACTIVE_PREFIX`]).
pub fn active_gsi2pk(hour: Bucket, d: &DeviceId) -> String {
    active_gsi2pk_of(hour, active_partition_of(d))
}

/// The activity partition of `d`, below [`ACTIVE_PARTITIONS`] (the same in every hour).
pub fn active_partition_of(d: &DeviceId) -> u16 {
    status_partition_for(d, ACTIVE_PARTITIONS).unwrap_or(0)
}

/// The count of tag history changes `d`'s changes add to.
pub fn tag_changes_of(d: &DeviceId) -> EntityKey {
    EntityKey::TagChanges(status_partition_for(d, TAG_CHANGE_COUNTS).unwrap_or(0))
}

/// GSI2 partition key of the hour's activity partition `n`.
pub fn active_gsi2pk_of(hour: Bucket, n: u16) -> String {
    format!("{ACTIVE_PREFIX}{}#{n}", hour.label())
}

/// Every GSI2 partition of the hour's devices (what the export queries).
pub fn active_gsi2pks(hour: Bucket) -> Vec<String> {
    (0..ACTIVE_PARTITIONS)
        .map(|n| format!("{ACTIVE_PREFIX}{}#{n}", hour.label()))
        .collect()
}

/// GSI2 sort key of a device's hourly rollup item: the device's partition key.
pub fn active_gsi2sk(d: &DeviceId) -> String {
    device_pk(d)
}

/// The listing partition of the item whose partition key is `pk` ([`LISTING_PARTITIONS`]).
pub fn listing_partition_of(pk: &str) -> u16 {
    (fnv1a(pk) % u64::from(LISTING_PARTITIONS)) as u16
}

/// GSI2 partition key of `d` while it is offline.
pub fn offline_gsi2pk(d: &DeviceId) -> String {
    format!("{OFFLINE_GSI2PK}#{}", listing_partition_of(&device_pk(d)))
}

/// Every GSI2 partition of offline devices, the plain key of before last (what the listing
/// queries).
pub fn offline_gsi2pks() -> Vec<String> {
    (0..LISTING_PARTITIONS)
        .map(|n| format!("{OFFLINE_GSI2PK}#{n}"))
        .chain([OFFLINE_GSI2PK.to_owned()])
        .collect()
}

/// GSI2 sort key of an offline device: its partition key (the listing's order and cursor).
pub fn offline_gsi2sk(d: &DeviceId) -> String {
    device_pk(d)
}

/// Parses a GSI1 device-status key back to its status and shard.
pub fn parse_status_gsi1pk(s: &str) -> Option<(DeviceStatus, Option<u16>)> {
    let rest = s.strip_prefix(DEVICE_STATUS_PREFIX)?;
    match rest.split_once('#') {
        Some((st, n)) => Some((DeviceStatus::parse(st).ok()?, Some(parse_small(n)?))),
        None => Some((DeviceStatus::parse(rest).ok()?, None)),
    }
}

/// The severity a GSI1 alert key lists (partitioned or the plain key of before).
pub fn parse_severity_gsi1pk(s: &str) -> Option<Severity> {
    let rest = s.strip_prefix(ALERT_SEVERITY_PREFIX)?;
    let (sev, n) = match rest.split_once('#') {
        Some((sev, n)) => (sev, Some(n)),
        None => (rest, None),
    };
    let in_range = n.is_none_or(|n| n.parse::<u16>().is_ok_and(|n| n < LISTING_PARTITIONS));
    in_range.then(|| Severity::parse(sev).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AlertRule, MetricName};

    fn dev() -> DeviceId {
        DeviceId::new("sensor_01").unwrap()
    }
    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }
    fn round_trip(k: EntityKey) -> Key {
        let key = k.key();
        assert_eq!(EntityKey::parse(&key.pk, &key.sk).unwrap(), k, "{key}");
        key
    }

    #[test]
    fn the_exports_state_parses_back_and_only_whole_hours_are_dirty() {
        let k = round_trip(EntityKey::ExportCursor);
        assert_eq!((k.pk.as_str(), k.sk.as_str()), ("EXPORT", "#CURSOR"));
        let hour = Timestamp::parse_rfc3339("2026-04-20T07:00:00Z").unwrap();
        let k = round_trip(EntityKey::ExportDirty(hour));
        assert_eq!(k.sk, "DIRTY#2026-04-20T07:00:00.000000Z");
        assert!(EntityKey::parse("EXPORT", "DIRTY#2026-04-20T07:30:00.000000Z").is_err());
        let k = round_trip(EntityKey::TagChanges(15));
        assert_eq!(
            (k.pk.as_str(), k.sk.as_str()),
            ("CONFIG", "#TAG_CHANGES#15")
        );
        assert!(EntityKey::parse("CONFIG", "#TAG_CHANGES#16").is_err());
        let k = round_trip(EntityKey::ExportJob(hour));
        assert_eq!(k.sk, "JOB#2026-04-20T07:00:00.000000Z");
        assert!(EntityKey::parse("EXPORT", "JOB#2026-04-20T07:30:00.000000Z").is_err());
        assert!(EntityKey::parse("EXPORT", "OTHER").is_err());
    }

    #[test]
    fn the_default_layout_lives_beside_the_shard_configs() {
        let k = round_trip(EntityKey::DefaultLayout);
        assert_eq!(
            (k.pk.as_str(), k.sk.as_str()),
            ("CONFIG", "#DEFAULT_LAYOUT")
        );
    }

    #[test]
    fn slot_keys_share_the_reading_partitions_and_round_trip() {
        let start = ts("2026-04-20T14:01:00Z");
        let k = round_trip(EntityKey::Slot {
            device: dev(),
            partition: None,
            start,
            part: 0,
        });
        assert_eq!(
            (k.pk.as_str(), k.sk.as_str()),
            ("DEVICE#sensor_01", "SLOT#2026-04-20T14:01:00.000000Z#0")
        );
        let k = round_trip(EntityKey::Slot {
            device: dev(),
            partition: Some(3),
            start,
            part: 12,
        });
        assert_eq!(k.pk, "DEVICE#sensor_01#S3");
        assert!(k.sk.starts_with(&slot_sk_prefix(start)));
        let next = ts("2026-04-20T14:01:10Z");
        let (lo, hi) = slot_sk_between(start, start);
        for part in [0, 9, 12, u16::MAX] {
            let sk = slot_sk(start, part);
            assert!(lo <= sk && sk <= hi, "{sk}");
            assert!(slot_sk(next, part) > hi);
        }
        assert!(slot_sk(ts("2026-04-20T14:00:50Z"), u16::MAX) < lo);
        assert!(reading_sk(start) < lo, "readings are not in a slot range");
        assert_eq!(slot_start_of_sk(&slot_sk(start, 3)), Some(start));
        assert_eq!(
            slot_start_of_sk(&format!("{}x", slot_sk_prefix(start))),
            Some(start)
        );
        assert_eq!(
            slot_start_of_sk("READING#2026-04-20T14:01:00.000000Z"),
            None
        );
        for bad in [
            "SLOT#2026-04-20T14:01:00.000000Z",
            "SLOT#2026-04-20T14:01:00.000000Z#01",
            "SLOT#2026-04-20T14:01:00Z#0",
            "SLOT#2026-04-20T14:01:00.000000Z#x",
        ] {
            assert!(EntityKey::parse("DEVICE#sensor_01", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_callers_minute_lives_in_its_own_partition_under_a_hash_and_parses_back() {
        let minute = Timestamp::parse_rfc3339("2026-04-20T11:59:00Z").unwrap();
        let caller = CallerHash::of("auth0|user-1");
        let k = round_trip(EntityKey::CallerRate {
            caller: caller.clone(),
            minute,
        });
        assert_eq!(k.pk, format!("CALLER#{}", caller.as_str()));
        assert_eq!(k.sk, "RATE#2026-04-20T11:59:00.000000Z");
        // The identity is not in the key, and its length does not make the key longer.
        assert!(!k.pk.contains("user-1"));
        assert_eq!(CallerHash::of(&"x".repeat(10_000)).as_str().len(), 32);
        assert_ne!(CallerHash::of("a"), CallerHash::of("b"));
        assert_eq!(CallerHash::of("a"), CallerHash::of("a"));
        // Any instant of the minute names the minute.
        let late = minute.plus_millis(59_999).unwrap();
        assert_eq!(
            EntityKey::CallerRate {
                caller: caller.clone(),
                minute: late
            }
            .key(),
            k
        );
        for (pk, sk) in [
            (k.pk.as_str(), "RATE#2026-04-20T11:59:30.000000Z"),
            (k.pk.as_str(), "RATE#x"),
            (k.pk.as_str(), "#METADATA"),
            ("CALLER#ABCDEF", k.sk.as_str()),
            ("CALLER#", k.sk.as_str()),
        ] {
            assert!(EntityKey::parse(pk, sk).is_err(), "{pk} / {sk}");
        }
    }

    #[test]
    fn a_devices_metric_names_of_a_day_live_in_its_partition_and_parse_back() {
        let day = Day::parse("2026-04-20").unwrap();
        let k = round_trip(EntityKey::MetricNames { device: dev(), day });
        assert_eq!(
            (k.pk.as_str(), k.sk.as_str()),
            ("DEVICE#sensor_01", "METRICS#2026-04-20")
        );
        for bad in [
            "METRICS#",
            "METRICS#2026-4-20",
            "METRICS#2026-04-31",
            "METRICS#x",
        ] {
            assert!(EntityKey::parse("DEVICE#sensor_01", bad).is_err(), "{bad}");
        }
        // Only in the device's own partition, never a reading partition's.
        assert!(EntityKey::parse("DEVICE#sensor_01#S1", "METRICS#2026-04-20").is_err());
    }

    #[test]
    fn device_key_matches_design() {
        let k = round_trip(EntityKey::Device(dev()));
        assert_eq!(
            (k.pk.as_str(), k.sk.as_str()),
            ("DEVICE#sensor_01", "#METADATA")
        );
        assert_eq!(
            status_gsi1pk(DeviceStatus::Active, None),
            "DEVICE_STATUS#active"
        );
        assert_eq!(
            status_gsi1pk(DeviceStatus::Active, Some(3)),
            "DEVICE_STATUS#active#3"
        );
        assert_eq!(device_gsi1sk(&dev()), "DEVICE#sensor_01");
        assert_eq!(
            parse_status_gsi1pk("DEVICE_STATUS#active#3"),
            Some((DeviceStatus::Active, Some(3)))
        );
    }

    #[test]
    fn status_shards_spread_devices_and_listing_covers_them() {
        assert_eq!(status_partition_for(&dev(), 1), None);
        let pks = status_gsi1pks(DeviceStatus::Active, 4);
        assert_eq!(pks.len(), 4);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..400 {
            let d = DeviceId::new(&format!("sensor_{i}")).unwrap();
            let pk = device_status_gsi1pk(&d, DeviceStatus::Active, 4);
            assert!(pks.contains(&pk), "{pk}");
            assert_eq!(pk, device_status_gsi1pk(&d, DeviceStatus::Active, 4));
            seen.insert(pk);
        }
        assert_eq!(seen.len(), 4);
        assert_eq!(
            status_gsi1pks(DeviceStatus::Active, 1),
            ["DEVICE_STATUS#active"]
        );
    }

    #[test]
    fn reading_keys_match_design() {
        let at = ts("2026-04-20T14:00:00Z");
        let k = round_trip(EntityKey::Reading {
            device: dev(),
            partition: None,
            at,
        });
        assert_eq!(k.pk, "DEVICE#sensor_01");
        assert_eq!(k.sk, "READING#2026-04-20T14:00:00.000000Z");
        let k = round_trip(EntityKey::Reading {
            device: dev(),
            partition: Some(2),
            at,
        });
        assert_eq!(k.pk, "DEVICE#sensor_01#S2");
    }

    #[test]
    fn alert_keys_match_design() {
        let id = AlertId::for_breach(
            ts("2026-04-20T14:00:00Z"),
            &MetricName::new("temperature").unwrap(),
            AlertRule::Max,
        );
        let k = round_trip(EntityKey::Alert {
            device: dev(),
            alert: id.clone(),
        });
        assert_eq!(k.pk, "DEVICE#sensor_01");
        assert_eq!(k.sk, "ALERT#20260420T140000000000Z-temperature-max");
        let n = listing_partition_of("DEVICE#sensor_01");
        assert_eq!(
            severity_gsi1pk(Severity::Critical, &k.pk),
            format!("ALERT_SEVERITY#critical#{n}")
        );
        assert!(
            severity_gsi1pks(Severity::Critical)
                .contains(&severity_gsi1pk(Severity::Critical, &k.pk))
        );
        assert_eq!(
            severity_gsi1pks(Severity::Critical).len(),
            usize::from(LISTING_PARTITIONS) + 1
        );
        for key in severity_gsi1pks(Severity::Critical) {
            assert_eq!(
                parse_severity_gsi1pk(&key),
                Some(Severity::Critical),
                "{key}"
            );
        }
        assert_eq!(parse_severity_gsi1pk("ALERT_SEVERITY#critical#16"), None);
        assert_eq!(
            alert_gsi1sk(&id),
            "ALERT#20260420T140000000000Z-temperature-max"
        );
    }

    #[test]
    fn aggregate_keys_match_design() {
        let t = ts("2026-04-20T14:37:00Z");
        let k = round_trip(EntityKey::Aggregate {
            device: dev(),
            bucket: Period::Hourly.bucket(t),
        });
        assert_eq!(k.sk, "AGG#hourly#2026-04-20T14:00:00Z");
        let k = round_trip(EntityKey::Aggregate {
            device: dev(),
            bucket: Period::Daily.bucket(t),
        });
        assert_eq!(k.sk, "AGG#daily#2026-04-20");
        assert!(k.sk.starts_with(&aggregate_sk_prefix(Period::Daily)));
    }

    #[test]
    fn aggregate_page_keys_round_trip_and_stay_out_of_aggregate_ranges() {
        let t = ts("2026-04-20T14:37:00Z");
        for bucket in [Period::Hourly.bucket(t), Period::Daily.bucket(t)] {
            let k = round_trip(EntityKey::AggregatePage {
                device: dev(),
                bucket,
                page: 12,
            });
            assert!(k.sk.starts_with(&aggregate_page_sk_prefix(bucket)));
            assert!(!k.sk.starts_with(AGG_PREFIX), "{}", k.sk);
            // Not between the bounds of any aggregate range query of the device.
            for p in [Period::Hourly, Period::Daily] {
                let lo = aggregate_sk(p.bucket(Timestamp::MIN));
                let hi = aggregate_sk(p.bucket(Timestamp::MAX));
                assert!(k.sk < lo || k.sk > hi, "{} in {lo}..{hi}", k.sk);
            }
        }
        let k = EntityKey::AggregatePage {
            device: dev(),
            bucket: Period::Hourly.bucket(t),
            page: 3,
        }
        .key();
        assert_eq!(k.sk, "AGGPAGE#hourly#2026-04-20T14:00:00Z#3");
        // Page 1 of one hour never shares a prefix with another hour's pages.
        let other = aggregate_page_sk_prefix(Period::Hourly.bucket(ts("2026-04-20T15:00:00Z")));
        assert!(!k.sk.starts_with(&other));
        for sk in [
            "AGGPAGE#hourly#2026-04-20T14:00:00Z#0",
            "AGGPAGE#hourly#2026-04-20T14:00:00Z#01",
            "AGGPAGE#hourly#2026-04-20T14:00:00Z",
            "AGGPAGE#weekly#2026-04-20#1",
        ] {
            assert!(EntityKey::parse("DEVICE#sensor_01", sk).is_err(), "{sk}");
        }
    }

    #[test]
    fn quarantine_and_config_keys_match_design() {
        let received = ts("2026-04-20T14:00:00.123000Z");
        let k = round_trip(EntityKey::Quarantine {
            day: received.day(),
            partition: 1,
            received,
            sequence: "49590338271490256608559692538361571095921575989136588898".into(),
        });
        assert_eq!(k.pk, "QUARANTINE#2026-04-20#1");
        assert_eq!(
            k.sk,
            "2026-04-20T14:00:00.123000Z#49590338271490256608559692538361571095921575989136588898"
        );
        let k = round_trip(EntityKey::DeviceLayout(dev()));
        assert_eq!(
            (k.pk.as_str(), k.sk.as_str()),
            ("CONFIG", "SHARDS#sensor_01")
        );
    }

    #[test]
    fn repair_keys_are_one_time_ordered_partition_per_role_and_round_trip() {
        let record = FailedRecord::new("rollups", "000000000000000000042").unwrap();
        let k = round_trip(EntityKey::Repair {
            at: ts("2026-04-21T00:14:30Z"),
            record,
        });
        assert_eq!(k.pk, "REPAIR#rollups");
        assert_eq!(k.sk, "2026-04-21T00:14:30.000000Z#000000000000000000042");
        assert_eq!(repair_pk("alerts"), "REPAIR#alerts");
        assert!(EntityKey::parse("REPAIR#rollups", "2026-04-21T00:14:30.000000Z").is_err());
        assert!(EntityKey::parse("REPAIR#", "2026-04-21T00:14:30.000000Z#1").is_err());
    }

    #[test]
    fn failure_count_keys_name_the_function_and_record_and_round_trip() {
        let f = FailedRecord::new(
            "ingest",
            "49590338271490256608559692538361571095921575989136588898.3",
        )
        .unwrap();
        let k = round_trip(EntityKey::Failures(f));
        assert_eq!(k.pk, "PIPELINE");
        assert_eq!(
            k.sk,
            "FAILURES#ingest#49590338271490256608559692538361571095921575989136588898.3"
        );
        assert!(
            FailedRecord::new("ingest", "a#b").is_none(),
            "never a second #"
        );
        assert!(FailedRecord::new("", "1").is_none());
        assert!(FailedRecord::new("rollups", &"9".repeat(201)).is_none());
        assert!(EntityKey::parse(PIPELINE_PK, "FAILURES#ingest").is_err());
    }

    #[test]
    fn notify_marker_keys_are_their_own_partition_and_round_trip() {
        let e = EventId::new("0123456789abcdef0123456789abcdef").unwrap();
        let hb = round_trip(EntityKey::Heartbeat(
            ShardName::new("shardId-000000000001").unwrap(),
        ));
        assert_eq!(hb.sk, "HEARTBEAT#shardId-000000000001");
        assert!(EntityKey::parse(PIPELINE_PK, "HEARTBEAT#a#b").is_err());
        assert!(watch_gsi2pks().contains(&watch_gsi2pk(&dev())));
        let k = round_trip(EntityKey::NotifyMarker(e));
        assert_eq!(k.pk, "NOTIFIED#0123456789abcdef0123456789abcdef");
        assert_eq!(k.sk, "#MARKER");
        assert!(
            !k.pk.starts_with(DEVICE_PREFIX),
            "never in a device partition"
        );
        for (pk, sk) in [
            ("NOTIFIED#0123456789abcdef0123456789abcdef", "#METADATA"),
            ("NOTIFIED#0123456789ABCDEF0123456789ABCDEF", "#MARKER"),
            ("NOTIFIED#0123", "#MARKER"),
            ("NOTIFIED#", "#MARKER"),
        ] {
            assert!(EntityKey::parse(pk, sk).is_err(), "{pk} / {sk}");
        }
    }

    #[test]
    fn foreign_and_malformed_keys_are_rejected() {
        for (pk, sk) in [
            ("USER#1", "#METADATA"),
            ("DEVICE#a#b", "#METADATA"),
            ("DEVICE#sensor_01#S1", "#METADATA"),
            (
                "DEVICE#sensor_01#S01",
                "READING#2026-04-20T14:00:00.000000Z",
            ),
            ("DEVICE#sensor_01", "READING#2026-04-20T14:00:00Z"),
            ("DEVICE#sensor_01", "AGG#weekly#2026-04-20"),
            ("DEVICE#sensor_01", "OTHER"),
            ("QUARANTINE#2026-04-20#9", "2026-04-20T14:00:00.000000Z#1"),
            ("CONFIG", "OTHER#x"),
            ("DEVICE#", "#METADATA"),
        ] {
            assert!(EntityKey::parse(pk, sk).is_err(), "{pk} / {sk}");
        }
    }

    #[test]
    fn a_quarantined_user_record_of_an_aggregate_has_a_key_of_its_own() {
        let k = EntityKey::parse(
            "QUARANTINE#2026-04-20#1",
            "2026-04-20T14:00:00.000000Z#4959.3",
        )
        .unwrap();
        assert!(matches!(k, EntityKey::Quarantine { ref sequence, .. } if sequence == "4959.3"));
        let part = EntityKey::parse(
            "QUARANTINE#2026-04-20#1",
            "2026-04-20T14:00:00.000000Z#4959.0#2",
        )
        .unwrap();
        assert!(matches!(part, EntityKey::QuarantinePart { part: 2, .. }));
        for bad in ["4959.", "4959.x", "4959.03", ".3", "4959.1.2"] {
            let sk = format!("2026-04-20T14:00:00.000000Z#{bad}");
            assert!(
                EntityKey::parse("QUARANTINE#2026-04-20#1", &sk).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_groups_counts_alerts_and_rule_states_have_keys_of_their_own() {
        let tag = Tag::parse("site:A").unwrap();
        let k = round_trip(EntityKey::TagCount {
            tag: tag.clone(),
            partition: 15,
        });
        assert_eq!((k.pk.as_str(), k.sk.as_str()), ("TAG#site:A#15", "#COUNT"));
        let alert = AlertId::for_group(ts("2026-04-20T14:00:00Z"), "0a1b2c3d");
        let k = round_trip(EntityKey::GroupAlert {
            tag: tag.clone(),
            alert: alert.clone(),
        });
        assert_eq!(k.pk, "GROUP#site:A");
        assert_eq!(k.sk, "ALERT#20260420T140000000000Z-group.0a1b2c3d");
        assert_eq!(alert.rule_tag(), Some("0a1b2c3d"));
        let k = round_trip(EntityKey::GroupRule {
            tag: tag.clone(),
            rule: "0a1b2c3d".into(),
        });
        assert_eq!(k.sk, "RULE#0a1b2c3d");
        // A device's alert is not a group's, and a rule tag is 8 hex digits.
        assert!(EntityKey::parse("GROUP#site:A", "ALERT#20260420T140000000000Z-offline").is_err());
        assert!(EntityKey::parse("GROUP#site:A", "RULE#0A1B2C3D").is_err());
        assert!(EntityKey::parse("TAG#site:A#16", "#COUNT").is_err());
    }
}
