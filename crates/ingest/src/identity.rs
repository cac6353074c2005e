//! Which devices a record may speak for (`DEVICE_IDENTITY`, docs/design.md §3 "Device
//! identity"). Pure: the gateway lists it needs are looked up (and cached) by the handler.
//!
//! - `payload`: a reading's device is whatever it says.
//! - `partition-key`: a reading's device is the record's partition key (a KPL user record's
//!   own), or one of the devices the partition key's device lists in its `gatewayFor`.
//! - `iot-thing`: the record came through the IoT rule, which names the publishing thing
//!   ([`crate::decode::THING_FIELD`]); every reading names that thing.
//!
//! A record the IoT rule forwarded is held to the thing in `partition-key` mode too (the rule
//! makes the thing its partition key, and a thing speaks for no gateway list), so one
//! deployment serves direct producers and IoT Core under one setting.
//!
//! Readings that break the rule are taken out of their record and reported as one
//! `identity_mismatch` rejection; the record's other readings are stored.

use std::collections::BTreeSet;

use tidemark_schema::{DeviceId, DeviceIdentity, GatewayFor, QuarantineReason, Reading};

use crate::decode::{Rejection, THING_FIELD};

/// At most this many device ids are named in a rejection's message.
const NAMED: usize = 5;

/// The partition key a record's readings must name, or whose gateway list they may name,
/// when a reading names another device (`partition-key` mode, no thing); `None` when no
/// gateway list can help (every reading is the key's, another mode, or a thing).
pub fn gateway_needed(
    mode: DeviceIdentity,
    partition_key: &str,
    thing: Option<&DeviceId>,
    readings: &[Reading],
) -> Option<DeviceId> {
    if mode != DeviceIdentity::PartitionKey || thing.is_some() {
        return None;
    }
    let key = DeviceId::new(partition_key).ok()?;
    readings.iter().any(|r| r.device_id != key).then_some(key)
}

/// Splits `readings` into those the record may carry and one rejection naming the others
/// (`None` when all may be stored). `gateway` is the partition key's device's `gatewayFor`
/// (from [`gateway_needed`]'s lookup; `None`: it lists none, or is not registered).
pub fn check(
    mode: DeviceIdentity,
    partition_key: &str,
    thing: Option<&DeviceId>,
    gateway: Option<&GatewayFor>,
    readings: Vec<Reading>,
) -> (Vec<Reading>, Option<Rejection>) {
    let rule: Box<dyn Fn(&DeviceId) -> bool + '_> = match (mode, thing) {
        (DeviceIdentity::Payload, _) => return (readings, None),
        (DeviceIdentity::PartitionKey, Some(thing)) if thing.as_str() != partition_key => {
            let why = format!(
                "the record's {THING_FIELD} {thing} is not its partition key {partition_key:?} \
                 (DEVICE_IDENTITY=partition-key; the IoT rule makes them equal)"
            );
            return reject_all(readings, why);
        }
        (_, Some(thing)) => Box::new(move |d: &DeviceId| d == thing),
        (DeviceIdentity::IotThing, None) => {
            let why = format!(
                "the record names no {THING_FIELD}: with DEVICE_IDENTITY=iot-thing only records \
                 the IoT rule forwarded are stored"
            );
            return reject_all(readings, why);
        }
        (DeviceIdentity::PartitionKey, None) => Box::new(move |d: &DeviceId| {
            d.as_str() == partition_key || gateway.is_some_and(|g| g.contains(d))
        }),
    };
    let (kept, broke): (Vec<Reading>, Vec<Reading>) =
        readings.into_iter().partition(|r| rule(&r.device_id));
    if broke.is_empty() {
        return (kept, None);
    }
    let who = match thing {
        Some(thing) => format!("the IoT thing {thing} that published it"),
        None => format!(
            "its partition key {partition_key:?}{}",
            if gateway.is_some_and(|g| !g.is_empty()) {
                " or a device that gateway lists in gatewayFor"
            } else {
                " (a gateway may speak for the devices its gatewayFor lists: PUT /devices/{id})"
            }
        ),
    };
    let message = format!(
        "{} of the record's {} readings name {} other than {who} (DEVICE_IDENTITY={mode}); its \
         other readings are stored",
        broke.len(),
        kept.len() + broke.len(),
        named(&broke),
    );
    (
        kept,
        Some(Rejection::new(QuarantineReason::IdentityMismatch, message)),
    )
}

fn reject_all(readings: Vec<Reading>, why: String) -> (Vec<Reading>, Option<Rejection>) {
    let message = format!("{why}; its readings name {}", named(&readings));
    (
        Vec::new(),
        Some(Rejection::new(QuarantineReason::IdentityMismatch, message)),
    )
}

/// `device a, b … (n devices)`, at most [`NAMED`] of them.
fn named(readings: &[Reading]) -> String {
    let ids: BTreeSet<&str> = readings.iter().map(|r| r.device_id.as_str()).collect();
    let shown: Vec<String> = ids.iter().take(NAMED).map(|d| format!("{d:?}")).collect();
    match ids.len() {
        1 => format!("device {}", shown[0]),
        n if n <= NAMED => format!("devices {}", shown.join(", ")),
        n => format!("devices {} … ({n} devices)", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use tidemark_schema::Timestamp;

    fn r(device: &str) -> Reading {
        Reading {
            device_id: DeviceId::new(device).unwrap(),
            timestamp: Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap(),
            metrics: BTreeMap::new(),
            metadata: None,
        }
    }

    fn devices(rs: &[Reading]) -> Vec<&str> {
        rs.iter().map(|r| r.device_id.as_str()).collect()
    }

    fn id(s: &str) -> DeviceId {
        DeviceId::new(s).unwrap()
    }

    #[test]
    fn payload_mode_keeps_every_reading_whatever_it_names() {
        let (kept, rejected) = check(
            DeviceIdentity::Payload,
            "a",
            None,
            None,
            vec![r("a"), r("b")],
        );
        assert_eq!(devices(&kept), ["a", "b"]);
        assert_eq!(rejected, None);
        assert_eq!(
            gateway_needed(DeviceIdentity::Payload, "a", None, &[r("b")]),
            None
        );
    }

    #[test]
    fn partition_key_mode_keeps_the_keys_readings_and_names_the_others() {
        let (kept, rejected) = check(
            DeviceIdentity::PartitionKey,
            "a",
            None,
            None,
            vec![r("a"), r("b"), r("a"), r("c")],
        );
        assert_eq!(devices(&kept), ["a", "a"]);
        let rejected = rejected.unwrap();
        assert_eq!(rejected.reason, QuarantineReason::IdentityMismatch);
        assert!(
            rejected.message.starts_with(
                "2 of the record's 4 readings name devices \"b\", \"c\" other than its partition key \"a\""
            ),
            "{}",
            rejected.message
        );
    }

    #[test]
    fn a_gateway_speaks_for_the_devices_it_lists_and_no_other() {
        let list = GatewayFor::new([id("leaf_1"), id("leaf_2")]).unwrap();
        let readings = vec![r("gw"), r("leaf_1"), r("leaf_2"), r("leaf_3")];
        assert_eq!(
            gateway_needed(DeviceIdentity::PartitionKey, "gw", None, &readings),
            Some(id("gw"))
        );
        let (kept, rejected) = check(
            DeviceIdentity::PartitionKey,
            "gw",
            None,
            Some(&list),
            readings,
        );
        assert_eq!(devices(&kept), ["gw", "leaf_1", "leaf_2"]);
        assert!(rejected.unwrap().message.contains("\"leaf_3\""));
    }

    #[test]
    fn a_record_naming_only_its_key_needs_no_gateway_lookup() {
        let rs = [r("a"), r("a")];
        assert_eq!(
            gateway_needed(DeviceIdentity::PartitionKey, "a", None, &rs),
            None
        );
        // A key that is no device id cannot be a gateway: nothing to look up, all rejected.
        assert_eq!(
            gateway_needed(DeviceIdentity::PartitionKey, "not a device", None, &rs),
            None
        );
        let (kept, rejected) = check(
            DeviceIdentity::PartitionKey,
            "not a device",
            None,
            None,
            rs.to_vec(),
        );
        assert!(kept.is_empty() && rejected.is_some());
    }

    #[test]
    fn iot_thing_mode_keeps_only_the_things_readings() {
        let thing = id("sensor_07");
        let (kept, rejected) = check(
            DeviceIdentity::IotThing,
            "sensor_07",
            Some(&thing),
            None,
            vec![r("sensor_07"), r("sensor_08")],
        );
        assert_eq!(devices(&kept), ["sensor_07"]);
        let m = rejected.unwrap().message;
        assert!(
            m.contains("\"sensor_08\" other than the IoT thing sensor_07"),
            "{m}"
        );
    }

    #[test]
    fn iot_thing_mode_refuses_records_that_did_not_come_through_the_rule() {
        let (kept, rejected) = check(
            DeviceIdentity::IotThing,
            "sensor_07",
            None,
            None,
            vec![r("sensor_07")],
        );
        assert!(kept.is_empty());
        let rejected = rejected.unwrap();
        assert_eq!(rejected.reason, QuarantineReason::IdentityMismatch);
        assert!(rejected.message.contains("names no tidemarkThing"));
    }

    #[test]
    fn partition_key_mode_holds_the_iot_rules_records_to_their_thing() {
        let thing = id("sensor_07");
        let list = GatewayFor::new([id("sensor_08")]).unwrap();
        // A thing speaks for itself only, whatever a gateway list says.
        let (kept, rejected) = check(
            DeviceIdentity::PartitionKey,
            "sensor_07",
            Some(&thing),
            Some(&list),
            vec![r("sensor_07"), r("sensor_08")],
        );
        assert_eq!(devices(&kept), ["sensor_07"]);
        assert!(rejected.is_some());
        assert_eq!(
            gateway_needed(
                DeviceIdentity::PartitionKey,
                "sensor_07",
                Some(&thing),
                &[r("sensor_08")]
            ),
            None
        );
        // A thing that is not the record's partition key: nothing is stored.
        let (kept, rejected) = check(
            DeviceIdentity::PartitionKey,
            "sensor_08",
            Some(&thing),
            None,
            vec![r("sensor_07")],
        );
        assert!(kept.is_empty());
        assert!(
            rejected
                .unwrap()
                .message
                .contains("is not its partition key")
        );
    }

    #[test]
    fn a_rejection_names_a_few_devices_and_counts_the_rest() {
        let rs: Vec<Reading> = (0..12).map(|i| r(&format!("d{i:02}"))).collect();
        let (_, rejected) = check(DeviceIdentity::PartitionKey, "a", None, None, rs);
        let m = rejected.unwrap().message;
        assert!(m.contains("(12 devices)") && m.len() < 300, "{m}");
    }
}
