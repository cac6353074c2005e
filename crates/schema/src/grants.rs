//! Which partitions each function may write (docs/design.md §7, "Least privilege").
//!
//! `template.yaml` gives every write action of these functions (PutItem, UpdateItem,
//! DeleteItem, BatchWriteItem, PartiQLInsert) only under a `dynamodb:LeadingKeys` condition
//! (`ForAllValues:StringLike`) naming exactly these partitions, so a function that tries to
//! write anywhere else gets AccessDenied. DynamoDB checks the condition per item, in a batch
//! too. The test `tests/tests/it/template_grants_what_functions_use.rs` holds the template to
//! this table, and this table to the key constructors each function's code uses; reads stay
//! unconditioned.
//!
//! Every entry names a partition key constant of [`crate::keys`], so a grant can only name
//! a partition the schema builds.

use crate::keys::{
    CALLER_PREFIX, CONFIG_PK, DEVICE_PREFIX, EXPORT_PK, GROUP_PREFIX, PIPELINE_PK,
    QUARANTINE_PREFIX, TAG_INDEX_PREFIX,
};

/// Partition keys a function may write: one partition, or every partition starting with a
/// prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Partitions {
    /// Exactly this partition key (`CONFIG`, `PIPELINE`, `EXPORT`).
    Exactly(&'static str),
    /// Every partition key starting with this prefix (`DEVICE#…`).
    StartingWith(&'static str),
}

impl Partitions {
    /// The value of the `dynamodb:LeadingKeys` condition (`StringLike`): the key itself, or
    /// the prefix followed by `*`. No key part can hold `*` or `?`, so the pattern matches
    /// exactly the keys [`Partitions::contains`] accepts.
    pub fn pattern(&self) -> String {
        match self {
            Partitions::Exactly(pk) => (*pk).to_owned(),
            Partitions::StartingWith(prefix) => format!("{prefix}*"),
        }
    }

    pub fn contains(&self, pk: &str) -> bool {
        match self {
            Partitions::Exactly(p) => pk == *p,
            Partitions::StartingWith(prefix) => pk.starts_with(prefix),
        }
    }
}

/// Ingest: readings and packed slots in their device's partitions (`DEVICE#<id>[#S<n>]`),
/// the metric names each device was admitted with per day (`DEVICE#<id>` / `METRICS#<day>`),
/// quarantined records (`QUARANTINE#<day>#<n>`), heartbeats and failure counts (`PIPELINE`),
/// and layout histories (`CONFIG`, when a packed device's layout gets its first epoch).
pub const INGEST_WRITES: &[Partitions] = &[
    Partitions::StartingWith(DEVICE_PREFIX),
    Partitions::StartingWith(QUARANTINE_PREFIX),
    Partitions::Exactly(PIPELINE_PK),
    Partitions::Exactly(CONFIG_PK),
];

/// The API: device items and their alerts (`DEVICE#<id>`: registration, thresholds,
/// acknowledgements, snoozes), layout and tag histories (`CONFIG`), and the tag index with
/// its member counts (`TAG#<key>:<value>#<n>`) that `PUT /devices/{id}` keeps, and each caller's requests per
/// minute (`CALLER#<hash>`) when `CALLER_RATE_LIMIT` is on.
pub const API_WRITES: &[Partitions] = &[
    Partitions::StartingWith(DEVICE_PREFIX),
    Partitions::Exactly(CONFIG_PK),
    Partitions::StartingWith(TAG_INDEX_PREFIX),
    Partitions::StartingWith(GROUP_PREFIX),
    Partitions::StartingWith(CALLER_PREFIX),
];

/// The exporter: its cursor and the hours to export again (`EXPORT`), and the group
/// rollups it recomputes from the members' readings of a closed hour (`GROUP#<key>:<value>`).
pub const EXPORTER_WRITES: &[Partitions] = &[
    Partitions::Exactly(EXPORT_PK),
    Partitions::StartingWith(GROUP_PREFIX),
];

/// The watchdog: offline alerts and the device items that point at them (`DEVICE#<id>`),
/// the offline counts of the device's tags (`TAG#<key>:<value>#<n>` / `#COUNT`), and the
/// group rules' states and alerts (`GROUP#<key>:<value>`). It reads the pipeline's
/// heartbeats but never writes them (ingest does).
pub const WATCHDOG_WRITES: &[Partitions] = &[
    Partitions::StartingWith(DEVICE_PREFIX),
    Partitions::StartingWith(TAG_INDEX_PREFIX),
    Partitions::StartingWith(GROUP_PREFIX),
];

/// Each conditioned function (its crate's name) and the partitions it writes. The
/// aggregator's two roles are not conditioned (docs/design.md §7 says why).
pub const WRITES: &[(&str, &[Partitions])] = &[
    ("ingest", INGEST_WRITES),
    ("api", API_WRITES),
    ("exporter", EXPORTER_WRITES),
    ("watchdog", WATCHDOG_WRITES),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AlertId, DeviceId, MetricName};
    use crate::keys::{EntityKey, FailedRecord, ShardName};
    use crate::tags::Tag;
    use crate::time::{Period, Timestamp};

    fn device() -> DeviceId {
        DeviceId::new("pump-1").unwrap()
    }

    fn hour() -> Timestamp {
        Timestamp::parse_canonical("2026-01-02T03:00:00.000000Z").unwrap()
    }

    fn tag() -> Tag {
        Tag::parse("site:a").unwrap()
    }

    /// One key of each kind each function writes, built by the schema's own constructors.
    fn written(function: &str) -> Vec<EntityKey> {
        let at = hour();
        match function {
            "ingest" => vec![
                EntityKey::Reading {
                    device: device(),
                    partition: None,
                    at,
                },
                EntityKey::Reading {
                    device: device(),
                    partition: Some(3),
                    at,
                },
                EntityKey::Slot {
                    device: device(),
                    partition: Some(1),
                    start: at,
                    part: 0,
                },
                EntityKey::Quarantine {
                    day: at.day(),
                    partition: 2,
                    received: at,
                    sequence: "4960".into(),
                },
                EntityKey::QuarantinePart {
                    day: at.day(),
                    partition: 2,
                    received: at,
                    sequence: "4960".into(),
                    part: 1,
                },
                EntityKey::MetricNames {
                    device: device(),
                    day: at.day(),
                },
                EntityKey::Heartbeat(ShardName::new("shardId-000000000000").unwrap()),
                EntityKey::Failures(FailedRecord::new("ingest", "4960").unwrap()),
                EntityKey::DeviceLayout(device()),
                EntityKey::DefaultLayout,
            ],
            "api" => vec![
                EntityKey::Device(device()),
                EntityKey::Alert {
                    device: device(),
                    alert: AlertId::for_offline(hour()),
                },
                EntityKey::DeviceLayout(device()),
                EntityKey::DefaultLayout,
                EntityKey::TagHistory(device()),
                EntityKey::TagChanges(3),
                EntityKey::TagIndex {
                    tag: tag(),
                    partition: 15,
                    device: device(),
                },
                EntityKey::TagCount {
                    tag: tag(),
                    partition: 15,
                },
                EntityKey::GroupAlert {
                    tag: tag(),
                    alert: AlertId::for_group(hour(), "0a1b2c3d"),
                },
                EntityKey::CallerRate {
                    caller: crate::keys::CallerHash::of("user-1"),
                    minute: hour(),
                },
            ],
            "exporter" => vec![
                EntityKey::ExportCursor,
                EntityKey::ExportDirty(at),
                EntityKey::ExportJob(at),
                EntityKey::GroupBucket {
                    tag: tag(),
                    metric: MetricName::new("temp").unwrap(),
                    bucket: Period::Hourly.bucket(at),
                },
            ],
            "watchdog" => vec![
                EntityKey::Device(device()),
                EntityKey::Alert {
                    device: device(),
                    alert: AlertId::for_offline(hour()),
                },
                EntityKey::TagCount {
                    tag: tag(),
                    partition: 0,
                },
                EntityKey::GroupRule {
                    tag: tag(),
                    rule: "0a1b2c3d".into(),
                },
                EntityKey::GroupAlert {
                    tag: tag(),
                    alert: AlertId::for_group(hour(), "0a1b2c3d"),
                },
            ],
            other => panic!("no examples for {other}"),
        }
    }

    /// Partitions none of the three functions writes: the aggregator's and the watchdog's.
    fn never_written_by_them() -> Vec<EntityKey> {
        vec![
            EntityKey::NotifyMarker(crate::ids::EventId::new(&"0a".repeat(16)).unwrap()),
            EntityKey::Repair {
                at: hour(),
                record: FailedRecord::new("rollups", "1").unwrap(),
            },
            EntityKey::GroupPartial {
                tag: tag(),
                hour: hour(),
                batch: "1".into(),
            },
            EntityKey::GroupBatch("1".into()),
        ]
    }

    #[test]
    fn each_function_may_write_every_kind_of_item_it_writes() {
        for (function, partitions) in WRITES {
            for k in written(function) {
                let pk = k.key().pk;
                assert!(
                    partitions.iter().any(|p| p.contains(&pk)),
                    "{function} writes {k:?} ({pk}), outside {partitions:?}"
                );
            }
        }
    }

    #[test]
    fn each_granted_partition_holds_an_item_its_function_writes() {
        for (function, partitions) in WRITES {
            let keys: Vec<String> = written(function).iter().map(|k| k.key().pk).collect();
            for p in *partitions {
                assert!(
                    keys.iter().any(|pk| p.contains(pk)),
                    "{function} may write {p:?}, but writes nothing there"
                );
            }
        }
    }

    #[test]
    fn the_grants_keep_each_function_out_of_the_others_partitions() {
        let others = never_written_by_them();
        for (function, partitions) in WRITES {
            for k in &others {
                let pk = k.key().pk;
                assert!(
                    !partitions.iter().any(|p| p.contains(&pk)),
                    "{function} may write {pk}"
                );
            }
        }
        let contains = |ps: &[Partitions], k: EntityKey| {
            let pk = k.key().pk;
            ps.iter().any(|p| p.contains(&pk))
        };
        // The exporter writes neither devices, quarantine nor configuration; the API
        // neither quarantine, pipeline nor export state; ingest neither export state,
        // groups nor the tag index.
        let quarantined = EntityKey::Quarantine {
            day: hour().day(),
            partition: 0,
            received: hour(),
            sequence: "1".into(),
        };
        let heartbeat = EntityKey::Heartbeat(ShardName::new("shardId-1").unwrap());
        let tag_index = EntityKey::TagIndex {
            tag: tag(),
            partition: 0,
            device: device(),
        };
        for k in [
            EntityKey::Device(device()),
            quarantined.clone(),
            EntityKey::DefaultLayout,
        ] {
            assert!(!contains(EXPORTER_WRITES, k.clone()), "exporter: {k:?}");
        }
        for k in [quarantined, heartbeat, EntityKey::ExportCursor] {
            assert!(!contains(API_WRITES, k.clone()), "api: {k:?}");
        }
        // Only the API counts callers.
        let caller = EntityKey::CallerRate {
            caller: crate::keys::CallerHash::of("user-1"),
            minute: hour(),
        };
        for ps in [INGEST_WRITES, EXPORTER_WRITES, WATCHDOG_WRITES] {
            assert!(!contains(ps, caller.clone()), "{ps:?}");
        }
        for k in written("exporter").into_iter().chain([tag_index]) {
            assert!(!contains(INGEST_WRITES, k.clone()), "ingest: {k:?}");
        }
    }

    #[test]
    fn a_pattern_is_the_key_or_its_prefix_and_a_star() {
        assert_eq!(Partitions::Exactly(EXPORT_PK).pattern(), "EXPORT");
        assert_eq!(
            Partitions::StartingWith(DEVICE_PREFIX).pattern(),
            "DEVICE#*"
        );
        // `DEVICE#*` is not `DEVICE_STATUS#…` (a GSI partition, never a table key anyway).
        assert!(!Partitions::StartingWith(DEVICE_PREFIX).contains("DEVICE_STATUS#online"));
        assert!(!Partitions::Exactly(EXPORT_PK).contains("EXPORTS"));
    }
}
