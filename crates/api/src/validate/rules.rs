//! A device's alert rules over time (`rules` of `PUT /devices/{id}`): windowed aggregates,
//! rates of change and stuck values, parsed as the alerts role parses them
//! (`tidemark_schema::rules::parse_rules`, crates/schema/src/rules.rs), so a rule the API
//! accepts is one the evaluator can judge. A bad rule is a 400 naming `rules` (the list) or
//! `rules[<i>].<field>` (the rule and its field at fault).

use serde_json::Value;
use tidemark_schema::RuleSpec;
use tidemark_schema::rules::parse_rules;

use crate::error::ApiError;

/// The device's `rules`, judged against its `percentiles` (a p95 window is for devices that
/// keep percentiles, as the alerts role applies it: it leaves a p95 rule of a device without
/// them unjudged).
pub(super) fn rules(v: &Value, percentiles: bool) -> Result<Vec<RuleSpec>, ApiError> {
    let list = parse_rules(v).map_err(|(i, e)| {
        let param = match i {
            Some(i) => format!("rules[{i}].{}", e.field),
            None => e.field.to_owned(),
        };
        ApiError::bad(param, e.problem)
    })?;
    if !percentiles && let Some(i) = list.iter().position(RuleSpec::needs_percentiles) {
        return Err(ApiError::bad(
            format!("rules[{i}].aggregate"),
            "p95 needs percentiles: true",
        ));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tidemark_schema::AlertRule;
    use tidemark_schema::rules::MAX_RULES;

    fn param_of(r: Result<Vec<RuleSpec>, ApiError>) -> String {
        match r {
            Err(ApiError::BadRequest { param, .. }) => param,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn the_issues_three_rules_are_accepted() {
        let r = rules(
            &json!([
                {"metric":"temperature","aggregate":"avg","window":"5m","above":30,"forSeconds":600},
                {"metric":"pressure","rate":"per_minute","above":5},
                {"metric":"flow","unchangedForSeconds":3600,"keepFiringForSeconds":300}
            ]),
            false,
        )
        .unwrap();
        let kinds: Vec<_> = r.iter().map(RuleSpec::rule).collect();
        assert_eq!(
            kinds,
            [AlertRule::Window, AlertRule::Rate, AlertRule::Stuck]
        );
        assert_eq!(r[2].keep_firing_for_seconds, Some(300));
        assert_eq!(rules(&json!([]), false).unwrap(), []);
    }

    #[test]
    fn an_unknown_aggregate_is_a_400_naming_the_rules_aggregate() {
        let r = rules(
            &json!([
                {"metric":"t","rate":"per_minute","above":5},
                {"metric":"t","aggregate":"median","window":"5m","above":1}
            ]),
            true,
        );
        assert_eq!(param_of(r), "rules[1].aggregate");
    }

    #[test]
    fn a_window_over_24_hours_is_a_400_naming_the_window() {
        let ok = json!([{"metric":"t","aggregate":"max","window":"24h","above":1}]);
        assert!(rules(&ok, false).is_ok(), "24 h exactly");
        let r = rules(
            &json!([{"metric":"t","aggregate":"max","window":"25h","above":1}]),
            false,
        );
        assert_eq!(param_of(r), "rules[0].window");
    }

    #[test]
    fn an_invalid_metric_name_is_a_400_naming_the_metric() {
        let r = rules(
            &json!([{"metric":"9 lives","rate":"per_hour","below":1}]),
            false,
        );
        assert_eq!(param_of(r), "rules[0].metric");
    }

    #[test]
    fn more_than_16_rules_is_a_400_naming_rules() {
        let n = |count: usize| {
            Value::Array(
                (0..count)
                    .map(|i| json!({"metric": format!("t{i}"), "rate": "per_minute", "above": 1}))
                    .collect(),
            )
        };
        assert_eq!(rules(&n(MAX_RULES), false).unwrap().len(), MAX_RULES);
        let over = n(MAX_RULES + 1);
        assert_eq!(param_of(rules(&over, false)), "rules");
        assert_eq!(param_of(rules(&json!({"metric":"t"}), false)), "rules");
    }

    #[test]
    fn a_p95_window_needs_a_device_keeping_percentiles() {
        let p95 = json!([
            {"metric":"t","aggregate":"avg","window":"5m","above":1},
            {"metric":"t","aggregate":"p95","window":"5m","above":1}
        ]);
        match rules(&p95, false) {
            Err(ApiError::BadRequest { param, message }) => {
                assert_eq!(param, "rules[1].aggregate");
                assert!(message.contains("percentiles: true"), "{message}");
            }
            other => panic!("expected a 400, got {other:?}"),
        }
        assert_eq!(rules(&p95, true).unwrap().len(), 2);
    }
}
