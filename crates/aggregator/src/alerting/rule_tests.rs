//! Rules of `rules` (windows, rates, stuck values, `keepFiringForSeconds`) through the alerts
//! role over the in-memory store: the issue's situations, and the property that whatever the
//! order, replays and batching, the alerts are those a brute-force evaluation of the readings
//! sorted by time gives. The same kinds run against DynamoDB Local in
//! `tests/it/local/rules_local.rs`.

use proptest::prelude::*;
use tidemark_schema::rules::parse_rules;
use tidemark_schema::{AlertRule, AlertState, RuleSpec, Side, Signal, Timestamp};

use super::tests::{Rig, at, batches_of, rig_with};
use crate::AggregatorConfig;
use crate::config::Role;
use crate::testing::{device_modify, event};

fn rules(json: &str) -> Vec<RuleSpec> {
    parse_rules(&serde_json::from_str(json).unwrap()).unwrap()
}

fn rig_rules(json: &str) -> Rig {
    rig_with(
        AggregatorConfig::new("t")
            .with_role(Role::Alerts)
            .with_default_rules(rules(json)),
    )
}

/// (opened at, resolved at) of every alert, oldest first.
fn episodes(r: &Rig) -> Vec<(Timestamp, Option<Timestamp>)> {
    r.alerts()
        .iter()
        .map(|a| (a.opened_at, a.resolved_at))
        .collect()
}

const AVG5M_ABOVE_30_FOR_10M: &str =
    r#"[{"metric":"t","aggregate":"avg","window":"5m","above":30,"forSeconds":600}]"#;

#[tokio::test]
async fn a_spike_that_leaves_the_window_mean_below_the_limit_opens_nothing() {
    // GIVEN a reading a minute at 26.25 and one spike to 40: the 5-minute mean peaks at 29
    let r = rig_rules(r#"[{"metric":"t","aggregate":"avg","window":"5m","above":30}]"#);
    let mut readings: Vec<(i64, f64)> = (0..30).map(|m| (m * 60, 26.25)).collect();
    readings[10].1 = 40.0;
    // WHEN they arrive
    r.send(&readings).await;
    // THEN no alert, though a threshold at 30 would have fired
    assert!(r.alerts().is_empty(), "{:?}", r.alerts());
}

#[tokio::test]
async fn ten_minutes_of_a_five_minute_mean_above_the_limit_opens_exactly_one_alert() {
    let r = rig_rules(AVG5M_ABOVE_30_FOR_10M);
    // GIVEN a mean of 29 for 10 minutes, then readings of 31 for 20 minutes, a minute apart
    let mut readings: Vec<(i64, f64)> = (0..10).map(|m| (m * 60, 29.0)).collect();
    readings.extend((10..30).map(|m| (m * 60, 31.0)));
    // WHEN they arrive a few at a time
    for chunk in readings.chunks(3) {
        r.send(chunk).await;
    }
    // THEN one alert, opened once the mean had been above 30 for ten minutes: the mean of
    // the window (t - 5m, t] passes 30 at minute 12 (29, 29, 31, 31, 31: 30.2), so at
    // minute 22
    let alerts = r.alerts();
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let a = &alerts[0];
    assert_eq!((a.opened_at, a.state), (at(22 * 60), AlertState::Open));
    assert_eq!(a.rule, AlertRule::Window);
    assert_eq!(a.rule.kind(), "window");
    assert_eq!(
        a.rule_spec.as_ref(),
        Some(&rules(AVG5M_ABOVE_30_FOR_10M)[0])
    );
    assert_eq!(a.message, "t avg over 5m above 30");
    assert!(a.alert_id.as_str().contains("-t-window."), "{}", a.alert_id);
}

#[tokio::test]
async fn a_rate_is_taken_between_neighbours_in_time_order_not_arrival_order() {
    let r = rig_rules(r#"[{"metric":"t","rate":"per_minute","above":5}]"#);
    // GIVEN readings rising 1 a minute; in arrival order the last one (minute 2, value 2)
    // comes after minute 10 (value 10): 8 a minute backwards in arrival, 1 in time
    r.send(&[(0, 0.0), (60, 1.0), (600, 10.0)]).await;
    // minute 1 to 10 rose 9 in 9 minutes: 1 a minute
    assert!(r.alerts().is_empty(), "{:?}", r.alerts());
    r.send(&[(120, 2.0)]).await;
    assert!(r.alerts().is_empty(), "{:?}", r.alerts());
    // WHEN a late reading makes a steep step between two neighbours
    r.send(&[(540, 9.9), (570, 30.0)]).await;
    // THEN the step from 9.9 to 30 in 30 s (40 a minute) opened, and 30 to 10 closed it
    let alerts = r.alerts();
    assert_eq!(episodes(&r), vec![(at(570), Some(at(600)))], "{alerts:?}");
    assert!((alerts[0].value - 40.2).abs() < 1e-9, "{}", alerts[0].value);
    assert_eq!(alerts[0].rule.kind(), "rate");
}

#[tokio::test]
async fn a_value_unchanged_for_an_hour_opens_a_stuck_alert_and_a_change_resolves_it() {
    let r = rig_rules(r#"[{"metric":"t","unchangedForSeconds":3600}]"#);
    // GIVEN a device that keeps sending the same flow every 10 minutes
    let same: Vec<(i64, f64)> = (0..=7).map(|i| (i * 600, 12.5)).collect();
    r.send(&same[..6]).await;
    // 50 minutes unchanged: nothing yet
    assert!(r.alerts().is_empty());
    r.send(&same[6..]).await;
    // THEN at 60 minutes it opens
    assert_eq!(episodes(&r), vec![(at(3600), None)]);
    assert_eq!(r.alerts()[0].rule.kind(), "stuck");
    // WHEN the value moves, it resolves
    r.send(&[(4800, 12.6)]).await;
    assert_eq!(episodes(&r), vec![(at(3600), Some(at(4800)))]);
}

#[tokio::test]
async fn keep_firing_for_keeps_a_flapping_signal_one_alert() {
    let r = rig_rules(
        r#"[{"metric":"t","aggregate":"max","window":"1m","above":30,"keepFiringForSeconds":300}]"#,
    );
    // GIVEN a value that flaps across the limit every two minutes, for 20 minutes, then
    // stays low
    let mut readings: Vec<(i64, f64)> = (0..10)
        .map(|i| (i * 120, if i % 2 == 0 { 31.0 } else { 20.0 }))
        .collect();
    readings.extend((10..20).map(|i| (i * 120, 20.0)));
    r.send(&readings).await;
    // THEN one alert, resolved once the signal had been clear for five minutes: the last
    // breach is at 960 s, the first clear reading after it at 1080 s, so at 1440 s (300 s
    // later, the first reading at or past it)
    assert_eq!(
        episodes(&r),
        vec![(at(0), Some(at(1440)))],
        "{:?}",
        r.alerts()
    );
}

#[tokio::test]
async fn a_window_rule_writes_the_device_only_when_its_state_changes() {
    let r = rig_rules(AVG5M_ABOVE_30_FOR_10M);
    // GIVEN a device sending a normal reading a minute, one batch each
    r.send(&[(0, 20.0)]).await;
    let mut written = 0;
    let mut derived = 0;
    // WHEN an hour of readings arrives one at a time
    for m in 1..60 {
        let report = r.send(&[(m * 60, 20.0 + (m % 3) as f64)]).await;
        written += report.items_written;
        derived += report.alert_derivations;
    }
    // THEN every reading was judged against its window, and nothing was written: a window's
    // state lives in the readings the table already holds
    assert_eq!(derived, 59);
    assert_eq!(written, 0);
}

impl Rig {
    /// Gives the device item these rules (as `PUT /devices/{id}` does) and delivers its
    /// MODIFY record.
    async fn set_device_rules(&self, json: Option<&str>, updated_at: Timestamp) {
        let store = self.agg.store();
        let before = self.device();
        let mut after = before.clone();
        after.rules = json.map(rules);
        after.updated_at = Some(updated_at);
        store.put_device(&after);
        let (resp, report) = self
            .agg
            .process(&event(vec![device_modify(9_999, &before, &after)]))
            .await;
        assert!(resp.batch_item_failures.is_empty(), "{report:?}");
    }
}

#[tokio::test]
async fn a_changed_limit_rejudges_the_newest_reading_and_never_replays_history() {
    // GIVEN an hour whose 5-minute mean sat at 29, under the fleet's rule (above 30)
    let r = rig_rules(r#"[{"metric":"t","aggregate":"avg","window":"5m","above":30}]"#);
    let readings: Vec<(i64, f64)> = (0..60).map(|m| (m * 60, 29.0)).collect();
    r.send(&readings).await;
    assert!(r.alerts().is_empty());
    // WHEN the device gets the same rule with a limit of 28
    r.set_device_rules(
        Some(r#"[{"metric":"t","aggregate":"avg","window":"5m","above":28}]"#),
        at(3_600),
    )
    .await;
    // THEN one alert, opened at the newest reading, not at the hour's start
    assert_eq!(episodes(&r), vec![(at(59 * 60), None)]);
    // and the device's own empty list turns the fleet's rules off: the alert resolves
    r.set_device_rules(Some("[]"), at(3_700)).await;
    assert_eq!(episodes(&r), vec![(at(59 * 60), Some(at(3_700)))]);
    // a rule that computes something else is another rule: it starts from the readings
    r.set_device_rules(
        Some(r#"[{"metric":"t","aggregate":"max","window":"5m","above":28}]"#),
        at(3_800),
    )
    .await;
    r.send(&[(3_660, 29.0)]).await;
    let all = r.alerts();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_ne!(all[0].alert_id.rule_tag(), all[1].alert_id.rule_tag());
}

#[tokio::test]
async fn a_p95_window_judges_only_devices_that_keep_percentiles() {
    let json = r#"[{"metric":"t","aggregate":"p95","window":"5m","above":30}]"#;
    let r = rig_rules(json);
    r.send(&[(0, 35.0)]).await;
    assert!(
        r.alerts().is_empty(),
        "no percentiles kept: the rule is not the device's"
    );
    let mut d = r.device();
    d.percentiles = true;
    r.agg.store().put_device(&d);
    r.send(&[(60, 36.0)]).await;
    assert_eq!(r.alerts().len(), 1);
}

// ---------------------------------------------------------------------------------------
// The brute force: each reading's signal by its definition, then the state machine, written
// apart from `rules::Fold` and `signal::Signal`.

#[derive(Debug, Clone, Copy, PartialEq)]
enum BruteState {
    Normal,
    Pending(i64),
    Open { opened: i64, quiet: Option<i64> },
}

fn brute_signal(spec: &RuleSpec, readings: &[(i64, f64)], i: usize) -> Option<f64> {
    let (t, v) = readings[i];
    match spec.signal {
        Signal::Window {
            aggregate,
            window_seconds,
        } => {
            let mut w: Vec<f64> = readings[..=i]
                .iter()
                .filter(|(s, _)| *s > t - i64::from(window_seconds))
                .map(|(_, v)| *v)
                .collect();
            let n = w.len() as f64;
            Some(match aggregate {
                tidemark_schema::Aggregate::Avg => w.iter().sum::<f64>() / n,
                tidemark_schema::Aggregate::Sum => w.iter().sum(),
                tidemark_schema::Aggregate::Count => n,
                tidemark_schema::Aggregate::Min => w.iter().copied().fold(f64::MAX, f64::min),
                tidemark_schema::Aggregate::Max => w.iter().copied().fold(f64::MIN, f64::max),
                tidemark_schema::Aggregate::P95 => {
                    w.sort_by(f64::total_cmp);
                    w[((0.95 * n).ceil() as usize).max(1) - 1]
                }
            })
        }
        Signal::Rate { per } => (i > 0).then(|| {
            let (t0, v0) = readings[i - 1];
            (v - v0) / (t - t0) as f64 * f64::from(per.seconds())
        }),
        Signal::Stuck => {
            let mut j = i;
            while j > 0 && readings[j - 1].1 == v {
                j -= 1;
            }
            Some((t - readings[j].0) as f64)
        }
    }
}

/// Every episode (opened at, resolved at) the readings (sorted by time, whole seconds) give.
fn brute_force(spec: &RuleSpec, readings: &[(i64, f64)]) -> Vec<(i64, Option<i64>)> {
    let for_s = i64::from(spec.for_seconds.unwrap_or(0));
    let keep = i64::from(spec.keep_firing_for_seconds.unwrap_or(0));
    let band = spec.deadband.unwrap_or(0.0);
    let mut state = BruteState::Normal;
    let mut out: Vec<(i64, Option<i64>)> = Vec::new();
    for i in 0..readings.len() {
        let t = readings[i].0;
        let (breach, clear) = match (brute_signal(spec, readings, i), spec.signal, spec.side) {
            (None, _, _) => (false, true),
            (Some(x), Signal::Stuck, _) => (x >= spec.limit, x < spec.limit),
            (Some(x), _, Side::Above) => (x > spec.limit, x <= spec.limit - band),
            (Some(x), _, Side::Below) => (x < spec.limit, x >= spec.limit + band),
        };
        state = match state {
            BruteState::Normal | BruteState::Pending(_) if !breach => BruteState::Normal,
            BruteState::Normal | BruteState::Pending(_) => {
                let since = match state {
                    BruteState::Pending(s) => s,
                    _ => t,
                };
                if t - since >= for_s {
                    out.push((t, None));
                    BruteState::Open {
                        opened: t,
                        quiet: None,
                    }
                } else {
                    BruteState::Pending(since)
                }
            }
            BruteState::Open { opened, .. } if !clear => BruteState::Open {
                opened,
                quiet: None,
            },
            BruteState::Open { opened, quiet } => {
                let q = quiet.unwrap_or(t);
                if t - q >= keep {
                    out.last_mut().unwrap().1 = Some(t);
                    BruteState::Normal
                } else {
                    BruteState::Open {
                        opened,
                        quiet: Some(q),
                    }
                }
            }
        };
    }
    out
}

fn rule_strategy() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just(r#"[{"metric":"t","aggregate":"avg","window":"60s","above":30}]"#),
        Just(r#"[{"metric":"t","aggregate":"max","window":"90s","above":31,"forSeconds":60}]"#),
        Just(r#"[{"metric":"t","aggregate":"min","window":"45s","below":27,"deadband":1}]"#),
        Just(
            r#"[{"metric":"t","aggregate":"sum","window":"120s","above":150,"keepFiringForSeconds":60}]"#
        ),
        Just(r#"[{"metric":"t","aggregate":"count","window":"100s","above":4}]"#),
        Just(r#"[{"metric":"t","rate":"per_minute","above":20,"keepFiringForSeconds":45}]"#),
        Just(r#"[{"metric":"t","rate":"per_second","below":-0.2,"forSeconds":20}]"#),
        Just(r#"[{"metric":"t","unchangedForSeconds":60}]"#),
        Just(r#"[{"metric":"t","unchangedForSeconds":90,"keepFiringForSeconds":30}]"#),
        Just(
            r#"[{"metric":"t","aggregate":"max","window":"60s","above":30,"deadband":2,"keepFiringForSeconds":40,"forSeconds":15}]"#
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// The table ahead of the stream (every reading stored before any record arrives), the
    /// records in random batches, order, replays and bisections: every alert is one the brute
    /// force opens, opened and resolved at the same instants, and none is missing.
    #[test]
    fn every_alert_opens_and_resolves_where_the_brute_force_says(
        values in proptest::collection::vec((0i64..900, 26.0f64..33.0), 1..60),
        cuts in proptest::collection::vec(1usize..6, 1..20),
        order in proptest::collection::vec(any::<u16>(), 60),
        replays in proptest::collection::vec(any::<bool>(), 60),
        json in rule_strategy(),
    ) {
        let spec = rules(json).remove(0);
        let (table, batches) = batches_of(&values, 0.5, &cuts, &order);
        let sorted: Vec<(i64, f64)> = table.iter().map(|(s, v)| (*s, *v)).collect();
        let want: Vec<(Timestamp, Option<Timestamp>)> = brute_force(&spec, &sorted)
            .into_iter()
            .map(|(o, r)| (at(o), r.map(at)))
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let got = rt.block_on(async {
            let r = rig_rules(json);
            for b in &batches { r.store(b); }
            for (k, b) in batches.iter().enumerate() {
                r.deliver(b).await;
                if replays[k % replays.len()] {
                    r.deliver(&b[..b.len().div_ceil(2)]).await;
                }
            }
            episodes(&r)
        });
        prop_assert_eq!(got, want);
    }

    /// Late data for real: each batch is stored just before its records arrive, in random
    /// order. Alerts already raised stay raised, but the rule ends where the readings sorted
    /// by time leave it: one open alert, or none. (An open alert keeps its ID and opening
    /// when late readings move its episode's opening later, so it opened no later.)
    #[test]
    fn with_late_data_the_rule_ends_where_the_readings_sorted_by_time_leave_it(
        values in proptest::collection::vec((0i64..900, 26.0f64..33.0), 1..60),
        cuts in proptest::collection::vec(1usize..6, 1..20),
        order in proptest::collection::vec(any::<u16>(), 60),
        json in rule_strategy(),
    ) {
        let spec = rules(json).remove(0);
        let (table, batches) = batches_of(&values, 0.5, &cuts, &order);
        let sorted: Vec<(i64, f64)> = table.iter().map(|(s, v)| (*s, *v)).collect();
        let want_open: Option<Timestamp> = brute_force(&spec, &sorted)
            .last()
            .filter(|(_, r)| r.is_none())
            .map(|(o, _)| at(*o));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let open = rt.block_on(async {
            let r = rig_rules(json);
            for b in &batches {
                r.store(b);
                r.deliver(b).await;
            }
            r.open_alerts()
        });
        match want_open {
            None => prop_assert!(open.is_empty(), "{:?}", open),
            Some(o) => {
                prop_assert_eq!(open.len(), 1, "{:?}", open);
                prop_assert!(open[0].opened_at <= o, "{:?} vs {:?}", open[0].opened_at, o);
            }
        }
    }
}
