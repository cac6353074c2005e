//! The template's event sources and HTTP API, as `sam local` and a deploy read them: the
//! stream mappings are the functions' own `Kinesis`/`DynamoDB` events and never skip a record
//! for an error; the HTTP API is an `AWS::Serverless::HttpApi` whose routes are the API
//! function's `HttpApi` events, exactly the router's routes, each behind an authorizer; and
//! every variable a local run must override is declared (SAM ignores the others).

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_yaml::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn template() -> Value {
    let text = std::fs::read_to_string(root().join("template.yaml")).expect("read template");
    serde_yaml::from_str(&text).expect("template.yaml is YAML")
}

/// The events of `function` of type `kind`, as (name, properties).
fn events(t: &Value, function: &str, kind: &str) -> Vec<(String, Value)> {
    t["Resources"][function]["Properties"]["Events"]
        .as_mapping()
        .unwrap_or_else(|| panic!("{function} has no Events"))
        .iter()
        .filter(|(_, e)| e["Type"].as_str() == Some(kind))
        .map(|(k, e)| {
            (
                k.as_str().expect("event name").to_owned(),
                e["Properties"].clone(),
            )
        })
        .collect()
}

/// The name a `!Ref`/`!GetAtt` points at (`Table` for `!GetAtt Table.StreamArn`).
fn target(v: &Value) -> Option<String> {
    match v {
        Value::Tagged(t) => t
            .value
            .as_str()
            .map(|s| s.split('.').next().unwrap_or(s).to_owned()),
        _ => None,
    }
}

fn no_raw_resources_of(t: &Value, kind: &str) {
    let raw: Vec<_> = t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some(kind))
        .map(|(k, _)| k.as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        raw.is_empty(),
        "{raw:?}: `sam local` reads only SAM events and resources; declare them as such"
    );
}

fn assert_never_skips(name: &str, p: &Value, queue: &str) {
    assert_eq!(p["MaximumRetryAttempts"].as_i64(), Some(-1), "{name}");
    assert_eq!(p["MaximumRecordAgeInSeconds"].as_i64(), Some(-1), "{name}");
    assert_eq!(
        p["BisectBatchOnFunctionError"].as_bool(),
        Some(true),
        "{name}"
    );
    assert_eq!(
        p["FunctionResponseTypes"][0].as_str(),
        Some("ReportBatchItemFailures"),
        "{name}"
    );
    assert_eq!(
        p["StartingPosition"].as_str(),
        Some("TRIM_HORIZON"),
        "{name}"
    );
    let on_failure = &p["DestinationConfig"]["OnFailure"];
    // With a Type, SAM grants the function sqs:SendMessage on the destination.
    assert_eq!(on_failure["Type"].as_str(), Some("SQS"), "{name}");
    assert_eq!(
        target(&on_failure["Destination"]).as_deref(),
        Some(queue),
        "{name}"
    );
}

#[test]
fn ingest_reads_the_readings_stream_through_its_kinesis_event_and_never_skips() {
    let t = template();
    no_raw_resources_of(&t, "AWS::Lambda::EventSourceMapping");
    let ev = events(&t, "IngestFunction", "Kinesis");
    assert_eq!(ev.len(), 1, "one Kinesis event");
    let (name, p) = &ev[0];
    assert_eq!(target(&p["Stream"]).as_deref(), Some("ReadingsStream"));
    assert_never_skips(name, p, "IngestFailureQueue");
    assert_eq!(
        target(&p["MaximumBatchingWindowInSeconds"]).as_deref(),
        Some("IngestBatchingWindowSeconds")
    );
    assert_eq!(
        target(&t["Resources"]["ReadingsStream"]["Properties"]["RetentionPeriodHours"]).as_deref(),
        Some("StreamRetentionHours")
    );
    assert_eq!(
        t["Parameters"]["StreamRetentionHours"]["Default"].as_u64(),
        Some(168)
    );
}

#[test]
fn aggregator_reads_the_table_stream_through_its_dynamodb_event_and_never_skips() {
    let t = template();
    let ev = events(&t, "AggregatorFunction", "DynamoDB");
    assert_eq!(ev.len(), 1, "one DynamoDB event");
    let (name, p) = &ev[0];
    assert_eq!(target(&p["Stream"]).as_deref(), Some("Table"));
    assert_never_skips(name, p, "AggregatorFailureQueue");
    let filters = p["FilterCriteria"]["Filters"]
        .as_sequence()
        .expect("filters");
    for reading_prefix in [
        tidemark_schema::keys::READING_PREFIX,
        tidemark_schema::keys::SLOT_PREFIX,
    ] {
        assert!(
            filters.iter().any(|f| f["Pattern"]
                .as_str()
                .is_some_and(|pat| pat.contains(&format!("\"prefix\":\"{reading_prefix}\"")))),
            "the aggregator's mapping passes single and packed readings ({reading_prefix}…)"
        );
    }
    assert!(
        filters.iter().all(|f| f["Pattern"].as_str().is_some_and(
            |pat| pat.contains(r#""userIdentity":{"principalId":[{"exists":false}]}"#)
        )),
        "TTL deletions (made by the service, with a userIdentity) are filtered out"
    );
}

#[test]
fn the_watchdog_runs_every_minute_on_the_scheduler_and_heartbeats_the_readings_stream() {
    let t = template();
    let ev = events(&t, "WatchdogFunction", "ScheduleV2");
    assert_eq!(ev.len(), 1, "one schedule");
    let (_, p) = &ev[0];
    assert_eq!(p["ScheduleExpression"].as_str(), Some("rate(1 minute)"));
    // A failed run is the next minute's run: no retries piling up behind it.
    assert_eq!(p["RetryPolicy"]["MaximumRetryAttempts"].as_u64(), Some(0));
    let props = &t["Resources"]["WatchdogFunction"]["Properties"];
    let env = &props["Environment"]["Variables"];
    assert_eq!(
        target(&env["STREAM_NAME"]).as_deref(),
        Some("ReadingsStream")
    );
    for f in ["AlertFunction", "ApiFunction", "WatchdogFunction"] {
        assert_eq!(
            target(&t["Resources"][f]["Properties"]["Environment"]["Variables"]["OFFLINE_AFTER_SECONDS"])
                .as_deref(),
            Some("OfflineAfterSeconds"),
            "{f} judges silence with the fleet's window"
        );
    }
    // Heartbeats go into the readings stream, and nowhere else.
    let policy = serde_yaml::to_string(&props["Policies"]).unwrap();
    assert!(policy.contains("kinesis:PutRecords") && policy.contains("kinesis:ListShards"));
    assert!(policy.contains("ReadingsStream.Arn"), "{policy}");
}

#[test]
fn alerts_read_the_table_stream_through_their_own_short_window_mapping_and_never_skip() {
    let t = template();
    let ev = events(&t, "AlertFunction", "DynamoDB");
    assert_eq!(ev.len(), 1, "one DynamoDB event");
    let (name, p) = &ev[0];
    assert_eq!(target(&p["Stream"]).as_deref(), Some("Table"));
    assert_never_skips(name, p, "AlertFailureQueue");
    assert_eq!(
        target(&p["MaximumBatchingWindowInSeconds"]).as_deref(),
        Some("AlertBatchingWindowSeconds")
    );
    assert_eq!(
        t["Parameters"]["AlertBatchingWindowSeconds"]["Default"].as_u64(),
        Some(1)
    );
    let filters = p["FilterCriteria"]["Filters"]
        .as_sequence()
        .expect("filters");
    assert_eq!(filters.len(), 1);
    let pattern: serde_json::Value =
        serde_json::from_str(filters[0]["Pattern"].as_str().unwrap()).expect("JSON pattern");
    let prefixes: BTreeSet<&str> = pattern["dynamodb"]["Keys"]["sk"]["S"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["prefix"].as_str())
        .collect();
    // Readings to evaluate (single or packed), alert items whose changes are published, the
    // pipeline's heartbeats to mark as passed; not the notification markers the function
    // writes itself (their sort key matches no prefix).
    use tidemark_schema::keys;
    assert_eq!(
        prefixes,
        BTreeSet::from([
            keys::READING_PREFIX,
            keys::SLOT_PREFIX,
            keys::ALERT_PREFIX,
            keys::HEARTBEAT_PREFIX
        ])
    );
    assert!(
        !prefixes
            .iter()
            .any(|p| keys::NOTIFY_MARKER_SK.starts_with(p))
    );
    // and device items, whose threshold changes resolve or re-derive alerts at once
    let exact: BTreeSet<&str> = pattern["dynamodb"]["Keys"]["sk"]["S"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert_eq!(exact, BTreeSet::from([keys::DEVICE_METADATA_SK]));
    assert_eq!(
        pattern["userIdentity"]["principalId"][0]["exists"],
        serde_json::json!(false),
        "TTL deletions are filtered out"
    );
    // The rollup mapping keeps its long window.
    let (_, agg) = &events(&t, "AggregatorFunction", "DynamoDB")[0];
    assert_eq!(
        target(&agg["MaximumBatchingWindowInSeconds"]).as_deref(),
        Some("AggregatorBatchingWindowSeconds")
    );
}

#[test]
fn alert_events_have_a_bus_and_an_example_rule_sending_critical_ones_to_a_topic() {
    let t = template();
    let r = &t["Resources"];
    assert_eq!(
        r["AlertEventBus"]["Type"].as_str(),
        Some("AWS::Events::EventBus")
    );
    let rule = &r["CriticalAlertRule"]["Properties"];
    assert_eq!(
        target(&rule["EventBusName"]).as_deref(),
        Some("AlertEventBus")
    );
    let pattern = &rule["EventPattern"];
    assert_eq!(
        pattern["source"][0].as_str(),
        Some(tidemark_aggregator::notify::SOURCE)
    );
    assert_eq!(
        pattern["detail-type"][0].as_str(),
        Some(tidemark_aggregator::notify::DETAIL_TYPE)
    );
    assert_eq!(pattern["detail"]["severity"][0].as_str(), Some("critical"));
    assert_eq!(
        target(&rule["Targets"][0]["Arn"]).as_deref(),
        Some("CriticalAlertTopic")
    );
    assert_eq!(
        target(&r["CriticalAlertTopic"]["Properties"]["KmsMasterKeyId"]).as_deref(),
        Some("AlarmKey"),
        "the key whose policy lets EventBridge publish"
    );
    let policy = &r["CriticalAlertTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"][0];
    assert_eq!(
        policy["Principal"]["Service"].as_str(),
        Some("events.amazonaws.com")
    );
    assert_eq!(
        target(&policy["Condition"]["ArnEquals"]["aws:SourceArn"]).as_deref(),
        Some("CriticalAlertRule"),
        "only the rule may publish"
    );
    assert_eq!(t["Parameters"]["AlertEmail"]["Default"].as_str(), Some(""));
    let sub = &r["AlertEmailSubscription"];
    assert_eq!(sub["Condition"].as_str(), Some("HasAlertEmail"));
    assert_eq!(
        target(&sub["Properties"]["TopicArn"]).as_deref(),
        Some("CriticalAlertTopic")
    );
    assert_eq!(
        target(&sub["Properties"]["Endpoint"]).as_deref(),
        Some("AlertEmail")
    );
    for alarm in [
        "AlertErrorsAlarm",
        "AlertThrottlesAlarm",
        "AlertIteratorAgeAlarm",
    ] {
        assert_eq!(
            target(&r[alarm]["Properties"]["Dimensions"][0]["Value"]).as_deref(),
            Some("AlertFunction"),
            "{alarm}"
        );
    }
    assert!(r["AlertFailureQueueAlarm"].is_mapping());
}

#[test]
fn every_router_route_is_an_http_api_event_behind_an_authorizer() {
    let t = template();
    no_raw_resources_of(&t, "AWS::ApiGatewayV2::Api");
    no_raw_resources_of(&t, "AWS::ApiGatewayV2::Route");
    let api = &t["Resources"]["HttpApi"];
    let t_params = |name: &str| {
        t["Parameters"][name]["Default"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(api["Type"].as_str(), Some("AWS::Serverless::HttpApi"));

    let mut declared = BTreeSet::new();
    for (name, p) in events(&t, "ApiFunction", "HttpApi") {
        assert_eq!(target(&p["ApiId"]).as_deref(), Some("HttpApi"), "{name}");
        assert_eq!(p["PayloadFormatVersion"].as_str(), Some("2.0"), "{name}");
        declared.insert((
            p["Method"].as_str().unwrap().to_uppercase(),
            p["Path"].as_str().unwrap().to_owned(),
        ));
    }
    let mut served: BTreeSet<(String, String)> = tidemark_api::routes()
        .into_iter()
        .map(|(m, p)| (m.as_str().to_owned(), p.to_owned()))
        .collect();
    // The catch-all: the function answers unknown paths and methods with JSON 404/405.
    served.insert(("ANY".into(), "/{proxy+}".into()));
    // The dashboard's files, which need no auth (checked below).
    let dashboard = [("GET", "/ui"), ("GET", "/ui/{proxy+}")];
    served.extend(dashboard.map(|(m, p)| (m.to_owned(), p.to_owned())));
    assert_eq!(declared, served);

    // Each route's authorization, in the definition: a JWT with the route's scope when
    // JwtIssuer is set, else IAM.
    let scopes = tidemark_api::routes::scopes();
    let paths = &api["Properties"]["DefinitionBody"]["paths"];
    for (method, path) in &served {
        if dashboard.contains(&(method.as_str(), path.as_str())) {
            // Static files only: the function never answers these routes with data.
            let security = &paths[path.as_str()][method.to_lowercase().as_str()]["security"];
            assert_eq!(
                security.as_sequence().map(Vec::len),
                Some(0),
                "{method} {path}: open, and only the dashboard's files are"
            );
            continue;
        }
        let key = match method.as_str() {
            "ANY" => "x-amazon-apigateway-any-method".to_owned(),
            m => m.to_lowercase(),
        };
        let security = &paths[path.as_str()][key.as_str()]["security"];
        let Value::Tagged(t) = security else {
            panic!("{method} {path}: no security chosen by the UseJwt condition");
        };
        assert_eq!(t.tag.to_string(), "!If", "{method} {path}");
        let branches = t.value.as_sequence().expect("!If list");
        assert_eq!(branches[0].as_str(), Some("UseJwt"), "{method} {path}");
        // The scope by the parameter that names it, whose default is the function's default.
        let scope = match &branches[1][0]["Jwt"][0] {
            Value::Tagged(r) if r.tag == "!Ref" => r.value.as_str().map(str::to_owned),
            other => panic!("{method} {path}: the scope is not a parameter: {other:?}"),
        };
        let wanted = scopes
            .iter()
            .find(|(m, p, _)| m.as_str() == method && p == path)
            .map(|(_, _, s)| *s)
            .unwrap_or(tidemark_api::routes::Scope::Read);
        let param = match wanted {
            tidemark_api::routes::Scope::Read => "ReadScope",
            tidemark_api::routes::Scope::Write => "WriteScope",
            tidemark_api::routes::Scope::Admin => "AdminScope",
        };
        assert_eq!(
            scope.as_deref(),
            Some(param),
            "{method} {path}: the JWT scope the function also requires"
        );
        assert_eq!(
            t_params(param),
            wanted.default_name(),
            "{param}'s default is the function's"
        );
        assert!(
            branches[2][0].get("AWS_IAM").is_some(),
            "{method} {path}: IAM branch"
        );
    }
}

#[test]
fn variables_a_local_run_overrides_are_declared() {
    let t = template();
    let globals = &t["Globals"]["Function"]["Environment"]["Variables"];
    for var in [
        tidemark_store::settings::TIDEMARK_DYNAMODB_ENDPOINT.name,
        tidemark_store::settings::TABLE_NAME.name,
    ] {
        assert!(
            globals.get(var).is_some(),
            "{var} is not declared, so `sam local invoke --env-vars` cannot set it"
        );
    }
    // Deployed, the endpoint is empty: the SDK's own resolution.
    assert_eq!(
        globals[tidemark_store::settings::TIDEMARK_DYNAMODB_ENDPOINT.name].as_str(),
        Some("")
    );

    // events/env.local.json sets only what the template declares for that function.
    let text = std::fs::read_to_string(root().join("events/env.local.json"))
        .expect("events/env.local.json");
    let env: serde_json::Value = serde_json::from_str(&text).expect("env.local.json is JSON");
    let env = env.as_object().expect("object");
    assert!(!env.is_empty());
    for (scope, vars) in env {
        let mut declared: BTreeSet<String> = globals
            .as_mapping()
            .unwrap()
            .keys()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect();
        if scope != "Parameters" {
            let own = &t["Resources"][scope.as_str()]["Properties"]["Environment"]["Variables"];
            assert!(
                t["Resources"][scope.as_str()].is_mapping(),
                "env.local.json names {scope}, which the template lacks"
            );
            if let Some(m) = own.as_mapping() {
                declared.extend(m.keys().filter_map(|k| k.as_str().map(str::to_owned)));
            }
        }
        for var in vars.as_object().expect("variables").keys() {
            assert!(
                declared.contains(var),
                "env.local.json sets {var} for {scope}, which the template does not declare there, so SAM ignores it"
            );
        }
    }
}

#[test]
fn alarms_reach_someone_through_a_topic_cloudwatch_can_use() {
    let t = template();
    let topic = &t["Resources"]["AlarmTopic"]["Properties"];
    assert_eq!(
        target(&topic["KmsMasterKeyId"]).as_deref(),
        Some("AlarmKey")
    );
    let statements = t["Resources"]["AlarmKey"]["Properties"]["KeyPolicy"]["Statement"]
        .as_sequence()
        .unwrap()
        .clone();
    let services: Vec<String> = statements
        .iter()
        .flat_map(|s| {
            s["Principal"]["Service"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert!(services.contains(&"cloudwatch.amazonaws.com".to_owned()));
    assert!(services.contains(&"events.amazonaws.com".to_owned()));
    assert!(t["Parameters"]["AlarmEmail"].is_mapping());
    assert_eq!(
        t["Resources"]["AlarmEmailSubscription"]["Condition"].as_str(),
        Some("HasAlarmEmail")
    );
}

/// `!Sub …` or `!Ref …` as its text.
fn intrinsic(v: &Value) -> Option<(String, String)> {
    match v {
        Value::Tagged(t) => Some((t.tag.to_string(), t.value.as_str()?.to_owned())),
        _ => None,
    }
}

#[test]
fn the_alarm_key_serves_the_services_only_for_this_accounts_alarms_and_rules() {
    let t = template();
    let statements = t["Resources"]["AlarmKey"]["Properties"]["KeyPolicy"]["Statement"]
        .as_sequence()
        .unwrap()
        .clone();
    let account = Some(("!Ref".to_owned(), "AWS::AccountId".to_owned()));
    let mut seen = Vec::new();
    for s in &statements {
        let services: Vec<&str> = s["Principal"]["Service"]
            .as_sequence()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if services.is_empty() {
            continue; // the account's own administration
        }
        assert_eq!(services.len(), 1, "one service a statement: {s:?}");
        let c = &s["Condition"];
        let (account_op, arn_op, arn) = match services[0] {
            "cloudwatch.amazonaws.com" => (
                "StringEquals",
                "ArnLike",
                "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:*",
            ),
            // Checked where the request carries them (see the template's comment).
            "events.amazonaws.com" => (
                "StringEqualsIfExists",
                "ArnLikeIfExists",
                "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:rule/*",
            ),
            other => panic!("{other} may use the alarm key"),
        };
        assert_eq!(
            intrinsic(&c[account_op]["aws:SourceAccount"]),
            account,
            "{s:?}"
        );
        assert_eq!(
            intrinsic(&c[arn_op]["aws:SourceArn"]),
            Some(("!Sub".to_owned(), arn.to_owned())),
            "{s:?}"
        );
        seen.push(services[0]);
    }
    seen.sort();
    assert_eq!(seen, ["cloudwatch.amazonaws.com", "events.amazonaws.com"]);
}

#[test]
fn the_cursor_key_is_a_generated_secret_the_api_reads_not_an_environment_value() {
    let t = template();
    assert!(t["Parameters"].get("CursorSecret").is_none());
    let secret = &t["Resources"]["CursorSigningSecret"];
    assert_eq!(secret["Type"].as_str(), Some("AWS::SecretsManager::Secret"));
    assert!(secret["Properties"]["GenerateSecretString"].is_mapping());
    let api = &t["Resources"]["ApiFunction"]["Properties"];
    let env = &api["Environment"]["Variables"];
    assert_eq!(
        target(&env[tidemark_store::settings::CURSOR_SECRET_ARN.name]).as_deref(),
        Some("CursorSigningSecret")
    );
    assert_eq!(
        env[tidemark_store::settings::TIDEMARK_LOCAL.name].as_str(),
        Some("")
    );
    let grants = api["Policies"][0]["Statement"].as_sequence().unwrap();
    assert!(grants.iter().any(
        |s| s["Action"].as_str() == Some("secretsmanager:GetSecretValue")
            && target(&s["Resource"]).as_deref() == Some("CursorSigningSecret")
    ));
}

#[test]
fn the_api_logs_access_and_has_bounded_concurrency() {
    let t = template();
    let logs = &t["Resources"]["HttpApi"]["Properties"]["AccessLogSettings"];
    assert_eq!(
        target(&logs["DestinationArn"]).as_deref(),
        Some("ApiAccessLogs")
    );
    let format: serde_json::Value =
        serde_json::from_str(logs["Format"].as_str().expect("format")).expect("JSON format");
    assert!(format.get("status").is_some() && format.get("requestId").is_some());
    assert_eq!(
        target(&t["Resources"]["ApiAccessLogs"]["Properties"]["RetentionInDays"]).as_deref(),
        Some("LogRetentionDays")
    );
    let reserved = &t["Resources"]["ApiFunction"]["Properties"]["ReservedConcurrentExecutions"];
    let Value::Tagged(f) = reserved else {
        panic!("ReservedConcurrentExecutions is chosen by ReservesApiConcurrency");
    };
    assert_eq!(f.value[0].as_str(), Some("ReservesApiConcurrency"));
    assert_eq!(
        target(&f.value[1]).as_deref(),
        Some("ApiReservedConcurrency")
    );
}

#[test]
fn every_skipped_security_check_says_why_next_to_its_resource() {
    let t = template();
    let mut skipped = 0;
    for (name, r) in t["Resources"].as_mapping().unwrap() {
        let Some(skips) = r["Metadata"]["checkov"]["skip"].as_sequence() else {
            continue;
        };
        for s in skips {
            let id = s["id"].as_str().unwrap_or_default();
            let reason = s["comment"].as_str().unwrap_or_default();
            assert!(
                id.starts_with("CKV") && reason.len() >= 20 && !reason.contains('\n'),
                "{name:?}: skip {id:?} needs a one-line reason, got {reason:?}"
            );
            skipped += 1;
        }
    }
    assert!(skipped > 0, "no skips found: the check is broken");
}

#[test]
fn the_iot_core_rule_keeps_each_devices_order_and_every_failed_message() {
    let t = template();
    let r = &t["Resources"];
    let rule = &r["IotTelemetryRule"];
    assert_eq!(rule["Condition"].as_str(), Some("HasIotRule"));
    let payload = &rule["Properties"]["TopicRulePayload"];
    // The SQL the recorded rule outputs (events/iot-rule-outputs.json) were made with.
    let fixture: serde_json::Value = serde_json::from_slice(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../events/iot-rule-outputs.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let Value::Tagged(sql) = &payload["Sql"] else {
        panic!("the SQL names the IotTopicFilter parameter")
    };
    let sql = sql.value.as_str().unwrap();
    assert_eq!(
        sql,
        "SELECT encode(*, 'base64') AS tidemarkPayload, topic(2) AS tidemarkThing, \
         timestamp() AS receivedAt FROM '${IotTopicFilter}'"
    );
    let about = fixture["about"].as_str().unwrap();
    assert!(
        about.contains(&sql.replace("${IotTopicFilter}", "tidemark/+/telemetry")),
        "{about}"
    );
    for m in fixture["messages"].as_array().unwrap() {
        let topic = m["topic"].as_str().unwrap();
        assert_eq!(m["partitionKey"].as_str(), topic.split('/').nth(1));
        assert_eq!(
            m["ruleOutput"]["tidemarkThing"].as_str(),
            topic.split('/').nth(1)
        );
    }
    // One device, one partition key: its records stay in order on one shard.
    let kinesis = &payload["Actions"][0]["Kinesis"];
    assert_eq!(kinesis["PartitionKey"].as_str(), Some("${topic(2)}"));
    assert_eq!(
        target(&kinesis["StreamName"]).as_deref(),
        Some("ReadingsStream")
    );
    // Failed messages are kept, and someone is told.
    let error = &payload["ErrorAction"]["Sqs"];
    assert_eq!(
        target(&error["QueueUrl"]).as_deref(),
        Some("IotRuleErrorQueue")
    );
    assert_eq!(
        r["IotRuleErrorQueue"]["Properties"]["MessageRetentionPeriod"].as_u64(),
        Some(1_209_600)
    );
    assert_eq!(
        target(&r["IotRuleErrorsAlarm"]["Properties"]["Dimensions"][0]["Value"]).as_deref(),
        Some("IotRuleErrorQueue")
    );
    // Its role may put on the stream and keep failures, nothing else.
    let statements = r["IotRuleRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        .as_sequence()
        .unwrap();
    let grants: Vec<(String, Option<String>)> = statements
        .iter()
        .map(|s| {
            (
                s["Action"].as_str().unwrap().to_owned(),
                target(&s["Resource"]),
            )
        })
        .collect();
    assert_eq!(
        grants,
        [
            (
                "kinesis:PutRecord".to_owned(),
                Some("ReadingsStream".to_owned())
            ),
            (
                "sqs:SendMessage".to_owned(),
                Some("IotRuleErrorQueue".to_owned())
            ),
        ]
    );
}
