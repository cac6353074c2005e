//! A deployed function can fail on two things no local test sees: a missing environment
//! variable and an AccessDenied. These tests compare what each function's code reads and
//! calls with what `template.yaml` gives it.
//!
//! Variables: each function reads its settings only through `*Config::from_lookup` (checked
//! below by scanning the source for other `env::var` calls), so `settings_agree.rs`, which
//! records what `from_lookup` reads, sees everything a function reads.
//!
//! Actions: the DynamoDB operations each function's code calls, found in its source (and the
//! store modules it uses), must be allowed by its policy — and nothing more is allowed, so the
//! policy stays least-privilege as the code changes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn template() -> Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("read template");
    serde_yaml::from_str(&text).expect("template.yaml is YAML")
}

#[test]
fn each_aggregator_function_runs_its_role() {
    let t = template();
    for (f, role) in [
        ("AggregatorFunction", tidemark_aggregator::Role::Rollups),
        ("AlertFunction", tidemark_aggregator::Role::Alerts),
    ] {
        let v = t["Resources"][f]["Properties"]["Environment"]["Variables"]["AGGREGATOR_ROLE"]
            .as_str()
            .unwrap_or_else(|| panic!("{f} sets no AGGREGATOR_ROLE"));
        assert_eq!(v.parse::<tidemark_aggregator::Role>().unwrap(), role, "{f}");
    }
    let env = &t["Resources"]["AlertFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        env["EVENT_BUS_NAME"],
        serde_yaml::from_str::<Value>("!Ref AlertEventBus").unwrap()
    );
}

fn rust_sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let code = rust_sources_of_file(&p);
                out.push((p, code));
            }
        }
    }
    out
}

#[test]
fn functions_read_the_environment_only_through_their_config() {
    for c in ["ingest", "aggregator", "api", "watchdog", "exporter"] {
        for (path, code) in rust_sources(&root().join("crates").join(c).join("src")) {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name == "config.rs" {
                continue;
            }
            assert!(
                !code.contains("env::var"),
                "{} reads the environment outside its config, where the template check cannot see it",
                path.display()
            );
        }
    }
}

/// SDK method → IAM action. Transactions are authorised per contained action.
const OPERATIONS: &[(&str, &str)] = &[
    (".batch_write_item()", "dynamodb:BatchWriteItem"),
    (".batch_get_item()", "dynamodb:BatchGetItem"),
    (".get_item()", "dynamodb:GetItem"),
    (".put_item()", "dynamodb:PutItem"),
    (".update_item()", "dynamodb:UpdateItem"),
    (".delete_item()", "dynamodb:DeleteItem"),
    (".query()", "dynamodb:Query"),
    (".scan()", "dynamodb:Scan"),
    ("Put::builder()", "dynamodb:PutItem"),
    ("Update::builder()", "dynamodb:UpdateItem"),
    ("Delete::builder()", "dynamodb:DeleteItem"),
    ("ConditionCheck::builder()", "dynamodb:ConditionCheckItem"),
    (".transact_get_items()", "dynamodb:GetItem"),
    // PartiQL is authorised per statement kind; Tidemark's only statements are INSERTs.
    (".batch_execute_statement()", "dynamodb:PartiQLInsert"),
];

/// The `tidemark_store` modules `code` names (`tidemark_store::write::map_merge::…`,
/// `crate::retry` inside the store crate), as files of the store crate: `<name>.rs`, followed
/// down module directories as far as the path names them (`write::batch` is
/// `write/batch.rs`), or every file of a module directory the path stops at (`read::…` names
/// `read/`, whose files call each other through `super::`).
fn store_modules(code: &str, prefix: &str) -> BTreeSet<PathBuf> {
    modules_under(&root().join("crates/store/src"), code, prefix)
}

/// The modules `code` names by `prefix` (`crate::`, `super::`), resolved from `dir`.
fn modules_under(dir: &Path, code: &str, prefix: &str) -> BTreeSet<PathBuf> {
    code.match_indices(prefix)
        // `crate::` inside `tidemark_store::crate`-like words is not a path start.
        .filter(|(i, _)| {
            !code[..*i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .flat_map(|(i, _)| resolve(dir, &code[i + prefix.len()..]))
        .collect()
}

/// The files a module path (`write::batch::BatchWriter`) names, from `dir`.
fn resolve(dir: &Path, path: &str) -> Vec<PathBuf> {
    let segment = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut dir = dir.to_path_buf();
    let mut rest = path;
    loop {
        let name = segment(rest);
        if name.is_empty() {
            return Vec::new();
        }
        let file = dir.join(format!("{name}.rs"));
        let sub = dir.join(&name);
        if file.is_file() {
            return vec![file];
        }
        if !sub.is_dir() {
            return Vec::new();
        }
        // Go down when the path names a module of the directory, else take all of it.
        let after = &rest[name.len()..];
        let next = after.strip_prefix("::").map(segment).unwrap_or_default();
        if !next.is_empty()
            && (sub.join(format!("{next}.rs")).is_file() || sub.join(&next).is_dir())
        {
            dir = sub;
            rest = &after[2..];
            continue;
        }
        return rust_sources(&sub).into_iter().map(|(p, _)| p).collect();
    }
}

/// The function's own sources, and every store module they reach (transitively): the calls
/// a function makes through `tidemark_store` are its calls too.
fn sources_with_store_without(dirs: &[PathBuf], skip: Option<&Path>) -> Vec<(PathBuf, String)> {
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    for d in dirs {
        files.extend(
            rust_sources(d)
                .into_iter()
                .filter(|(p, _)| skip.is_none_or(|s| !p.starts_with(s))),
        );
    }
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let mut todo: Vec<PathBuf> = files
        .iter()
        .flat_map(|(_, code)| store_modules(code, "tidemark_store::"))
        .collect();
    while let Some(f) = todo.pop() {
        if !seen.insert(f.clone()) {
            continue;
        }
        let code = rust_sources_of_file(&f);
        todo.extend(store_modules(&code, "crate::"));
        // `super::` is the file's parent module: its directory's parent for a `mod.rs`.
        let parent = f.parent().expect("a file is in a directory");
        let parent = if f.ends_with("mod.rs") {
            parent
                .parent()
                .expect("a module directory is in a directory")
        } else {
            parent
        };
        todo.extend(modules_under(parent, &code, "super::"));
        files.push((f, code));
    }
    files
}

/// A source file without its unit tests: they sit at the end behind #[cfg(test)] and may call
/// the SDK to set up fixtures, which the deployed function never does.
fn rust_sources_of_file(f: &Path) -> String {
    let text = std::fs::read_to_string(f).expect("read source");
    match text.find("#[cfg(test)]") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

fn used_actions(dirs: &[PathBuf]) -> BTreeSet<&'static str> {
    used_actions_without(dirs, None)
}

fn used_actions_without(dirs: &[PathBuf], skip: Option<&Path>) -> BTreeSet<&'static str> {
    let mut out = BTreeSet::new();
    {
        let files = sources_with_store_without(dirs, skip);
        for (_, code) in files {
            // Only code that talks to DynamoDB: `uri.query()` in an HTTP handler is not a Query.
            if !code.contains("aws_sdk_dynamodb") {
                continue;
            }
            for (needle, action) in OPERATIONS {
                if code.contains(needle) {
                    out.insert(*action);
                }
            }
        }
    }
    // The batch writer sends PartiQL INSERTs only for merges (`PendingWrite::merge`, its
    // `WriteMode::Merge`); a function whose own code never asks for one never sends them,
    // though the writer's module, which it uses for puts, holds the insert path.
    let own: String = dirs
        .iter()
        .flat_map(|d| rust_sources(d))
        .filter(|(p, _)| skip.is_none_or(|s| !p.starts_with(s)))
        .map(|(_, c)| c)
        .collect();
    if !own.contains("PendingWrite::merge(") && !own.contains("insert_batch(") {
        out.remove("dynamodb:PartiQLInsert");
    }
    out
}

fn allowed_dynamodb_item_actions(t: &Value, function: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let policies = t["Resources"][function]["Properties"]["Policies"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    for p in policies {
        for st in p["Statement"].as_sequence().cloned().unwrap_or_default() {
            if st["Effect"].as_str() != Some("Allow") {
                continue;
            }
            let actions: Vec<String> = match &st["Action"] {
                Value::String(s) => vec![s.clone()],
                Value::Sequence(v) => v
                    .iter()
                    .filter_map(|a| a.as_str().map(str::to_owned))
                    .collect(),
                _ => vec![],
            };
            // Stream-reading actions belong to the event-source mapping, not the code.
            out.extend(actions.into_iter().filter(|a| {
                a.starts_with("dynamodb:")
                    && !matches!(
                        a.as_str(),
                        "dynamodb:DescribeStream"
                            | "dynamodb:GetRecords"
                            | "dynamodb:GetShardIterator"
                            | "dynamodb:ListStreams"
                    )
            }));
        }
    }
    out
}

fn assert_policy_matches(function: &str, sources: &[PathBuf]) {
    assert_policy_matches_without(function, sources, None);
}

/// [`assert_policy_matches`] leaving out the sources under `skip` (code of another role).
fn assert_policy_matches_without(function: &str, sources: &[PathBuf], skip: Option<&Path>) {
    let used: BTreeSet<String> = used_actions_without(sources, skip)
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert!(
        !used.is_empty(),
        "{function}: no DynamoDB call found; the scan is broken"
    );
    let allowed = allowed_dynamodb_item_actions(&template(), function);
    let missing: Vec<_> = used.difference(&allowed).collect();
    assert!(
        missing.is_empty(),
        "{function} calls {missing:?} but its policy does not allow them"
    );
    let extra: Vec<_> = allowed.difference(&used).collect();
    assert!(
        extra.is_empty(),
        "{function}'s policy allows {extra:?}, which its code never calls"
    );
}

#[test]
fn ingest_policy_allows_exactly_what_it_calls() {
    let r = root();
    assert_policy_matches("IngestFunction", &[r.join("crates/ingest/src")]);
}

#[test]
fn aggregator_policy_allows_exactly_what_it_calls() {
    // The rollups role never builds the notifier (crates/aggregator/src/main.rs), so its
    // marker writes are the alert function's calls only.
    let src = root().join("crates/aggregator/src");
    assert_policy_matches_without(
        "AggregatorFunction",
        std::slice::from_ref(&src),
        Some(&src.join("notify")),
    );
}

#[test]
fn alert_policy_allows_exactly_what_it_calls_and_publishes_only_to_its_bus() {
    assert_policy_matches("AlertFunction", &[root().join("crates/aggregator/src")]);
    let used = used_actions(&[root().join("crates/aggregator/src/notify")]);
    assert!(
        used.contains("dynamodb:BatchWriteItem"),
        "markers: {used:?}"
    );
    let t = template();
    let statements: Vec<Value> = t["Resources"]["AlertFunction"]["Properties"]["Policies"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|p| p["Statement"].as_sequence().cloned().unwrap_or_default())
        .collect();
    let events: Vec<&Value> = statements
        .iter()
        .filter(|s| {
            let a = serde_yaml::to_string(&s["Action"]).unwrap();
            a.contains("events:")
        })
        .collect();
    assert_eq!(events.len(), 1, "one statement grants EventBridge");
    assert_eq!(events[0]["Action"].as_str(), Some("events:PutEvents"));
    assert_eq!(
        events[0]["Resource"],
        serde_yaml::from_str::<Value>("!GetAtt AlertEventBus.Arn").unwrap(),
        "PutEvents on the alert bus only"
    );
    for f in ["IngestFunction", "AggregatorFunction", "ApiFunction"] {
        let p = serde_yaml::to_string(&t["Resources"][f]["Properties"]["Policies"]).unwrap();
        assert!(!p.contains("events:"), "{f} may not publish events");
    }
}

#[test]
fn watchdog_policy_allows_exactly_what_it_calls() {
    assert_policy_matches("WatchdogFunction", &[root().join("crates/watchdog/src")]);
}

#[test]
fn exporter_policy_allows_exactly_what_it_calls_in_the_table_and_the_bucket() {
    let src = root().join("crates/exporter/src");
    assert_policy_matches("ExporterFunction", std::slice::from_ref(&src));
    // S3: the calls its code makes, each allowed, and nothing else granted.
    let code: String = rust_sources(&src).into_iter().map(|(_, c)| c).collect();
    let used: BTreeSet<&str> = [
        (".put_object()", "s3:PutObject"),
        (".delete_object()", "s3:DeleteObject"),
        (".list_objects_v2()", "s3:ListBucket"),
        (".get_object()", "s3:GetObject"),
    ]
    .into_iter()
    .filter(|(needle, _)| code.contains(needle))
    .map(|(_, a)| a)
    .collect();
    let t = template();
    let granted: BTreeSet<String> = t["Resources"]["ExporterFunction"]["Properties"]["Policies"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|p| p["Statement"].as_sequence().cloned().unwrap_or_default())
        .flat_map(|st| match &st["Action"] {
            Value::String(a) => vec![a.clone()],
            Value::Sequence(v) => v
                .iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect(),
            _ => vec![],
        })
        .filter(|a| a.starts_with("s3:"))
        .collect();
    let used: BTreeSet<String> = used.into_iter().map(str::to_owned).collect();
    assert_eq!(used, granted, "the exporter's S3 calls and its S3 grants");
}

#[test]
fn api_policy_allows_exactly_what_it_calls() {
    assert_policy_matches("ApiFunction", &[root().join("crates/api/src")]);
}

#[test]
fn the_scan_follows_calls_into_the_store_crate() {
    // Ingest writes readings through tidemark_store::write::batch, which inserts them through
    // crate::write::insert (PartiQL) and merges them through crate::write::map_merge with PutItem and
    // UpdateItem: all must be seen as ingest's calls.
    let used = used_actions(&[root().join("crates/ingest/src")]);
    for action in [
        "dynamodb:PartiQLInsert",
        "dynamodb:BatchWriteItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:BatchGetItem",
    ] {
        assert!(used.contains(action), "{action} not found: {used:?}");
    }
}

#[test]
fn only_a_function_that_merges_readings_sends_partiql_inserts() {
    // Ingest merges readings (inserts first, 25 a call); the aggregator's roles only put
    // through the same writer, so their policies need no PartiQL at all.
    let r = root();
    assert!(used_actions(&[r.join("crates/ingest/src")]).contains("dynamodb:PartiQLInsert"));
    let aggregator = used_actions(&[r.join("crates/aggregator/src")]);
    assert!(
        aggregator.contains("dynamodb:BatchWriteItem"),
        "{aggregator:?}"
    );
    assert!(
        !aggregator.contains("dynamodb:PartiQLInsert"),
        "{aggregator:?}"
    );
}

#[test]
fn no_role_holds_a_key_grant_the_aws_managed_stream_key_does_not_need() {
    // The readings stream is encrypted with the AWS managed key, whose use by producers and
    // consumers needs no IAM permission of their own (the Kinesis Data Streams guide,
    // "Permissions to use user-generated KMS keys"): the watchdog's PutRecords and the IoT
    // rule's PutRecord work without one, so none is granted.
    let t = template();
    assert_eq!(
        t["Resources"]["ReadingsStream"]["Properties"]["StreamEncryption"]["KeyId"].as_str(),
        Some("alias/aws/kinesis")
    );
    let resources = t["Resources"].as_mapping().unwrap();
    let mut checked = 0;
    for (name, r) in resources {
        let policies = match r["Type"].as_str() {
            Some("AWS::Serverless::Function") => &r["Properties"]["Policies"],
            Some("AWS::IAM::Role") => &r["Properties"]["Policies"],
            _ => continue,
        };
        checked += 1;
        let text = serde_yaml::to_string(policies).unwrap();
        assert!(!text.contains("kms:"), "{name:?} holds a KMS grant");
    }
    assert!(checked >= 7, "functions and roles checked: {checked}");
}

#[test]
fn every_function_is_arm64_rust_on_al2023_built_by_cargo_lambda() {
    let t = template();
    assert_eq!(
        t["Globals"]["Function"]["Runtime"].as_str(),
        Some("provided.al2023")
    );
    assert_eq!(
        t["Globals"]["Function"]["Architectures"][0].as_str(),
        Some("arm64")
    );
    assert_eq!(
        t["Globals"]["Function"]["Handler"].as_str(),
        Some("bootstrap")
    );
    for (f, dir) in [
        ("IngestFunction", "crates/ingest"),
        ("AggregatorFunction", "crates/aggregator"),
        ("AlertFunction", "crates/aggregator"),
        ("ApiFunction", "crates/api"),
    ] {
        let r = &t["Resources"][f];
        assert_eq!(
            r["Metadata"]["BuildMethod"].as_str(),
            Some("rust-cargolambda"),
            "{f}"
        );
        assert_eq!(r["Properties"]["CodeUri"].as_str(), Some(dir), "{f}");
    }
}

#[test]
fn the_alert_function_is_the_aggregator_binary_built_once() {
    // `sam build` builds functions with the same CodeUri, runtime, architecture and Metadata
    // once and copies the artifact: both stay identical in what the build looks at.
    let t = template();
    let (a, b) = (
        &t["Resources"]["AggregatorFunction"],
        &t["Resources"]["AlertFunction"],
    );
    assert_eq!(a["Metadata"], b["Metadata"]);
    for k in ["CodeUri", "Runtime", "Architectures", "Handler"] {
        assert_eq!(a["Properties"][k], b["Properties"][k], "{k}");
    }
}

// --- Which partitions each function may write (tidemark_schema::grants) ---------------------

/// The DynamoDB actions that write items. Each is authorised per item, so a
/// `dynamodb:LeadingKeys` condition on them holds for every item of a batch too.
const WRITE_ACTIONS: &[&str] = &[
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
];

/// The template's function for each crate of `tidemark_schema::grants::WRITES`.
fn function_of(krate: &str) -> &'static str {
    match krate {
        "ingest" => "IngestFunction",
        "api" => "ApiFunction",
        "exporter" => "ExporterFunction",
        "watchdog" => "WatchdogFunction",
        other => panic!("grants::WRITES names {other}, which has no function here"),
    }
}

fn statements_of(t: &Value, function: &str) -> Vec<Value> {
    t["Resources"][function]["Properties"]["Policies"]
        .as_sequence()
        .cloned()
        .unwrap_or_default()
        .iter()
        .flat_map(|p| p["Statement"].as_sequence().cloned().unwrap_or_default())
        .collect()
}

fn actions_of(st: &Value) -> Vec<String> {
    match &st["Action"] {
        Value::String(s) => vec![s.clone()],
        Value::Sequence(v) => v
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect(),
        _ => vec![],
    }
}

#[test]
fn write_statements_name_exactly_the_partitions_each_function_writes() {
    let t = template();
    for (krate, partitions) in tidemark_schema::grants::WRITES {
        let function = function_of(krate);
        let expected: BTreeSet<String> = partitions.iter().map(|p| p.pattern()).collect();
        let mut granted_writes = BTreeSet::new();
        for st in statements_of(&t, function) {
            let actions = actions_of(&st);
            let writes: Vec<&String> = actions
                .iter()
                .filter(|a| WRITE_ACTIONS.contains(&a.as_str()))
                .collect();
            if writes.is_empty() {
                continue;
            }
            let sid = st["Sid"].as_str().unwrap_or("?").to_owned();
            assert_eq!(
                writes.len(),
                actions.len(),
                "{function} {sid}: writes share no statement with reads, which stay unconditioned"
            );
            assert_eq!(
                st["Resource"],
                serde_yaml::from_str::<Value>("!GetAtt Table.Arn").unwrap(),
                "{function} {sid}: writes go to the table itself"
            );
            let condition = st["Condition"]
                .as_mapping()
                .unwrap_or_else(|| panic!("{function} {sid}: a write without a condition"));
            assert_eq!(
                condition.len(),
                1,
                "{function} {sid}: one condition operator"
            );
            let keys = condition
                .get("ForAllValues:StringLike")
                .and_then(Value::as_mapping)
                .unwrap_or_else(|| panic!("{function} {sid}: ForAllValues:StringLike"));
            assert_eq!(keys.len(), 1, "{function} {sid}: only dynamodb:LeadingKeys");
            let got: BTreeSet<String> = keys
                .get("dynamodb:LeadingKeys")
                .and_then(Value::as_sequence)
                .unwrap_or_else(|| panic!("{function} {sid}: a list of dynamodb:LeadingKeys"))
                .iter()
                .map(|v| v.as_str().expect("a key pattern").to_owned())
                .collect();
            assert_eq!(
                got, expected,
                "{function} {sid}: the partitions tidemark_schema::grants says it writes"
            );
            granted_writes.extend(writes.into_iter().cloned());
        }
        // Every write its code makes is granted, and only under the condition.
        let used: BTreeSet<String> = used_actions(&[root().join("crates").join(krate).join("src")])
            .into_iter()
            .filter(|a| WRITE_ACTIONS.contains(a))
            .map(str::to_owned)
            .collect();
        assert!(
            !used.is_empty(),
            "{function}: no write found; the scan is broken"
        );
        assert_eq!(
            used, granted_writes,
            "{function}: its writes and its conditioned grants"
        );
    }
}

/// The names through which code builds keys in each granted partition: the key constructors
/// and constants of `tidemark_schema::keys`, and the item types that carry their own key.
fn constructors_of(p: &tidemark_schema::grants::Partitions) -> &'static [&'static str] {
    use tidemark_schema::grants::Partitions::{Exactly, StartingWith};
    use tidemark_schema::keys;
    match *p {
        StartingWith(keys::DEVICE_PREFIX) => &[
            "EntityKey::Device",
            "EntityKey::Alert",
            "EntityKey::Reading",
            "EntityKey::Slot",
            "device_pk",
            "reading_pk",
        ],
        StartingWith(keys::QUARANTINE_PREFIX) => {
            &["QuarantineItem", "EntityKey::Quarantine", "quarantine_pk"]
        }
        StartingWith(keys::TAG_INDEX_PREFIX) => &[
            "TagIndexItem",
            "EntityKey::TagIndex",
            "tag_index_pk",
            "TagCountItem",
        ],
        StartingWith(keys::GROUP_PREFIX) => &[
            "GroupBucketItem",
            "EntityKey::GroupBucket",
            "group_pk",
            "GroupAlertItem",
            "GroupRuleStateItem",
        ],
        StartingWith(keys::CALLER_PREFIX) => &["CallerRateItem", "EntityKey::CallerRate"],
        Exactly(keys::CONFIG_PK) => &[
            "EntityKey::DeviceLayout",
            "EntityKey::DefaultLayout",
            "EntityKey::TagHistory",
            "CONFIG_PK",
        ],
        Exactly(keys::PIPELINE_PK) => &[
            "EntityKey::Heartbeat",
            "EntityKey::Failures",
            "HeartbeatItem",
            "PIPELINE_PK",
        ],
        Exactly(keys::EXPORT_PK) => &[
            "EntityKey::ExportCursor",
            "EntityKey::ExportDirty",
            "ExportCursorItem",
            "EXPORT_PK",
        ],
        other => panic!("{other:?}: name its key constructors here"),
    }
}

#[test]
fn each_granted_partition_is_one_its_functions_code_builds_keys_in() {
    // A static check, as far as one goes: a grant for a partition whose keys the function's
    // code (and the store modules it calls) never builds is a grant no code uses.
    for (krate, partitions) in tidemark_schema::grants::WRITES {
        let code: String =
            sources_with_store_without(&[root().join("crates").join(krate).join("src")], None)
                .into_iter()
                .map(|(_, c)| c)
                .collect();
        for p in *partitions {
            let names = constructors_of(p);
            assert!(
                names.iter().any(|n| code.contains(n)),
                "{krate} may write {}, but its code names none of {names:?}",
                p.pattern()
            );
        }
    }
}

/// The indexes a function's own code queries: `QuerySpec::gsi1(…)`/`gsi2(…)` (the shared
/// reader) or `.index_name(GSI…)` (a query of its own).
fn used_indexes(dirs: &[PathBuf]) -> BTreeSet<&'static str> {
    let code: String = sources_with_store_without(dirs, None)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    [
        ("GSI1", ["QuerySpec::gsi1(", ".index_name(GSI1)"]),
        ("GSI2", ["QuerySpec::gsi2(", ".index_name(GSI2)"]),
    ]
    .into_iter()
    .filter(|(_, needles)| needles.iter().any(|n| code.contains(n)))
    .map(|(index, _)| index)
    .collect()
}

/// The indexes a function's policy lets it read (`${Table.Arn}/index/<name>`).
fn granted_indexes(function: &str) -> BTreeSet<String> {
    let t = template();
    let text = serde_yaml::to_string(&t["Resources"][function]["Properties"]["Policies"])
        .unwrap_or_default();
    ["GSI1", "GSI2"]
        .into_iter()
        .filter(|i| text.contains(&format!("/index/{i}")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn each_function_may_query_exactly_the_indexes_its_code_queries() {
    for (function, dir) in [
        ("ExporterFunction", "crates/exporter/src"),
        ("WatchdogFunction", "crates/watchdog/src"),
        ("ApiFunction", "crates/api/src"),
    ] {
        let used: BTreeSet<String> = used_indexes(&[root().join(dir)])
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            used,
            granted_indexes(function),
            "{function}: the indexes its code queries, and those its policy grants"
        );
    }
}
