//! Properties of the key schema that must hold for every input, not just the examples.

use proptest::prelude::*;
use tidemark_schema::keys::{self, EntityKey};
use tidemark_schema::*;

fn any_timestamp() -> impl Strategy<Value = Timestamp> {
    (0..=Timestamp::MAX.epoch_micros()).prop_map(|us| Timestamp::from_epoch_micros(us).unwrap())
}

fn any_device_id() -> impl Strategy<Value = DeviceId> {
    "[A-Za-z0-9_.:-]{1,128}".prop_map(|s| DeviceId::new(&s).unwrap())
}

fn any_metric() -> impl Strategy<Value = MetricName> {
    "[a-z][a-zA-Z0-9_]{0,20}".prop_filter_map("reserved", |s| MetricName::new(&s).ok())
}

fn any_entity_key() -> impl Strategy<Value = EntityKey> {
    prop_oneof![
        any_device_id().prop_map(EntityKey::Device),
        (
            any_device_id(),
            proptest::option::of(0u16..64),
            any_timestamp()
        )
            .prop_map(|(device, shard, at)| EntityKey::Reading {
                device,
                partition: shard,
                at
            }),
        (
            any_device_id(),
            any_timestamp(),
            any_metric(),
            any::<bool>()
        )
            .prop_map(|(device, t, m, max)| EntityKey::Alert {
                device,
                alert: AlertId::for_breach(
                    t,
                    &m,
                    if max { AlertRule::Max } else { AlertRule::Min }
                ),
            }),
        (any_device_id(), any_timestamp(), any::<bool>()).prop_map(|(device, t, hourly)| {
            let p = if hourly {
                Period::Hourly
            } else {
                Period::Daily
            };
            EntityKey::Aggregate {
                device,
                bucket: p.bucket(t),
            }
        }),
        (any_device_id(), any_timestamp(), any::<bool>(), 1u16..).prop_map(
            |(device, t, hourly, page)| {
                let p = if hourly {
                    Period::Hourly
                } else {
                    Period::Daily
                };
                EntityKey::AggregatePage {
                    device,
                    bucket: p.bucket(t),
                    page,
                }
            }
        ),
        (
            any_timestamp(),
            "[0-9]{1,60}",
            0u16..keys::QUARANTINE_PARTITIONS
        )
            .prop_map(|(received, sequence, partition)| EntityKey::Quarantine {
                day: received.day(),
                partition,
                received,
                sequence,
            }),
        (
            any_timestamp(),
            "[0-9]{1,60}",
            0u16..keys::QUARANTINE_PARTITIONS,
            1u16..8
        )
            .prop_map(
                |(received, sequence, partition, part)| EntityKey::QuarantinePart {
                    day: received.day(),
                    partition,
                    received,
                    sequence,
                    part,
                }
            ),
        any_device_id().prop_map(EntityKey::DeviceLayout),
        "[0-9a-f]{32}"
            .prop_map(|s| EntityKey::NotifyMarker(tidemark_schema::EventId::new(&s).unwrap())),
    ]
}

proptest! {
    #[test]
    fn key_order_equals_time_order(a in any_timestamp(), b in any_timestamp()) {
        prop_assert_eq!(keys::reading_sk(a).cmp(&keys::reading_sk(b)), a.cmp(&b));
        prop_assert_eq!(a.to_string().len(), Timestamp::WIDTH);
    }

    #[test]
    fn hour_and_day_labels_sort_like_time(a in any_timestamp(), b in any_timestamp()) {
        for p in [Period::Hourly, Period::Daily] {
            let (ba, bb) = (p.bucket(a), p.bucket(b));
            prop_assert_eq!(keys::aggregate_sk(ba).cmp(&keys::aggregate_sk(bb)), ba.cmp(&bb));
        }
    }

    #[test]
    fn parse_of_build_is_identity(k in any_entity_key()) {
        let key = k.key();
        prop_assert_eq!(EntityKey::parse(&key.pk, &key.sk).unwrap(), k);
    }

    #[test]
    fn timestamps_round_trip_through_every_form(t in any_timestamp()) {
        prop_assert_eq!(Timestamp::parse_rfc3339(&t.to_string()).unwrap(), t);
        prop_assert_eq!(Timestamp::parse_canonical(&t.to_string()).unwrap(), t);
        prop_assert_eq!(Timestamp::parse_compact(&t.to_compact_string()).unwrap(), t);
        let ms = Timestamp::parse_flexible(&t.epoch_millis().to_string()).unwrap();
        prop_assert_eq!(ms.epoch_millis(), t.epoch_millis());
        prop_assert!(ms <= t && t.epoch_micros() - ms.epoch_micros() < 1_000);
    }

    #[test]
    fn any_offset_names_the_same_instant(t in any_timestamp(), off in -(23*60+59)..=(23*60+59i64)) {
        let local = Timestamp::from_epoch_micros(t.epoch_micros() + off * 60_000_000);
        prop_assume!(local.is_ok());
        let s = local.unwrap().to_string();
        let sign = if off < 0 { '-' } else { '+' };
        let text = format!("{}{}{:02}:{:02}", &s[..26], sign, off.abs() / 60, off.abs() % 60);
        prop_assert_eq!(Timestamp::parse_rfc3339(&text).unwrap(), t);
    }

    /// No accepted device ID yields a key of another entity or another device.
    #[test]
    fn no_device_id_forges_another_key(id in any_device_id(), t in any_timestamp()) {
        let own = [
            EntityKey::Device(id.clone()),
            EntityKey::Reading { device: id.clone(), partition: None, at: t },
            EntityKey::Aggregate { device: id.clone(), bucket: Period::Daily.bucket(t) },
            EntityKey::DeviceLayout(id.clone()),
        ];
        for k in own {
            let key = k.key();
            let parsed = EntityKey::parse(&key.pk, &key.sk).unwrap();
            prop_assert_eq!(&parsed, &k);
        }
        let pk = keys::device_pk(&id);
        prop_assert!(!pk.starts_with(keys::QUARANTINE_PREFIX));
        prop_assert!(pk != keys::CONFIG_PK);
        prop_assert_eq!(pk.matches('#').count(), 1);
    }

    /// Arbitrary strings are either rejected or accepted only with the allowed characters.
    #[test]
    fn device_id_validation_is_exactly_the_rule(s in "\\PC{0,140}") {
        let ok = !s.is_empty()
            && s.chars().count() <= 128
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c));
        prop_assert_eq!(DeviceId::new(&s).is_ok(), ok);
    }

    #[test]
    fn shard_of_a_reading_never_changes_when_history_grows(
        t in any_timestamp(), n1 in 1u16..16, n2 in 1u16..16, gap in 1i64..1_000_000)
    {
        let h1 = LayoutHistory::default().with_change(Timestamp::MIN, n1).unwrap();
        let Some(later) = t.plus_millis(gap) else { return Ok(()); };
        let h2 = h1.with_change(later, n2).unwrap();
        prop_assert_eq!(h1.partition_at(t), h2.partition_at(t));
        prop_assert!(h2.partitions_over(t, later).contains(&h2.partition_at(later)));
        prop_assert!(h2.partitions_over(t, later).contains(&h2.partition_at(t)));
    }
}

proptest! {
    /// Parsers take untrusted input: they answer with an error, never a panic.
    #[test]
    fn parsers_never_panic(s in "\\PC{0,40}", t in "\\PC{0,40}") {
        let _ = Timestamp::parse_rfc3339(&s);
        let _ = Timestamp::parse_flexible(&s);
        let _ = Timestamp::parse_canonical(&s);
        let _ = Timestamp::parse_compact(&s);
        let _ = Day::parse(&s);
        let _ = AlertId::new(&s);
        let _ = MetricName::new(&s);
        let _ = EntityKey::parse(&s, &t);
        let _ = keys::parse_status_gsi1pk(&s);
    }

    #[test]
    fn near_miss_timestamps_never_panic(s in "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?([Zz]|[+-][0-9]{2}:[0-9]{2}|é)?") {
        if let Ok(t) = Timestamp::parse_rfc3339(&s) {
            prop_assert!(t <= Timestamp::MAX);
        }
    }
}
