//! The report's findings: what the runs showed beyond the figures (a failed postponement,
//! unit counts that disagree, DynamoDB Local's blind spots).

use tidemark_schema::keys;

use super::Report;

pub(super) fn findings_md(rep: &Report) -> String {
    let mut md = String::from("\n## Findings\n\n");
    if let Some(w) = &rep.watchdog {
        if let Some(err) = &w.postpone_error {
            let failed: Vec<String> = w
                .runs
                .iter()
                .filter(|r| r.failed > 0)
                .map(|r| format!("\"{}\": {} of {} due", r.label, r.failed, r.due))
                .collect();
            md.push_str(&format!(
                "- **Postponing a due device fails.** Runs with failed devices: {}. The same \
                 call (`DynamoWatch::postpone` on one of them) answers: `{err}`. \
                 `DynamoWatch::update_device` (crates/watchdog/src/dynamo.rs) binds `#ver`, \
                 `#arr`, `#g2pk` and `#g2sk` in every request, but `postpone`'s expression \
                 (`SET #arr = :arr, #g2sk = :check, #ver = :next`) never uses `#g2pk`, and \
                 DynamoDB refuses a request with an unused expression attribute name (AWS \
                 does, as DynamoDB Local does). So every due device whose readings show a newer \
                 arrival than its item (the usual case for a device that falls silent between \
                 two key moves: any reading after the last move) is counted `failed`, logged \
                 as a warning, and read again at every run until its true deadline passes; \
                 then it is opened (its alert is not late, as `open` works). `unwatch` uses \
                 both names and is not affected.\n",
                failed.join("; ")
            ));
        }
        let gaps: Vec<String> = w
            .runs
            .iter()
            .filter(|r| {
                (r.spent.rru - r.report_rru).abs() > 0.01
                    || (r.spent.wru - r.report_wru).abs() > 0.01
            })
            .map(|r| {
                format!(
                    "\"{}\": proxy {:.1} RRU / {:.1} WRU, `Report` {:.1} / {:.1}",
                    r.label, r.spent.rru, r.spent.wru, r.report_rru, r.report_wru
                )
            })
            .collect();
        if gaps.is_empty() {
            md.push_str(
                "- The watchdog's own unit counts (`Report.read_units`/`write_units`) agree \
                 with what DynamoDB Local reported to the proxy in every run. They share its \
                 blind spot, though: `DynamoWatch::newest_arrival` reads the device's layout \
                 history (`tidemark_store::layouts::device_history`, a strongly consistent \
                 `BatchGetItem` of the device's and the fleet's layout items) without asking \
                 for its capacity; DynamoDB Local reports nothing for items that do not exist, \
                 AWS bills 1 RRU per key, so on AWS `Report` undercounts by 2 RRU per due \
                 device where no layout items exist (the `BatchGetItem` row above).\n",
            );
        } else {
            md.push_str(&format!(
                "- The watchdog's own unit counts differ from the proxy's: {}.\n",
                gaps.join("; ")
            ));
        }
    }
    md.push_str(
        "- DynamoDB Local reports no capacity for a read that finds nothing (an empty `Query`, \
         a key of a `BatchGetItem` with no item), where AWS bills the minimum: 0.5 RRU \
         eventually consistent, 1 RRU strongly consistent, per request (`Query`) or per key \
         (`GetItem`, `BatchGetItem`). The proxy counts those apart (*AWS minimums incl.* \
         columns); every RRU figure scaled to dollars includes them.\n\
         - Transactions: DynamoDB Local reports 2 units per item written in \
         `TransactWriteItems`, table and index writes alike. The table's part is AWS's \
         documented price of a transactional write; the figures keep what DynamoDB Local \
         reports for the indexes.\n",
    );
    if let Some(r) = rep
        .watchdog
        .as_ref()
        .and_then(|w| w.runs.iter().find(|r| r.opened > 0 && r.postponed == 0))
    {
        let n = r.opened.max(1) as f64;
        let gsi = |i: &str| r.spent.wru_by_index.get(i).copied().unwrap_or(0.0) / n;
        md.push_str(&format!(
            "  An opened alert here: {:.1} WRU, of which table {:.1} (the alert item and the \
             device item, 2 each), GSI1 {:.1} (the alert's entry) and GSI2 {:.1} (the device \
             leaving its watch partition for `{}#<n>`: a delete and a put).\n",
            r.spent.wru / n,
            r.spent.wru_table / n,
            gsi("GSI1"),
            gsi("GSI2"),
            keys::OFFLINE_GSI2PK
        ));
    }
    md
}
