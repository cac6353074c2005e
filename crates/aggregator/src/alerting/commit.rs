//! Writing one device's decision in transactions DynamoDB accepts.
//!
//! The device item's rule states say which alerts are open, so the rule states and the
//! alerts they name move together, in one transaction with the device update. A store-and-forward upload can
//! derive hundreds of episodes in one batch, more than a transaction's
//! [`MAX_TRANSACT_ACTIONS`]: the writes that do not fit are written first, in transactions of
//! their own, the history (episodes already over) first, and the device update goes last.
//!
//! A crash (or a lost race) between two transactions leaves the device item as it was, so
//! the retry derives the same episodes from the same readings, reads the alerts the earlier
//! transactions wrote, and plans nothing for them: each transaction is idempotent and the
//! whole ends as if written at once. Until the last one lands, the API may show some of the
//! batch's past episodes before the device's state moves on.

use tidemark_schema::AlertState;
use tidemark_schema::tags::Tags;
use tidemark_store::limits::MAX_TRANSACT_ACTIONS;

use super::write::AlertWrite;

/// Actions a device update may bring into its transaction besides the alerts: the offline
/// counts of each of its tags it leaves when back from a silence (at most [`Tags::MAX`]).
pub const DEVICE_ACTIONS: usize = 1 + Tags::MAX;

/// `writes` as transactions: those written ahead (each at most [`MAX_TRANSACT_ACTIONS`]),
/// then those that go with the device update (leaving room for [`DEVICE_ACTIONS`]).
pub fn transactions(mut writes: Vec<AlertWrite>) -> (Vec<Vec<AlertWrite>>, Vec<AlertWrite>) {
    // History first: an episode that is already over names no rule state.
    writes.sort_by_key(|w| !is_history(w));
    let with_device = writes.len().min(MAX_TRANSACT_ACTIONS - DEVICE_ACTIONS);
    let last = writes.split_off(writes.len() - with_device);
    let ahead = writes
        .chunks(MAX_TRANSACT_ACTIONS)
        .map(<[AlertWrite]>::to_vec)
        .collect();
    (ahead, last)
}

fn is_history(w: &AlertWrite) -> bool {
    matches!(w, AlertWrite::Create(a) if a.state == AlertState::Resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerting::plan::resolve;
    use tidemark_schema::{AlertId, AlertItem, AlertRule, Severity, Timestamp};

    fn create(i: i64, resolved: bool) -> AlertWrite {
        let at = Timestamp::from_epoch_micros(1_776_693_600_000_000 + i).unwrap();
        let metric = tidemark_schema::MetricName::new("t").unwrap();
        let device = tidemark_schema::DeviceId::new("d").unwrap();
        let id = AlertId::for_breach(at, &metric, AlertRule::Max);
        let mut a = AlertItem {
            pk: String::new(),
            sk: String::new(),
            gsi1pk: None,
            gsi1sk: None,
            device_id: device,
            alert_id: id,
            metric: Some(metric),
            rule: AlertRule::Max,
            rule_spec: None,
            severity: Severity::Critical,
            state: AlertState::Open,
            message: String::new(),
            value: 1.0,
            threshold: 0.0,
            breach_count: 1,
            opened_at: at,
            last_breach_at: at,
            acknowledged_at: None,
            resolved_at: None,
            snoozed_until: None,
            tags: Default::default(),
        };
        if resolved {
            resolve(&mut a, at);
        }
        AlertWrite::Create(Box::new(a))
    }

    #[test]
    fn every_transaction_fits_and_the_open_alert_goes_with_the_device() {
        for n in [0usize, 1, 82, 83, 84, 98, 99, 100, 101, 250, 301] {
            let mut writes: Vec<AlertWrite> = (0..n).map(|i| create(i as i64, true)).collect();
            writes.push(create(10_000, false));
            let (ahead, last) = transactions(writes);
            assert!(ahead.iter().all(|t| t.len() <= MAX_TRANSACT_ACTIONS));
            assert!(last.len() + DEVICE_ACTIONS <= MAX_TRANSACT_ACTIONS);
            assert_eq!(
                ahead.iter().map(Vec::len).sum::<usize>() + last.len(),
                n + 1
            );
            assert!(last.iter().any(|w| w.after().state == AlertState::Open));
        }
    }
}
