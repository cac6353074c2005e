//! Per-caller rate limits (docs/design.md §6 "Rate limits per caller"), off unless
//! `CALLER_RATE_LIMIT` is set.
//!
//! API Gateway's stage throttling counts all callers together, and WAF cannot be attached to
//! an HTTP API, so the function counts each caller itself: once a request is authenticated and
//! its scope checked, and before anything is read, one conditional `ADD` counts it in the
//! caller's item of the current UTC minute (`CALLER#<hash>` / `RATE#<minute>`,
//! [`tidemark_schema::CallerRateItem`]). A request past the limit is answered 429 with
//! `Retry-After` (the seconds left in the minute) and costs that one write, nothing else.
//!
//! A failed count (the table throttled, say) is logged and the request served: the limit
//! fails open, so it never takes the API down with it.

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

/// Who is asking, for counting, or `None` when the request names no one (a local stack
/// without auth), and no limit applies.
///
/// With a JWT authorizer, the token's `sub` claim (a token without one is not counted: every
/// issuer the template supports sets it). With IAM auth, the caller's identity as API Gateway
/// gives it: the user or role-session ARN, else its caller ID or user ID. The two kinds are
/// told apart, so a `sub` can never count as an IAM identity's requests.
pub fn caller_of(req: &Request) -> Option<String> {
    let Some(RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref() else {
        return None;
    };
    let auth = ctx.authorizer.as_ref()?;
    if let Some(jwt) = &auth.jwt {
        return jwt
            .claims
            .get("sub")
            .filter(|s| !s.trim().is_empty())
            .map(|s| format!("jwt:{s}"));
    }
    let iam = auth.iam.as_ref()?;
    [&iam.user_arn, &iam.caller_id, &iam.user_id]
        .into_iter()
        .flatten()
        .find(|s| !s.trim().is_empty())
        .map(|s| format!("iam:{s}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The repository's sample `GET /devices/{id}` event with its authorizer replaced.
    fn with_authorizer(authorizer: Option<Value>) -> Request {
        let mut v: Value =
            serde_json::from_str(include_str!("../../../events/apigw-get-device.json")).unwrap();
        match authorizer {
            Some(a) => v["requestContext"]["authorizer"] = a,
            None => {
                v["requestContext"]
                    .as_object_mut()
                    .unwrap()
                    .remove("authorizer");
            }
        }
        lambda_http::request::from_str(&v.to_string()).unwrap()
    }

    fn jwt(claims: Value) -> Option<Value> {
        Some(json!({"jwt": {"claims": claims, "scopes": ["tidemark/read"]}}))
    }

    #[test]
    fn a_token_caller_is_its_subject() {
        let a = caller_of(&with_authorizer(jwt(json!({"sub": "user-1", "iss": "i"}))));
        let b = caller_of(&with_authorizer(jwt(json!({"sub": "user-2", "iss": "i"}))));
        assert_eq!(a.as_deref(), Some("jwt:user-1"));
        assert_ne!(a, b);
        // Other claims do not make another caller of the same subject.
        let again = caller_of(&with_authorizer(jwt(
            json!({"sub": "user-1", "scope": "x"}),
        )));
        assert_eq!(again, a);
    }

    #[test]
    fn a_token_without_a_subject_is_not_counted() {
        assert_eq!(caller_of(&with_authorizer(jwt(json!({"iss": "i"})))), None);
        assert_eq!(caller_of(&with_authorizer(jwt(json!({"sub": " "})))), None);
    }

    #[test]
    fn an_iam_caller_is_its_arn_else_its_caller_id() {
        let arn = "arn:aws:sts::123456789012:assumed-role/dashboard/alice";
        let iam = |v: Value| caller_of(&with_authorizer(Some(json!({"iam": v}))));
        assert_eq!(
            iam(json!({"userArn": arn, "callerId": "AROA:alice", "accountId": "123456789012"})),
            Some(format!("iam:{arn}"))
        );
        assert_eq!(
            iam(json!({"callerId": "AROA:alice", "userId": "AROA"})),
            Some("iam:AROA:alice".to_owned())
        );
        assert_eq!(iam(json!({"accountId": "123456789012"})), None);
    }

    #[test]
    fn a_subject_and_an_iam_identity_of_the_same_name_are_different_callers() {
        let token = caller_of(&with_authorizer(jwt(json!({"sub": "alice"}))));
        let iam = caller_of(&with_authorizer(Some(json!({"iam": {"userArn": "alice"}}))));
        assert!(token.is_some() && iam.is_some());
        assert_ne!(token, iam);
    }

    #[test]
    fn a_request_without_an_identity_is_not_counted() {
        assert_eq!(caller_of(&with_authorizer(None)), None);
        let plain = http::Request::builder()
            .uri("/devices")
            .body(lambda_http::Body::Empty)
            .unwrap();
        assert_eq!(caller_of(&plain), None);
    }
}
