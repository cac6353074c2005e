//! What group rollups add to the write bill (docs/design.md §5 "Groups"), against DynamoDB
//! Local through the metering proxy, for the standard fleet: 1,000 devices, a reading a
//! minute each (4 metrics), packed into 300 s slots (`packed:300`), each device in 3 groups
//! through 3 `GROUP_TAGS` keys. Writes `## Writes` of `bench/FLEETS.md` (the rest of the file
//! is left as it is).
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example group_writes
//! ```
//!
//! - **Partials** (the rollups role): the stream's records are the slot parts' MODIFYs, one per
//!   reading (ingest's 1 s window holds one reading of a device a minute); they arrive as the
//!   devices send, starting at 10:07:13, so the rollups mapping's 300 s windows
//!   ([`tidemark_bench::windows::batches`], opened by the first record, closed 300 s later or
//!   at 10,000 records) never line up with a slot or an hour, and two of them straddle a top
//!   of the hour. Each batch goes through the group step exactly as the role runs it
//!   ([`tidemark_aggregator::groups`]: the records' changes from their images, attributed by
//!   time, folded per (group, hour), written under the batch's manifest) with the DynamoDB
//!   store on the metered client: every write unit it spends is a group rollup's.
//! - **Summaries** (the export): the same readings, stored, and each closed hour exported
//!   ([`tidemark_exporter::hour::export_hour`], Parquet to memory): the table writes it makes
//!   are the group items. A day's items (one per group and metric, merged from its hours) are
//!   counted from their size.
//! - **Hot keys**: every write to each partition key, at the simulated time its batch was
//!   delivered; the busiest key's most writes in one second and in the 60 s around each top
//!   of the hour. The arithmetic for 100,000 devices in one group is in the section written.

use std::collections::{BTreeMap, HashMap};

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use tidemark_aggregator::DynamoStore;
use tidemark_aggregator::groups::GroupStore;
use tidemark_aggregator::groups::{self, fold};
use tidemark_aggregator::records::decode;
use tidemark_bench::artifacts::{machine, workspace_root};
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_bench::windows;
use tidemark_exporter::dynamo::DynamoExportTable;
use tidemark_exporter::hour::export_hour;
use tidemark_exporter::sink::MemorySink;
use tidemark_schema::packed::{self, SlotReadings};
use tidemark_schema::{
    DeviceId, DeviceItem, DeviceStatus, EntityKey, MetricName, Reading, ReadingItem, SlotItem,
    TABLE, TagEpoch, TagHistory, TagHistoryItem, TagKey, TagValue, Tags, Timestamp,
};
use tidemark_store::ClientSettings;

const DEVICES: u32 = 1_000;
const MINUTES: i64 = 125;
const SLOT_S: i64 = 300;
const WINDOW_MS: i64 = 300_000;
const BATCH_SIZE: usize = 10_000;
/// (key, values): each device is in one group of each (`i % values`).
const KEYS: [(&str, u32); 3] = [("site", 5), ("line", 25), ("zone", 2)];

fn metric(s: &str) -> MetricName {
    MetricName::new(s).expect("a metric name")
}

fn device(i: u32) -> DeviceId {
    DeviceId::new(&format!("dev-{i:05}")).expect("a device id")
}

fn tags_of(i: u32) -> Tags {
    Tags::new(
        KEYS.iter()
            .map(|(k, n)| {
                (
                    TagKey::new(k).expect("a key"),
                    TagValue::new(&format!("{k}{}", i % n)).expect("a value"),
                )
            })
            .collect(),
    )
    .expect("3 tags")
}

fn metrics(i: u32, k: i64) -> BTreeMap<MetricName, f64> {
    let wave = ((k as f64) / 30.0 + f64::from(i)).sin();
    BTreeMap::from([
        (metric("temperature"), ((21.0 + wave) * 10.0).round() / 10.0),
        (
            metric("humidity"),
            ((45.0 + 3.0 * wave) * 10.0).round() / 10.0,
        ),
        (metric("pressure"), 1013.2),
        (metric("battery"), (100.0 - k as f64 / 1000.0).round()),
    ])
}

fn slot_item(d: &DeviceId, start: Timestamp, readings: &SlotReadings) -> SlotItem {
    let k = EntityKey::Slot {
        device: d.clone(),
        partition: None,
        start,
        part: 0,
    }
    .key();
    SlotItem {
        pk: k.pk,
        sk: k.sk,
        packed: packed::encode(start, readings).expect("encodes"),
        reading_count: readings.len() as u64,
        version: readings.len() as u64,
        ttl: 0,
        sealed: false,
        full: false,
        metadata: Default::default(),
        arrived_at: None,
    }
}

fn record(seq: u64, old: Option<&SlotItem>, new: &SlotItem) -> EventRecord {
    tidemark_aggregator::testing::slot_record(seq, old, Some(new))
}

/// The most writes `times` (ms) hold in any second, and in any second of the 60 s around a
/// top of the hour.
fn peaks(times: &[i64]) -> (usize, usize) {
    let mut t = times.to_vec();
    t.sort_unstable();
    let (mut any, mut top) = (0, 0);
    let mut j = 0;
    for i in 0..t.len() {
        while t[i] - t[j] >= 1000 {
            j += 1;
        }
        let n = i - j + 1;
        any = any.max(n);
        let into = t[i].rem_euclid(3_600_000);
        if !(30_000..=3_570_000).contains(&into) {
            top = top.max(n);
        }
    }
    (any, top)
}

/// `text` with its `## Writes` section (up to the next `## ` heading) replaced by `section`.
fn with_section(text: &str, section: &str) -> String {
    let Some(start) = text.find("## Writes") else {
        let mut out = text.trim_end().to_owned();
        out.push_str("\n\n");
        out.push_str(section);
        return out;
    };
    let rest = &text[start + 2..];
    let end = rest.find("\n## ").map_or(text.len(), |e| start + 2 + e + 1);
    format!("{}{}{}", &text[..start], section, &text[end..])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dynamo = LocalDynamo::start().await.expect("DynamoDB Local starts");
    let meter = Meter::start(dynamo.addr).await.expect("meter");
    let client = tidemark_store::dynamodb_client(&ClientSettings::local(meter.endpoint())).await;
    let direct =
        tidemark_store::dynamodb_client(&ClientSettings::local(format!("http://{}", dynamo.addr)))
            .await;
    let table = "group-writes";
    tidemark_store::create_table(&direct, table, &TABLE)
        .await
        .expect("table");
    let base = Timestamp::parse_rfc3339("2026-04-20T10:07:13Z").expect("a time");
    let keys: Vec<TagKey> = KEYS
        .iter()
        .map(|(k, _)| TagKey::new(k).expect("a key"))
        .collect();
    let histories: HashMap<DeviceId, TagHistory> = (0..DEVICES)
        .map(|i| {
            let h = TagHistory::from_epochs(vec![TagEpoch {
                from: Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").expect("a time"),
                tags: tags_of(i),
            }]);
            (device(i), h)
        })
        .collect();

    // The readings, in arrival order: device i sends at base + i·60 s/DEVICES + k minutes.
    let mut arrivals: Vec<(i64, u32, i64)> = Vec::new();
    for i in 0..DEVICES {
        for k in 0..MINUTES {
            let at = base.epoch_millis() + i64::from(i) * 60_000 / i64::from(DEVICES) + k * 60_000;
            arrivals.push((at, i, k));
        }
    }
    arrivals.sort_unstable();
    let mut slots: HashMap<(u32, i64), SlotReadings> = HashMap::new();
    let mut records = Vec::with_capacity(arrivals.len());
    let mut stored: Vec<ReadingItem> = Vec::with_capacity(arrivals.len());
    for (n, (at_ms, i, k)) in arrivals.iter().enumerate() {
        let at = Timestamp::from_epoch_millis(*at_ms).expect("a time");
        let start =
            Timestamp::from_epoch_millis(at_ms - at_ms.rem_euclid(SLOT_S * 1000)).expect("a time");
        let d = device(*i);
        let readings = slots.entry((*i, start.epoch_millis())).or_default();
        let old = (!readings.is_empty()).then(|| slot_item(&d, start, readings));
        readings.insert(at, metrics(*i, *k));
        let new = slot_item(&d, start, readings);
        records.push(record(n as u64 + 1, old.as_ref(), &new));
        stored.push(ReadingItem::new(
            &Reading {
                device_id: d,
                timestamp: at,
                metrics: metrics(*i, *k),
                metadata: None,
            },
            None,
            3650,
        ));
    }
    let times: Vec<i64> = arrivals.iter().map(|a| a.0 + 1_000).collect();
    let batches = windows::batches(&times, WINDOW_MS, BATCH_SIZE);

    // The devices and their tag histories, as the API stores them.
    for i in 0..DEVICES {
        let d = device(i);
        let mut item = DeviceItem::new(d.clone(), DeviceStatus::Active, base);
        item.tags = tags_of(i);
        let key = TagHistoryItem::key(&d);
        for v in [
            tidemark_store::to_item(&item).expect("an item"),
            tidemark_store::to_item(&TagHistoryItem {
                pk: key.pk,
                sk: key.sk,
                epochs: histories[&d].clone(),
                version: 1,
            })
            .expect("an item"),
        ] {
            direct
                .put_item()
                .table_name(table)
                .set_item(Some(v))
                .send()
                .await
                .expect("put");
        }
    }
    // Partials, batch by batch, through the group step on the metered client.
    let store = DynamoStore::new(client.clone(), table);
    let _ = meter.take().await;
    let mut writes_at: HashMap<String, Vec<i64>> = HashMap::new();
    let (mut partials, mut manifests) = (0usize, 0usize);
    let mut largest_partial = 0usize;
    let mut partial_wcu = 0.0f64;
    let mut history_rru = 0.0f64;
    let mut manifest_rru = 0.0f64;
    let ttl = base.epoch_seconds() + 7 * 86_400;
    // One container reads the tag histories for the whole run, as a warm rollups container
    // does: a history read serves every reading dated before its read time plus the lead.
    let reader = DynamoStore::new(client.clone(), table);
    for b in &batches {
        let mut event = Event::default();
        event.records = records[b.records.clone()].to_vec();
        let changes: Vec<_> = event
            .records
            .iter()
            .enumerate()
            .flat_map(|(n, r)| {
                decode(n, r)
                    .reading_changes()
                    .map(<[_]>::to_vec)
                    .unwrap_or_default()
            })
            .collect();
        // The batch's devices' tag histories, as the role reads them: through the container's
        // book, which reads a device again only for a reading dated past its read plus the
        // lead (330 s), so only batches carrying readings newer than that read again.
        let mut latest: std::collections::BTreeMap<DeviceId, tidemark_schema::Timestamp> =
            Default::default();
        for c in &changes {
            let img = c.change.image();
            let t = latest.entry(img.device.clone()).or_insert(img.at);
            *t = (*t).max(img.at);
        }
        let devices: Vec<_> = latest.into_iter().collect();
        let delivered =
            tidemark_schema::Timestamp::from_epoch_millis(b.closed_ms).expect("a delivery time");
        let read = reader
            .tag_histories(&devices, delivered)
            .await
            .expect("tag histories read");
        assert_eq!(read.len(), devices.len());
        history_rru += meter.take().await.reads().0.total;
        let shares = fold::shares(&changes, |d, t| fold::groups_at(&histories, &keys, d, t));
        let batch = groups::batch_name(&event).expect("a batch name");
        let items: Vec<_> = shares
            .into_iter()
            .flat_map(|((tag, hour), share)| fold::pieces(&tag, hour, share, &batch, ttl))
            .collect();
        for p in &items {
            writes_at.entry(p.pk.clone()).or_default().push(b.closed_ms);
            let size =
                tidemark_store::limits::item_size(&tidemark_store::to_item(p).expect("an item"));
            largest_partial = largest_partial.max(size);
        }
        let w = groups::write_batch(&store, &batch, &items, ttl)
            .await
            .expect("group partials written");
        let spent = meter.take().await;
        partial_wcu += spent.writes().0.total;
        manifest_rru += spent.reads().0.total;
        partials += w.partials;
        manifests += w.manifests;
        writes_at
            .entry(format!("GROUPBATCH#{batch}"))
            .or_default()
            .extend(std::iter::repeat_n(b.closed_ms, w.manifests));
    }
    partial_wcu += meter.take().await.writes().0.total;
    let readings = records.len();
    eprintln!(
        "group_writes: {} batches, {partials} partials, {manifests} manifests, {partial_wcu:.1} WCU for {readings} readings",
        batches.len()
    );

    // Summaries: the readings stored, each closed hour exported through the metered client.
    let writer = tidemark_store::write::batch::BatchWriter::new(
        direct.clone(),
        table,
        8,
        tidemark_store::retry::RetryPolicy::default(),
    );
    let puts = stored
        .iter()
        .enumerate()
        .map(|(n, r)| {
            tidemark_store::write::batch::PendingWrite::put(
                n,
                tidemark_store::to_item(r).expect("an item"),
            )
        })
        .collect();
    let report = writer
        .write_all(
            puts,
            tokio::time::Instant::now() + std::time::Duration::from_secs(600),
        )
        .await;
    assert!(report.failed_tags.is_empty(), "readings stored");
    let source = DynamoExportTable::new(client.clone(), table, 1).with_group_tags(keys.clone());
    let sink = MemorySink::default();
    let first_hour = Timestamp::parse_rfc3339("2026-04-20T11:00:00Z").expect("a time");
    let _ = meter.take().await;
    let mut exported_readings = 0u64;
    let mut hour = first_hour;
    let end = base.plus_millis(MINUTES * 60_000).expect("a time");
    let mut hours = 0;
    while hour.plus_millis(3_600_000).expect("a time") <= end {
        exported_readings += export_hour(&source, &sink, "bench", hour)
            .await
            .expect("hour exported")
            .readings;
        hours += 1;
        hour = hour.plus_millis(3_600_000).expect("a time");
    }
    let summary_wcu = meter.take().await.writes().0.total;
    let group_items = direct
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(
            ":pk",
            aws_sdk_dynamodb::types::AttributeValue::S("GROUP#site:site0".into()),
        )
        .send()
        .await
        .expect("query");
    let summary_burst = group_items.items().len() / hours.max(1);
    let item_bytes: usize = group_items
        .items()
        .iter()
        .map(tidemark_store::limits::item_size)
        .max()
        .unwrap_or(0);
    let groups_n: u32 = KEYS.iter().map(|(_, n)| n).sum();
    let pairs = groups_n as usize * 4;
    // A day's items: one per (group, metric), billed by size, over a day's readings.
    let day_wcu = (pairs * item_bytes.div_ceil(1024).max(1)) as f64;
    let day_per_reading = day_wcu / (f64::from(DEVICES) * 1440.0);
    let partial_per_reading = partial_wcu / readings as f64;
    let summary_per_reading = summary_wcu / exported_readings.max(1) as f64;
    let total = partial_per_reading + summary_per_reading + day_per_reading;
    let history_per_reading = history_rru / readings as f64;
    eprintln!(
        "group_writes: partials {partial_per_reading:.5}, summaries {summary_per_reading:.5}, days {day_per_reading:.5} WCU/reading"
    );

    // Hot keys: the partials' keys at their batches' delivery, the group items' keys in one
    // export (all of an hour's items of a group go out within its put phase).
    let mut busiest = ("".to_owned(), 0usize, 0usize);
    for (pk, t) in writes_at
        .iter()
        .filter(|(pk, _)| pk.starts_with("GROUPPART#"))
    {
        let (any, top) = peaks(t);
        if any > busiest.1 || (any == busiest.1 && top > busiest.2) {
            busiest = (pk.clone(), any, top);
        }
    }
    let per_key_per_hour = writes_at
        .iter()
        .filter(|(pk, _)| pk.starts_with("GROUPPART#"))
        .map(|(_, t)| t.len())
        .max()
        .unwrap_or(0);
    dynamo.stop().await;

    let m = machine();
    let section = format!(
        "## Writes\n\n\
         Produced by `cargo run --release -p tidemark-bench --example group_writes` (part of \
         `make bench`; how it measures is in the example's doc comment). Checkout {commit}{dirty}; \
         DynamoDB Local ({java}), write units from its `ConsumedCapacity` through the metering \
         proxy.\n\n\
         The standard fleet: {DEVICES} devices, a reading a minute each (4 metrics), \
         `packed:300`, {MINUTES} simulated minutes from 10:07:13 (windows open at the first \
         record, so none lines up with a slot or an hour), each device in 3 groups through 3 \
         `GROUP_TAGS` keys: `site` ({s} values, {sm} devices each), `line` ({l} values, {lm} \
         each), `zone` ({z} values, {zm} each); {groups_n} groups in all.\n\n\
         | what | writes | WCU | per reading |\n\
         |---|---|---|---|\n\
         | partials (rollups role: {nb} batches of 300 s) | {partials} partials, {manifests} manifests | {partial_wcu:.1} | {partial_per_reading:.5} |\n\
         | hour summaries (export of {hours} closed hour(s), {exported_readings} readings) | {pairs} items an hour | {summary_wcu:.1} | {summary_per_reading:.5} |\n\
         | day summaries (one item per group and metric a day, {item_bytes} B at most) | {pairs} items a day | {day_wcu:.1} a day | {day_per_reading:.5} |\n\
         | **all in** | | | **{total:.5}** (target ≤ 0.01) |\n\n\
         Reads: the rollups role reads a device's tag history when a batch carries a reading \
         dated past its last read plus the lead a tag change is announced by (330 s: a change \
         made since cannot be in force before that), through one warm container: \
         {history_rru:.1} RRU over the run, {history_per_reading:.4} RRU a reading \
         (eventually consistent, 0.5 a device read); \
         the export reads every device's once per hour exported (consistent). The manifests \
         read before each batch's writes (consistent): {manifest_rru:.1} RRU over the run.\n\n\
         The largest partial was {largest_partial} B (4 metrics, sketched). A partial is one write \
         per (group, hour) per batch, shared by every reading of the batch; a batch that \
         straddles a top of the hour writes two per group (two hours). Cost per reading grows \
         as groups shrink: a group's partial is about 1 WCU per batch whatever its members, so \
         with m members it is about 1/(5·m) WCU a reading per group and batch (5 readings a \
         member in 300 s); this fleet's smallest groups ({lm} members) dominate.\n\n\
         ### Hot keys\n\n\
         Measured: the busiest partial key was `{bk}`, {ba} write(s) in its busiest second, \
         {bt} in any second within 30 s of a top of the hour; a partial's key took at most \
         {per_key_per_hour} writes over its whole hour (one per batch that touched its hour). \
         A group's summary key (`GROUP#site:site0`) took {summary_burst} writes in one hour's \
         export (one per metric), within its put phase; each batch's manifest key 1 or 2.\n\n\
         For 100,000 devices in one group (a reading a minute: 1,667 records/s on the table's \
         stream):\n\n\
         - **Partials** `GROUPPART#<tag>#<hour>`: at most one write per rollups invocation that \
         touches the hour (more only for pieces past 350 KB, which 4 metrics never reach). \
         Invocations are bounded by the stream: each shard runs one at a time \
         (ParallelizationFactor 1) and fills a batch at 10,000 records or 300 s, so all shards \
         together make max(S/300, 1,667/10,000) invocations a second for S shards: 0.17/s for \
         up to 50 shards, 3.3/s for 1,000 shards. At the top of the hour a batch writes the old \
         hour's key and the new hour's (two keys, one write each), so no key exceeds that rate; \
         the closing hour's device rollups go to the devices' own keys.\n\
         - **Summaries** `GROUP#<tag>`: the export writes one item per metric of each hour it \
         exports (and per day at the day's end), all in a few seconds every 5 minutes: 4 metrics \
         is 4 writes (8 at midnight) within one export, whatever the members, and the deletes of \
         pairs left without readings. Re-exports of marked hours add the same per hour redone.\n\
         - **Manifests** `GROUPBATCH#<sequence>`: one key per batch, 1 or 2 writes ever.\n\
         - **Tag index** `TAG#<k>:<v>#<n>`: written by `PUT /devices/{{id}}` only, over 16 \
         partitions.\n\n\
         So the busiest key takes single-digit writes a second at most, under 1% of DynamoDB's \
         1,000 WCU/s a partition key allows.\n",
        commit = m.git_commit,
        dirty = if m.git_dirty {
            " (uncommitted changes)"
        } else {
            ""
        },
        java = m.java,
        s = KEYS[0].1,
        sm = DEVICES / KEYS[0].1,
        l = KEYS[1].1,
        lm = DEVICES / KEYS[1].1,
        z = KEYS[2].1,
        zm = DEVICES / KEYS[2].1,
        nb = batches.len(),
        bk = busiest.0,
        ba = busiest.1,
        bt = busiest.2,
    );
    let out = workspace_root().join("bench").join("FLEETS.md");
    let text = std::fs::read_to_string(&out)
        .unwrap_or_else(|_| "# Fleets: what group rollups and fleet reads cost\n".to_owned());
    std::fs::write(&out, with_section(&text, &section)).expect("write FLEETS.md");
    eprintln!("group_writes: wrote ## Writes of {}", out.display());
}
