//! What a group rule costs: a site of `--members` devices (10,000 by default) registered
//! through the tag index's writer (`PUT /devices/{id}`'s, which moves the members' counts in
//! the same transaction), then watchdog runs judging "more than a tenth of the site offline"
//! against runs judging no group rule, each unit DynamoDB's own consumed capacity (DynamoDB
//! Local's `ConsumedCapacity` through the metering proxy). Writes `bench/GROUP_RULES.md`.
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example group_rule_cost   # writes bench/GROUP_RULES.md
//! cargo run -p tidemark-bench --example group_rule_cost -- --members 2000 --out /tmp
//! ```
//!
//! What a group rule must not do is read the group's members, per reading or per run. The
//! alerts role does nothing for group rules at all (nothing per reading, by construction);
//! the watchdog judges each rule once a run from the group's 16 count items. So the runs
//! here have no due devices: what differs between the two is the rule's judgement alone,
//! and it should not grow with the members. Then a tenth and one of the members are marked
//! offline as the watchdog marks them (the counts moved in its transactions' way, here by the
//! same count update), and one more run opens the group alert: the cost of a standing change.
//!
//! Then a group window rule (`WINDOW_RULE`): the site's group partials of the last 75
//! minutes, made by the rollups role's own fold from every member's readings under deployed
//! conditions (four stream shards, 300 s batches starting at offsets of their own), are
//! stored, and runs judging the rule are measured against runs judging nothing; the report
//! also gives what the partials' per-minute statistics add to the write units the rollups role
//! spends on them.
//!
//! Benchmarks report; they never assert (and never on wall-clock speed). The report names the
//! build (debug or release) that produced it; no unit depends on it.

#[allow(dead_code)]
#[path = "offline/metering.rs"]
mod metering;

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use tidemark_aggregator::groups::fold;
use tidemark_aggregator::records::{Change, Image, StreamChange};
use tidemark_bench::BenchError;
use tidemark_bench::local_ddb::LocalDynamo;
use tidemark_bench::meter::Meter;
use tidemark_bench::run::Target;
use tidemark_schema::keys::ShardName;
use tidemark_schema::{
    DeviceId, DeviceStatus, GroupPartialItem, GroupRuleSpec, HeartbeatItem, MetricName, Tag,
    TagCountItem, TagIndexItem, Tags, Timestamp, field,
};
use tidemark_watchdog::{DynamoWatch, Heartbeats, Report, Watchdog, WatchdogConfig, WatchdogError};

use metering::{Spent, client_via};

/// The rule judged: the issue's example.
const RULE: &str = r#"{"group":"site:A","offlineFraction":{"above":0.1}}"#;
/// The group window rule judged: the issue's example.
const WINDOW_RULE: &str =
    r#"{"group":"site:A","metric":"temperature","aggregate":"avg","window":"15m","above":28}"#;
/// Stream shards, each with its own rollups batches.
const SHARDS: u32 = 4;
/// The rollups mapping's batching window (the template's default), in seconds.
const ROLLUPS_WINDOW_S: i64 = 300;
/// How much of the site's history the partials cover, in minutes.
const HISTORY_MIN: i64 = 75;

/// The rollups role's partials of the site's last [`HISTORY_MIN`] minutes as it writes them:
/// every member reads once a minute (the standard fleet's four metrics, at its own second);
/// member `i` is on shard `i % SHARDS`; each shard's batches are [`ROLLUPS_WINDOW_S`] long and
/// start at an offset of their own, never on a minute or an hour. Each batch's readings are
/// folded by the role's own code ([`tidemark_aggregator::groups::fold`]).
fn rollups_partials(site: &Tag, members: u32, now: Timestamp) -> Vec<GroupPartialItem> {
    let start_ms = now.epoch_millis() - HISTORY_MIN * 60_000;
    let ttl = now.epoch_seconds() + 7 * 86_400;
    let names = ["temperature", "humidity", "pressure", "battery"]
        .map(|m| MetricName::new(m).expect("a metric name"));
    let mut out = Vec::new();
    for shard in 0..SHARDS {
        let offset_ms = 41_000 + i64::from(shard) * 73_000;
        let mut from = start_ms + offset_ms - ROLLUPS_WINDOW_S * 1000;
        let mut batch = 0u64;
        while from < now.epoch_millis() {
            let to = from + ROLLUPS_WINDOW_S * 1000;
            let mut changes = Vec::new();
            for i in (shard..members).step_by(SHARDS as usize) {
                let device = DeviceId::new(&format!("m{i:06}")).expect("a device id");
                let second = i64::from(i.wrapping_mul(7_919) % 60_000);
                let mut at = from - from.rem_euclid(60_000) + second;
                while at < to {
                    if at >= from.max(start_ms) && at < now.epoch_millis() {
                        let t = Timestamp::from_epoch_millis(at).expect("a time");
                        let wiggle = f64::from((i.wrapping_mul(31) ^ (at / 60_000) as u32) % 40);
                        let metrics = names
                            .iter()
                            .cloned()
                            .zip([
                                18.0 + wiggle * 0.15,
                                35.0 + wiggle * 0.5,
                                1_005.0 + wiggle * 0.4,
                                (60.0 + wiggle).round(),
                            ])
                            .collect();
                        changes.push(StreamChange {
                            index: changes.len(),
                            seq: String::new(),
                            change: Change::Insert(Image {
                                pk: String::new(),
                                sk: String::new(),
                                device: device.clone(),
                                at: t,
                                metrics,
                            }),
                        });
                    }
                    at += 60_000;
                }
            }
            let name = format!("49{shard:02}{batch:018}");
            let shares = fold::shares(&changes, |_, _| vec![site.clone()]);
            out.extend(
                shares
                    .into_iter()
                    .flat_map(|((tag, hour), share)| fold::pieces(&tag, hour, share, &name, ttl)),
            );
            from = to;
            batch += 1;
        }
    }
    out
}

/// Write units of a put of `item` (1 KB each, rounded up).
fn put_units(item: &tidemark_store::Item) -> f64 {
    (tidemark_store::limits::item_size(item) as f64 / 1024.0).ceil()
}
/// Runs measured with and without it.
const RUNS: u32 = 10;

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

/// Heartbeats as a pipeline that has caught up passes them.
struct CaughtUp(aws_sdk_dynamodb::Client, String);

impl Heartbeats for CaughtUp {
    async fn send(&self, at: Timestamp) -> Result<Vec<ShardName>, WatchdogError> {
        let shard = ShardName::new("shardId-000000000000")
            .ok_or_else(|| WatchdogError::Config("shard name".into()))?;
        let beat = HeartbeatItem::passed_at_once(&shard, at);
        let item =
            tidemark_store::to_item(&beat).map_err(|e| WatchdogError::Config(e.to_string()))?;
        self.0
            .put_item()
            .table_name(&self.1)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| WatchdogError::Config(e.to_string()))?;
        Ok(vec![shard])
    }
}

/// The units of `runs` watchdog runs judging `rules`, through the metering proxy.
async fn runs(
    meter: &Meter,
    table: &str,
    heartbeats: aws_sdk_dynamodb::Client,
    rules: Vec<GroupRuleSpec>,
    n: u32,
) -> Result<(Spent, Report), BenchError> {
    let w = Watchdog::new(
        DynamoWatch::new(client_via(meter).await, table),
        CaughtUp(heartbeats, table.to_owned()),
        WatchdogConfig {
            heartbeat_wait: Duration::from_secs(2),
            heartbeat_poll: Duration::from_millis(20),
            group_rules: rules,
            ..WatchdogConfig::new(table, "readings")
        },
    );
    meter.take().await;
    let mut last = Report::default();
    for _ in 0..n {
        last = w
            .run(tokio::time::Instant::now() + Duration::from_secs(30))
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
    }
    Ok((Spent::of(&meter.take().await), last))
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let members: u32 = arg("--members")
        .map_or(Ok(10_000), |v| v.parse())
        .map_err(|e| BenchError::Setup(format!("--members: {e}")))?;
    let dir = arg("--out").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench"),
        PathBuf::from,
    );
    let given: Vec<String> = std::env::args().skip(1).collect();
    let command = format!(
        "cargo run{} -p tidemark-bench --example group_rule_cost{}",
        if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        },
        if given.is_empty() {
            String::new()
        } else {
            format!(" -- {}", given.join(" "))
        }
    );
    let local = LocalDynamo::start().await?;
    let target = Target {
        dynamodb: local.addr,
    };
    let table = "group-rules";
    let direct = target.client().await;
    tidemark_store::create_table(&direct, table, &tidemark_schema::TABLE).await?;
    let site = Tag::parse("site:A").map_err(|e| BenchError::Setup(e.to_string()))?;
    let tags = Tags::new([(site.key.clone(), site.value.clone())].into())
        .map_err(|e| BenchError::Setup(e.to_string()))?;

    // The site's members, registered through the index writer, 32 at once.
    let writer_meter = Meter::start(target.dynamodb).await?;
    let writer = client_via(&writer_meter).await;
    let results: Vec<Result<(), BenchError>> = futures::stream::iter(0..members)
        .map(|i| {
            let (writer, site, tags) = (&writer, &site, &tags);
            async move {
                let id = DeviceId::new(&format!("m{i:06}"))
                    .map_err(|e| BenchError::Setup(e.to_string()))?;
                let entry = TagIndexItem::new(site, &id, DeviceStatus::Active, tags.clone());
                tidemark_store::write::tag_change::write_index(writer, table, &[entry], &[])
                    .await
                    .map_err(BenchError::from)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>, _>>()?;
    let registered = Spent::of(&writer_meter.take().await);

    let rule = GroupRuleSpec::from_value(&serde_json::from_str(RULE)?)
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let judge_meter = Meter::start(target.dynamodb).await?;
    let (none, _) = runs(&judge_meter, table, direct.clone(), Vec::new(), RUNS).await?;
    let (one, quiet) = runs(
        &judge_meter,
        table,
        direct.clone(),
        vec![rule.clone()],
        RUNS,
    )
    .await?;

    // A tenth and one offline, as the watchdog counts them; one run opens the group alert.
    let offline = members / 10 + 1;
    for i in 0..offline {
        let id =
            DeviceId::new(&format!("m{i:06}")).map_err(|e| BenchError::Setup(e.to_string()))?;
        let key = TagCountItem::key_of(&site, &id);
        direct
            .update_item()
            .table_name(table)
            .set_key(Some(tidemark_store::batch_get::key_item(&key)))
            .update_expression("ADD #n :d")
            .expression_attribute_names("#n", field::OFFLINE_MEMBERS)
            .expression_attribute_values(
                ":d",
                aws_sdk_dynamodb::types::AttributeValue::N("1".into()),
            )
            .send()
            .await
            .map_err(|e| BenchError::Setup(e.to_string()))?;
    }
    let (opening, opened) = runs(&judge_meter, table, direct.clone(), vec![rule], 1).await?;

    // The window rule: the site's partials as the rollups role writes them, then runs
    // judging it against runs judging nothing.
    let partials = rollups_partials(&site, members, Timestamp::now());
    let mut with_minutes = 0.0;
    let mut without_minutes = 0.0;
    let mut items = Vec::with_capacity(partials.len());
    for p in &partials {
        let item = tidemark_store::to_item(p)?;
        with_minutes += put_units(&item);
        let mut bare = item.clone();
        bare.remove("addedMinutes");
        bare.remove("removedMinutes");
        without_minutes += put_units(&bare);
        items.push(item);
    }
    tidemark_testkit::put_items(&direct, table, items).await;
    let readings = f64::from(members) * HISTORY_MIN as f64;
    let window_rule = GroupRuleSpec::from_value(&serde_json::from_str(WINDOW_RULE)?)
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    let (none_w, _) = runs(&judge_meter, table, direct.clone(), Vec::new(), RUNS).await?;
    let (windowed, judged) =
        runs(&judge_meter, table, direct.clone(), vec![window_rule], RUNS).await?;
    local.stop().await;

    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let per_run = |s: &Spent, n: u32| s.rru_aws() / f64::from(n);
    let added = per_run(&one, RUNS) - per_run(&none, RUNS);
    let read_calls = |s: &Spent, n: u32| s.read_calls as f64 / f64::from(n);
    let per_month = added * 60.0 * 24.0 * 30.0;
    let w_added = per_run(&windowed, RUNS) - per_run(&none_w, RUNS);
    let w_month = w_added * 60.0 * 24.0 * 30.0;
    let report = format!(
        "# Group rules: what judging one costs\n\n\
         Generated by `{command}` (`make bench` runs it with `--release`); nothing is edited by \
         hand. **Build:** {build} (no unit depends on it). How it measures is in the example's \
         doc comment (`crates/bench/examples/group_rule_cost.rs`). Every unit is DynamoDB's own \
         `ConsumedCapacity` (DynamoDB Local through the metering proxy; reads that find nothing \
         counted at AWS's minimum), measured in this run; nothing is asserted.\n\n\
         - **Date (UTC):** {date}\n\
         - **Group:** `site:A`, {members} members registered through the tag index's writer \
         (the one `PUT /devices/{{id}}` uses), which moves the members' counts in the same \
         transaction.\n\
         - **Rule:** `{RULE}`, judged by the watchdog at the end of each run; {RUNS} runs \
         with it against {RUNS} without, no device due (what differs is the judgement).\n\n\
         ## Target\n\n\
         | target | goal | measured | verdict |\n|---|---|---|---|\n\
         | reads of the group's members per judgement | none (the reads must not grow with \
         the group) | {calls:.1} read calls, {added:.2} read units per run for {members} \
         members | {verdict} |\n\n\
         ## Measured\n\n\
         | what | read calls | read units | write units |\n|---|---|---|---|\n\
         | a watchdog run, no group rule (per run) | {n_calls:.1} | {n_rru:.2} | {n_wru:.2} |\n\
         | a watchdog run judging the rule, standing unchanged (per run) | {o_calls:.1} | {o_rru:.2} | {o_wru:.2} |\n\
         | the run that opens the group alert ({offline} of {members} offline) | {p_calls:.1} | {p_rru:.2} | {p_wru:.2} |\n\
         | registering the {members} members (per member) | {r_calls:.2} | {r_rru:.2} | {r_wru:.2} |\n\n\
         The judgement adds {added:.2} read units a run: one BatchGetItem of the group's 16 \
         count items and one consistent read of the rule's state, whatever the group's size; \
         {per_month:.0} read units a month at a run a minute. The alerts role does nothing per \
         reading for a group rule. A standing change writes the rule's state and the alert (with \
         its GSI1 entry) in one transaction: {p_wru:.2} write units (the run opened {g_opened} \
         alert). A member costs its index entry and its partition's count, once, \
         in one transaction (about twice the index entry's write alone).\n\n\
         ## A group window rule\n\n\
         - **Rule:** `{WINDOW_RULE}`, judged at the end of each run over the whole minutes \
         before the rollups role's heartbeat mark, from the site's group partials.\n\
         - **Partials:** the rollups role's, folded by its own code from the {members} members' \
         readings of the last {HISTORY_MIN} minutes (one a minute each, four metrics), {SHARDS} \
         stream shards, batches of {ROLLUPS_WINDOW_S} s each starting at an offset of its own \
         (never on a minute or an hour): {n_parts} partial items.\n\n\
         | what | read calls | read units | write units |\n|---|---|---|---|\n\
         | a watchdog run, no group rule (per run) | {nw_calls:.1} | {nw_rru:.2} | {nw_wru:.2} |\n\
         | a watchdog run judging the window rule, standing unchanged (per run) | {w_calls:.1} | {w_rru:.2} | {w_wru:.2} |\n\
         | the partials' puts, with the per-minute statistics | – | – | {with_minutes:.0} ({with_per:.5} a reading) |\n\
         | the same puts without them | – | – | {without_minutes:.0} ({without_per:.5} a reading) |\n\n\
         Judging the window adds {w_added:.2} read units a run (the consistent Query of the \
         window's one or two hours of partials and the rule's state; {w_month:.0} a month at a \
         run a minute): it grows with the partials of those hours (stream shards × batches an \
         hour), not with the members. The per-minute statistics add {minute_per:.5} write \
         units a reading to the partials the rollups role writes anyway (no write of its own); \
         the alerts role does nothing for a group window rule. The judged window's value here: \
         {judged_value}.\n",
        date = Timestamp::now(),
        calls = read_calls(&one, RUNS) - read_calls(&none, RUNS),
        verdict = if added < 20.0 { "met" } else { "**missed**" },
        n_calls = read_calls(&none, RUNS),
        n_rru = per_run(&none, RUNS),
        n_wru = none.wru / f64::from(RUNS),
        o_calls = read_calls(&one, RUNS),
        o_rru = per_run(&one, RUNS),
        o_wru = one.wru / f64::from(RUNS),
        p_calls = read_calls(&opening, 1),
        p_rru = per_run(&opening, 1),
        p_wru = opening.wru,
        r_calls = (registered.read_calls + registered.write_calls) as f64 / f64::from(members),
        r_rru = registered.rru_aws() / f64::from(members),
        r_wru = registered.wru / f64::from(members),
        g_opened = opened.group_opened,
        n_parts = partials.len(),
        nw_calls = read_calls(&none_w, RUNS),
        nw_rru = per_run(&none_w, RUNS),
        nw_wru = none_w.wru / f64::from(RUNS),
        w_calls = read_calls(&windowed, RUNS),
        w_rru = per_run(&windowed, RUNS),
        w_wru = windowed.wru / f64::from(RUNS),
        with_per = with_minutes / readings,
        without_per = without_minutes / readings,
        minute_per = (with_minutes - without_minutes) / readings,
        judged_value = if judged.rollups_watermark.is_some() {
            "judged every run, standing unchanged (the site's mean stays under 28)"
        } else {
            "**not judged: no rollups mark**"
        },
    );
    let _ = quiet;
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("GROUP_RULES.md");
    std::fs::write(&path, &report)?;
    print!("{report}");
    eprintln!("group_rule_cost: wrote {}", path.display());
    Ok(())
}
