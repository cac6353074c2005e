use super::*;

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn len(s: i64) -> SlotLen {
    SlotLen::new(s).unwrap()
}

#[test]
fn history_answers_count_and_shards_over_a_range() {
    let h = LayoutHistory::default()
        .with_change(ts("2026-04-20T12:00:00Z"), 4)
        .unwrap()
        .with_change(ts("2026-04-20T13:00:00Z"), 2)
        .unwrap();
    assert_eq!(h.count_at(ts("2026-04-20T11:59:59Z")), 1);
    assert_eq!(h.count_at(ts("2026-04-20T12:30:00Z")), 4);
    assert_eq!(h.count_at(ts("2026-04-20T14:00:00Z")), 2);
    let all = h.partitions_over(ts("2026-04-20T11:00:00Z"), ts("2026-04-20T14:00:00Z"));
    assert_eq!(
        all.into_iter().collect::<Vec<_>>(),
        vec![None, Some(0), Some(1), Some(2), Some(3)]
    );
    let late = h.partitions_over(ts("2026-04-20T13:30:00Z"), ts("2026-04-20T14:00:00Z"));
    assert_eq!(late.into_iter().collect::<Vec<_>>(), vec![Some(0), Some(1)]);
}

#[test]
fn a_planned_change_starts_after_every_snapshot_in_use() {
    let now = ts("2026-04-20T14:00:00.250000Z");
    let lead = LayoutLead::default();
    // 30 s cache + 300 s future + 5 s skew, rounded up to the next second.
    assert_eq!(lead.earliest_change(now), ts("2026-04-20T14:05:36Z"));
    let h = LayoutHistory::default();
    assert!(matches!(
        h.planned(ts("2026-04-20T14:05:35Z"), 4, now, lead),
        Err(LayoutHistoryError::TooSoon { .. })
    ));
    let h = h.planned(ts("2026-04-20T14:05:36Z"), 4, now, lead).unwrap();
    assert_eq!(h.count_at(ts("2026-04-20T14:05:36Z")), 4);
    assert_eq!(h.count_at(ts("2026-04-20T14:05:35.999000Z")), 1);
}

#[test]
fn a_change_not_yet_in_use_is_replaced_and_one_in_use_is_kept() {
    let lead = LayoutLead::default();
    let t0 = ts("2026-04-20T14:00:00Z");
    let h = LayoutHistory::default()
        .planned(ts("2026-04-20T15:00:00Z"), 8, t0, lead)
        .unwrap();
    // Before 15:00 minus the lead, the announced epoch can be replaced.
    let replaced = h
        .planned(
            ts("2026-04-20T14:30:00Z"),
            4,
            ts("2026-04-20T14:10:00Z"),
            lead,
        )
        .unwrap();
    assert_eq!(replaced.epochs().len(), 1);
    assert_eq!(replaced.count_at(ts("2026-04-20T15:30:00Z")), 4);
    // Or withdrawn: back to 1 shard, nothing left to announce.
    let withdrawn = h
        .planned(
            ts("2026-04-20T14:30:00Z"),
            1,
            ts("2026-04-20T14:10:00Z"),
            lead,
        )
        .unwrap();
    assert_eq!(withdrawn, LayoutHistory::default());
    // After it began to be used, it stays, and a new change follows it.
    let later = h
        .planned(
            ts("2026-04-20T16:00:00Z"),
            2,
            ts("2026-04-20T14:58:00Z"),
            lead,
        )
        .unwrap();
    assert_eq!(later.epochs().len(), 2);
    assert_eq!(later.count_at(ts("2026-04-20T15:30:00Z")), 8);
    assert_eq!(later.count_at(ts("2026-04-20T16:00:00Z")), 2);
}

#[test]
fn repeating_a_change_changes_nothing() {
    let lead = LayoutLead::default();
    let h = LayoutHistory::default()
        .planned(
            ts("2026-04-20T15:00:00Z"),
            4,
            ts("2026-04-20T14:00:00Z"),
            lead,
        )
        .unwrap();
    let again = h
        .planned(
            ts("2026-04-20T15:20:00Z"),
            4,
            ts("2026-04-20T15:10:00Z"),
            lead,
        )
        .unwrap();
    assert_eq!(again, h);
    assert!(
        h.planned(
            ts("2026-04-20T16:00:00Z"),
            0,
            ts("2026-04-20T15:10:00Z"),
            lead
        )
        .is_err()
    );
}

#[test]
fn history_only_appends() {
    let h = LayoutHistory::default()
        .with_change(ts("2026-04-20T12:00:00Z"), 4)
        .unwrap();
    assert!(h.with_change(ts("2026-04-20T11:00:00Z"), 2).is_err());
    assert!(h.with_change(ts("2026-04-20T13:00:00Z"), 0).is_err());
    assert!(
        h.with_change(ts("2026-04-20T13:00:00Z"), MAX_PARTITIONS + 1)
            .is_err()
    );
}
#[test]
fn segments_cut_a_range_where_the_layout_changes() {
    let h = LayoutHistory::default()
        .with_layout(ts("2026-04-20T12:00:00Z"), Layout::packed(len(60)))
        .unwrap()
        .with_change(ts("2026-04-20T13:00:00Z"), 4)
        .unwrap();
    assert_eq!(
        h.layout_at(ts("2026-04-20T13:30:00Z")),
        Layout {
            partitions: 4,
            slot: Some(len(60))
        }
    );
    let s = h.segments(ts("2026-04-20T11:00:00Z"), ts("2026-04-20T14:00:00Z"));
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].layout, Layout::SINGLE);
    assert_eq!(s[0].to, ts("2026-04-20T11:59:59.999999Z"));
    assert_eq!(s[1].from, ts("2026-04-20T12:00:00Z"));
    assert_eq!(s[1].layout, Layout::packed(len(60)));
    assert_eq!(s[2].from, ts("2026-04-20T13:00:00Z"));
    assert_eq!(s[2].to, ts("2026-04-20T14:00:00Z"));
    assert_eq!(s[2].partitions().len(), 4);
    let inside = h.segments(ts("2026-04-20T12:10:00Z"), ts("2026-04-20T12:20:00Z"));
    assert_eq!(inside.len(), 1);
    assert_eq!(inside[0].layout, Layout::packed(len(60)));
}

#[test]
fn a_shard_change_keeps_the_packing_and_a_layout_change_keeps_nothing_else() {
    let lead = LayoutLead::default();
    let now = ts("2026-04-20T10:00:00Z");
    let packed = LayoutHistory::default()
        .planned_layout(
            ts("2026-04-20T12:00:00Z"),
            Layout::packed(len(10)),
            now,
            lead,
        )
        .unwrap();
    let later = ts("2026-04-20T12:10:00Z");
    let again = packed
        .planned_layout(
            ts("2026-04-20T12:30:00Z"),
            Layout::packed(len(10)),
            later,
            lead,
        )
        .unwrap();
    assert_eq!(again, packed, "repeating a layout changes nothing");
    let sharded = packed
        .planned(ts("2026-04-20T12:30:00Z"), 2, later, lead)
        .unwrap();
    assert_eq!(
        sharded.layout_at(ts("2026-04-20T12:30:00Z")),
        Layout {
            partitions: 2,
            slot: Some(len(10))
        }
    );
    let back = packed
        .planned_layout(ts("2026-04-20T13:00:00Z"), Layout::SINGLE, later, lead)
        .unwrap();
    assert_eq!(back.layout_at(ts("2026-04-20T13:00:00Z")), Layout::SINGLE);
    assert_eq!(
        back.layout_at(ts("2026-04-20T12:59:59Z")),
        Layout::packed(len(10))
    );
}

#[test]
fn a_device_follows_the_default_until_its_own_history_begins() {
    let default = LayoutHistory::default()
        .with_layout(ts("2026-04-20T12:00:00Z"), Layout::packed(len(60)))
        .unwrap()
        .with_layout(ts("2026-04-20T15:00:00Z"), Layout::packed(len(600)))
        .unwrap();
    assert_eq!(LayoutHistory::default().under(&default), default);
    let own = LayoutHistory::default()
        .with_layout(ts("2026-04-20T13:00:00Z"), Layout::SINGLE)
        .unwrap();
    let h = own.under(&default);
    assert_eq!(h.layout_at(ts("2026-04-20T11:00:00Z")), Layout::SINGLE);
    assert_eq!(
        h.layout_at(ts("2026-04-20T12:30:00Z")),
        Layout::packed(len(60))
    );
    assert_eq!(h.layout_at(ts("2026-04-20T16:00:00Z")), Layout::SINGLE);
}

#[test]
fn epochs_without_a_slot_read_as_before() {
    let old: LayoutHistory =
        serde_json::from_str(r#"[{"from":"2026-04-20T12:00:00.000000Z","count":4}]"#).unwrap();
    assert_eq!(
        old.layout_at(ts("2026-04-20T12:00:00Z")),
        Layout {
            partitions: 4,
            slot: None
        }
    );
    let json = serde_json::to_string(&old).unwrap();
    assert!(!json.contains("slot"), "{json}");
}
