//! Scoped access (docs/design.md §6 "Scoped access"), end to end: the local OpenID provider
//! issues tokens carrying the `tidemark:sites` claim, the local JWT authorizer (API Gateway's
//! checks) passes their claims on, and the API over DynamoDB Local keeps every caller to its
//! sites: an operator of site A, a viewer of site B, a caller of both, and fleet-wide admins.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lambda_http::{Body, Request, RequestExt};
use serde_json::{Value, json};
use tidemark_api::{ApiConfig, App, JwtSignIn, UiAuth};
use tidemark_devstack::authorizer::{Authorized, JwtAuthorizer};
use tidemark_devstack::http_api::{bind, serve};
use tidemark_testkit::TestTable;
use tidemark_testkit::browser::screenshot_dir;
use tidemark_testkit::oidc::{AUDIENCE, CLIENT_ID, IssuerOptions, LocalIssuer};
use tokio::sync::watch;

use crate::common;

const OPERATOR_A: &str = "machine-operator-a";
const VIEWER_B: &str = "machine-viewer-b";
const SITES_AB: &str = "machine-sites-ab";
const ADMIN: &str = "machine-admin";
const ALL: &str = "tidemark/read tidemark/write tidemark/admin";
/// A person who signs in at the provider's login page: a viewer of site B.
const VIEWER_B_LOGIN: &str = "viewer-b";

/// The API behind the authorizer, the provider it trusts, and a fleet: `a1`, `a2` at site A,
/// `b1` at site B, `x1` without a site; an open alert on `a1` and one on `b1`.
struct Stack {
    addr: SocketAddr,
    issuer: LocalIssuer,
    table: TestTable,
    alerts: Vec<(String, String)>,
    stop: watch::Sender<bool>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn stack(label: &str) -> Stack {
    let table = TestTable::new(label).await;
    let (listener, addr) = bind(0).await.unwrap();
    let mut o = IssuerOptions::new(format!("http://{addr}/ui/"));
    o.machines = [OPERATOR_A, VIEWER_B, SITES_AB, ADMIN]
        .map(str::to_owned)
        .to_vec();
    o.claims = vec![
        // A JSON array, a plain string, API Gateway's rendering of an array, and `*`.
        (OPERATOR_A.into(), json!({"tidemark:sites": ["A"]})),
        (VIEWER_B.into(), json!({"tidemark:sites": "B"})),
        (SITES_AB.into(), json!({"tidemark:sites": "[A B]"})),
        (ADMIN.into(), json!({"tidemark:sites": "*"})),
        (VIEWER_B_LOGIN.into(), json!({"tidemark:sites": ["B"]})),
    ];
    o.users
        .push((VIEWER_B_LOGIN.into(), "tidemark/read".into()));
    let issuer = LocalIssuer::start(&o);
    let mut config = ApiConfig::new(table.name.clone());
    config.ui_auth = UiAuth::Jwt(JwtSignIn {
        issuer: Some(issuer.issuer.clone()),
        audience: Some(AUDIENCE.into()),
        client_id: Some(CLIENT_ID.into()),
        ..JwtSignIn::default()
    });
    let scopes = config.scopes.clone();
    let front = Arc::new(Authorized {
        inner: App::new(table.client.clone(), config),
        authorizer: JwtAuthorizer::new(issuer.issuer.clone(), vec![AUDIENCE.into()]),
        scopes,
    });
    let (stop, rx) = watch::channel(false);
    tokio::spawn(serve(listener, front, rx));
    let mut s = Stack {
        addr,
        issuer,
        table,
        alerts: Vec::new(),
        stop,
    };
    let admin = s.token(ADMIN, ALL);
    for (id, site) in [
        ("a1", Some("A")),
        ("a2", Some("A")),
        ("b1", Some("B")),
        ("x1", None),
    ] {
        let body = match site {
            Some(site) => json!({"name": id, "tags": {"site": site}}),
            None => json!({"name": id}),
        };
        let (status, b) = s
            .call("PUT", &format!("/devices/{id}"), &admin, &body)
            .await;
        assert_eq!(status, 201, "{b}");
    }
    for device in ["a1", "b1"] {
        let alert = tidemark_testkit::open_alert(device);
        s.table
            .client
            .put_item()
            .table_name(&s.table.name)
            .set_item(Some(tidemark_store::to_item(&alert).unwrap()))
            .send()
            .await
            .unwrap();
        s.alerts.push((device.into(), alert.alert_id.to_string()));
    }
    // A reading each for a1 and b1, a minute ago.
    let now = tidemark_schema::Clock::system().now();
    for device in ["a1", "b1"] {
        let r = tidemark_schema::Reading {
            device_id: tidemark_schema::DeviceId::new(device).unwrap(),
            timestamp: now.minus_millis(60_000).unwrap(),
            metrics: [(tidemark_schema::MetricName::new("t").unwrap(), 1.0)]
                .into_iter()
                .collect(),
            metadata: None,
        };
        s.table
            .client
            .put_item()
            .table_name(&s.table.name)
            .set_item(Some(
                tidemark_store::to_item(&tidemark_schema::ReadingItem::new(&r, None, 30)).unwrap(),
            ))
            .send()
            .await
            .unwrap();
    }
    // Records set aside today, one for a1's partition key, one for b1's, one for no device.
    let now = tidemark_schema::Clock::system().now();
    for (i, key) in ["a1", "b1", "not a device"].into_iter().enumerate() {
        let seq = format!("4959033827149025660855969253836157109592157598913658{i:04}");
        let q = tidemark_schema::QuarantineItem::split(
            tidemark_schema::QuarantineSource {
                received: now,
                sequence: &seq,
                sub_record: None,
                partition_key: key,
                explicit_hash_key: None,
            },
            tidemark_schema::QuarantineReason::NotJson,
            "why".into(),
            b"{",
        );
        s.table
            .client
            .put_item()
            .table_name(&s.table.name)
            .set_item(Some(tidemark_store::to_item(&q.record).unwrap()))
            .send()
            .await
            .unwrap();
    }
    s
}

/// The partition keys of today's quarantined records `token` sees.
async fn quarantined(s: &Stack, token: &str) -> Vec<String> {
    let mut keys: Vec<String> = s
        .walk("/quarantine", 10, token)
        .await
        .iter()
        .map(|q| q["partitionKey"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    keys
}

/// The devices whose latest reading `path` (a `/latest` query) answers with.
async fn latest_of(s: &Stack, path: &str, token: &str) -> Vec<String> {
    let (status, body) = s.get(path, token).await;
    assert_eq!(status, 200, "{path}: {body}");
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["deviceId"].as_str().unwrap().to_owned())
        .collect()
}

impl Stack {
    fn token(&self, client: &str, scopes: &str) -> String {
        self.issuer.machine_token(client, scopes, None)
    }

    fn alert_of(&self, device: &str) -> &str {
        &self.alerts.iter().find(|(d, _)| d == device).unwrap().1
    }

    async fn call(&self, method: &str, path: &str, token: &str, body: &Value) -> (u16, Value) {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, self.addr.to_string())
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.call("GET", path, token, &Value::Null).await
    }

    /// Every item of a list, page by page (`limit` a page), following its cursor.
    async fn walk(&self, path: &str, limit: usize, token: &str) -> Vec<Value> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..50 {
            let mut url = format!("{path}{sep}limit={limit}");
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let (status, body) = self.get(&url, token).await;
            assert_eq!(status, 200, "{url}: {body}");
            items.extend(body["items"].as_array().unwrap().iter().cloned());
            match body["cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => return items,
            }
        }
        panic!("{path}: the cursor never ended");
    }

    async fn device_ids(&self, path: &str, limit: usize, token: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .walk(path, limit, token)
            .await
            .iter()
            .map(|d| d["deviceId"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_of_site_a_sees_and_changes_only_site_a() {
    let s = stack("scoped-operator").await;
    let op = s.token(OPERATOR_A, ALL);
    assert_eq!(s.device_ids("/devices", 1, &op).await, ["a1", "a2"]);
    assert_eq!(s.device_ids("/devices", 10, &op).await, ["a1", "a2"]);
    assert_eq!(
        s.device_ids("/devices?tag=site:B", 10, &op).await,
        Vec::<String>::new()
    );
    assert_eq!(
        s.device_ids("/devices?status=active", 10, &op).await,
        ["a1", "a2"]
    );

    // Another site's device answers exactly as a missing one does, on every device route.
    let (status, missing) = s.get("/devices/zz", &op).await;
    assert_eq!(status, 404);
    let (status, other) = s.get("/devices/b1", &op).await;
    assert_eq!(status, 404);
    assert_eq!(
        other.to_string().replace("b1", "zz"),
        missing.to_string(),
        "an out-of-scope device looks missing"
    );
    for path in [
        "/devices/b1/readings",
        "/devices/b1/readings/latest",
        "/devices/b1/alerts",
        "/devices/b1/aggregates?period=hourly",
        "/devices/b1/series",
        "/devices/b1/layout",
        "/devices/b1/shards",
        "/devices/x1",
    ] {
        let (status, body) = s.get(path, &op).await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (404, json!("not_found")),
            "{path}: {body}"
        );
    }
    let (status, _) = s.get("/devices/a1", &op).await;
    assert_eq!(status, 200);

    // Lists: only site A's alerts; group series only of its own site.
    let alerts: Vec<Value> = s.walk("/alerts", 10, &op).await;
    let devices: Vec<&str> = alerts
        .iter()
        .map(|a| a["deviceId"].as_str().unwrap())
        .collect();
    assert_eq!(devices, ["a1"]);
    let (status, body) = s.get(&group_series("A"), &op).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.get(&group_series("B"), &op).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(latest_of(&s, "/latest?ids=a1,b1", &op).await, ["a1"]);
    assert_eq!(
        latest_of(&s, "/latest?tag=site:B", &op).await,
        Vec::<String>::new()
    );
    assert_eq!(latest_of(&s, "/latest?tag=site:A", &op).await, ["a1"]);
    assert_eq!(quarantined(&s, &op).await, ["a1"]);

    // Writes: another site's alerts and devices are missing; a device cannot leave the scope.
    let b_alert = s.alert_of("b1").to_owned();
    let a_alert = s.alert_of("a1").to_owned();
    for (method, path) in [
        ("POST", format!("/devices/b1/alerts/{b_alert}/ack")),
        ("POST", format!("/devices/b1/alerts/{b_alert}/snooze")),
        ("DELETE", format!("/devices/b1/alerts/{b_alert}/snooze")),
        ("PUT", "/devices/b1/layout".to_owned()),
        ("PUT", "/devices/b1".to_owned()),
    ] {
        let body = json!({"name": "taken", "until": "2099-01-01T00:00:00Z", "shards": 2});
        let (status, b) = s.call(method, &path, &op, &body).await;
        assert_eq!(status, 404, "{method} {path}: {b}");
    }
    let (status, b) = s
        .call(
            "POST",
            &format!("/devices/a1/alerts/{a_alert}/ack"),
            &op,
            &Value::Null,
        )
        .await;
    assert_eq!(status, 200, "{b}");
    let (status, b) = s
        .call("PUT", "/devices/a1", &op, &json!({"tags": {"site": "B"}}))
        .await;
    assert_eq!(
        (status, b["error"]["code"].clone()),
        (403, json!("outside_scope")),
        "{b}"
    );
    let (status, b) = s
        .call("PUT", "/devices/a9", &op, &json!({"name": "no site"}))
        .await;
    assert_eq!(
        status, 403,
        "a scoped caller's new device needs one of its sites: {b}"
    );
    let (status, b) = s
        .call(
            "PUT",
            "/devices/a9",
            &op,
            &json!({"tags": {"site": "A", "line": "3"}}),
        )
        .await;
    assert_eq!(status, 201, "{b}");
    let (status, b) = s
        .call("PUT", "/devices/a9", &op, &json!({"name": "renamed"}))
        .await;
    assert_eq!(status, 200, "a device's own site stays: {b}");
    let (status, _) = s.get("/devices/b1", &s.token(ADMIN, ALL)).await;
    assert_eq!(status, 200, "b1 is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_of_site_b_reads_site_b_and_access_follows_a_site_change() {
    let s = stack("scoped-viewer").await;
    let viewer = s.token(VIEWER_B, "tidemark/read");
    assert_eq!(s.device_ids("/devices", 10, &viewer).await, ["b1"]);
    let (status, _) = s.get("/devices/a1", &viewer).await;
    assert_eq!(status, 404);
    let alerts = s.walk("/alerts", 10, &viewer).await;
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0]["deviceId"], "b1");
    // A viewer has no write scope: API Gateway's refusal, before the function.
    let (status, _) = s
        .call("PUT", "/devices/b1", &viewer, &json!({"name": "x"}))
        .await;
    assert_eq!(status, 403);

    // An admin moves a2 to site B: it leaves A's callers and joins B's at once.
    let admin = s.token(ADMIN, ALL);
    let (status, b) = s
        .call(
            "PUT",
            "/devices/a2",
            &admin,
            &json!({"tags": {"site": "B"}}),
        )
        .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(s.device_ids("/devices", 10, &viewer).await, ["a2", "b1"]);
    let (status, _) = s.get("/devices/a2", &viewer).await;
    assert_eq!(status, 200);
    let op = s.token(OPERATOR_A, ALL);
    let (status, _) = s.get("/devices/a2", &op).await;
    assert_eq!(status, 404);
    assert_eq!(s.device_ids("/devices", 10, &op).await, ["a1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_wide_admins_see_every_device_and_cursors_keep_to_their_caller() {
    let s = stack("scoped-admin").await;
    let admin = s.token(ADMIN, ALL);
    let no_claim = s.token("machine", ALL);
    let every = ["a1", "a2", "b1", "x1"];
    assert_eq!(s.device_ids("/devices", 1, &admin).await, every);
    assert_eq!(s.device_ids("/devices", 10, &no_claim).await, every);
    assert_eq!(s.walk("/alerts", 10, &admin).await.len(), 2);
    assert_eq!(quarantined(&s, &admin).await, ["a1", "b1", "not a device"]);
    assert_eq!(
        latest_of(&s, "/latest?ids=a1,b1", &admin).await,
        ["a1", "b1"]
    );
    let (status, body) = s.get(&group_series("B"), &admin).await;
    assert_eq!(status, 200, "{body}");

    // A caller of two sites walks both, page after page.
    let ab = s.token(SITES_AB, "tidemark/read");
    assert_eq!(s.device_ids("/devices", 1, &ab).await, ["a1", "a2", "b1"]);

    // A cursor made for one caller's scope is refused for another.
    let (_, first) = s.get("/devices?limit=1", &s.token(OPERATOR_A, ALL)).await;
    let cursor = first["cursor"].as_str().expect("a second page").to_owned();
    for other in [&ab, &admin, &s.token(VIEWER_B, "tidemark/read")] {
        let (status, body) = s
            .get(&format!("/devices?limit=1&cursor={cursor}"), other)
            .await;
        assert_eq!(
            (
                status,
                body["error"]["message"]
                    .as_str()
                    .map(|m| m.contains("cursor"))
            ),
            (400, Some(true)),
            "{body}"
        );
    }
    let (_, first) = s.get("/alerts?limit=1", &admin).await;
    let cursor = first["cursor"].as_str().expect("a second page").to_owned();
    let (status, _) = s
        .get(&format!("/alerts?limit=1&cursor={cursor}"), &ab)
        .await;
    assert_eq!(status, 400);
}

/// The last two hours of metric `t` over the group `site:<site>`.
fn group_series(site: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!(
        "/groups/series?tag=site:{site}&metric=t&from={}&to={now}",
        now - 7_200_000
    )
}

/// A request as API Gateway would hand it on, with or without a JWT authorizer's claims.
fn gateway_request(path: &str, claims: Option<&[(&str, &str)]>) -> Request {
    use lambda_http::aws_lambda_events::apigw::{
        ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
        ApiGatewayV2httpRequestContext,
    };
    use lambda_http::request::RequestContext;
    let mut ctx = ApiGatewayV2httpRequestContext::default();
    if let Some(claims) = claims {
        let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
        jwt.claims = claims
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        jwt.scopes = Some(vec!["tidemark/read".into()]);
        let mut a = ApiGatewayRequestAuthorizer::default();
        a.jwt = Some(jwt);
        ctx.authorizer = Some(a);
    }
    http::Request::get(path)
        .body(Body::Empty)
        .unwrap()
        .with_request_context(RequestContext::ApiGatewayV2(ctx))
}

#[tokio::test]
async fn under_the_jwt_authorizer_a_request_without_claims_is_refused_and_iam_mode_serves_it() {
    let table = TestTable::new("scoped-noclaims").await;
    let mut jwt = ApiConfig::new(table.name.clone());
    jwt.ui_auth = UiAuth::Jwt(JwtSignIn::default());
    let app = App::new(table.client.clone(), jwt);
    let resp = app.handle(gateway_request("/devices", None)).await;
    assert_eq!(resp.status(), 401);
    let body: Value = match resp.body() {
        Body::Text(t) => serde_json::from_str(t).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(body["error"]["code"], "unauthorized");
    let resp = app
        .handle(gateway_request("/devices", Some(&[("sub", "someone")])))
        .await;
    assert_eq!(resp.status(), 200);
    // The dashboard's files need no token.
    let resp = app.handle(gateway_request("/ui/", None)).await;
    assert_ne!(resp.status(), 401);

    let mut iam = ApiConfig::new(table.name.clone());
    iam.ui_auth = UiAuth::Iam;
    let app = App::new(table.client.clone(), iam);
    let resp = app.handle(gateway_request("/devices", None)).await;
    assert_eq!(
        resp.status(),
        200,
        "IAM auth has no claims and sees the fleet"
    );
}

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_b_viewer_signed_in_at_the_issuer_sees_only_site_b_in_the_dashboard() {
    let s = stack("scoped-dashboard").await;
    let addr = s.addr;
    let (rows, alerts, other, missing) = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 900);
        b.goto(&format!("http://{addr}/ui/#/fleet"));
        b.wait_for("document.querySelector('#oidc')", WAIT);
        b.click("#oidc");
        b.wait_for("document.querySelector('input[name=login]')", WAIT);
        b.type_into("input[name=login]", VIEWER_B_LOGIN);
        b.type_into("input[name=password]", "any password");
        b.click("button[type=submit]");
        b.wait_for(
            "document.querySelector('#fleet tbody tr[data-device=b1]')",
            WAIT,
        );
        b.screenshot(&screenshot_dir().join("scoped-viewer-fleet.png"));
        let rows = b.eval(
            "return [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.device);",
            vec![],
        );
        b.goto(&format!("http://{addr}/ui/#/alerts"));
        b.wait_for(
            "window.tidemark && window.tidemark.view === 'alerts' && \
             document.body.dataset.state === 'ready' && document.querySelector('li[data-alert]')",
            WAIT,
        );
        let alerts = b.eval(
            "return document.querySelector('main').innerText;",
            vec![],
        );
        // Another site's device page reads as a device that does not exist.
        let error_of = |device: &str| {
            b.goto(&format!("http://{addr}/ui/#/device/{device}"));
            b.wait_for(
                &format!(
                    "window.tidemark && window.tidemark.view === 'device' && \
                     document.body.dataset.state === 'ready' && location.hash.endsWith('/{device}') && \
                     window.tidemark.error"
                ),
                WAIT,
            )
        };
        let other = error_of("a1");
        let missing = error_of("zz");
        (rows, alerts, other, missing)
    })
    .await
    .unwrap();
    assert_eq!(rows, json!(["b1"]));
    let alerts = alerts.as_str().unwrap();
    assert!(alerts.contains("b1") && !alerts.contains("a1"), "{alerts}");
    assert_eq!(
        other.as_str().unwrap().replace("a1", "zz"),
        missing.as_str().unwrap(),
        "an out-of-scope device reads as a missing one"
    );
}
