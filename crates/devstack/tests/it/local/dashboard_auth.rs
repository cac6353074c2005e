//! The dashboard deployed behind a JWT authorizer, in a real headless Chromium, signing in
//! against a real OpenID Connect provider (`oidc-provider`, started per test by
//! `tidemark_testkit::oidc`) through its own login page. In front of the API function sits
//! the local stack's JWT authorizer (`tidemark_devstack::authorizer`), which checks issuer,
//! audience, signature against the provider's JWKS, expiry and each route's scope as API
//! Gateway does; the page, the authorizer's library checks and the API function are the real
//! ones.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lambda_http::{Body, Request, Response};
use serde_json::{Value, json};
use tidemark_api::{ApiConfig, App, JwtSignIn, UiAuth};
use tidemark_devstack::authorizer::{Authorized, JwtAuthorizer};
use tidemark_devstack::http_api::{HttpHandler, bind, serve};
use tidemark_testkit::TestTable;
use tidemark_testkit::browser::{Browser, screenshot_dir};
use tidemark_testkit::oidc::{AUDIENCE, CLIENT_ID, IssuerOptions, LocalIssuer};
use tokio::sync::watch;

use crate::common;

const WAIT: Duration = Duration::from_secs(30);

/// Records every data call (path, Authorization header, status) on its way through.
struct Recorder<H> {
    inner: H,
    calls: Mutex<Vec<(String, Option<String>, u16)>>,
}

impl<H: HttpHandler> HttpHandler for Recorder<H> {
    async fn handle(&self, req: Request) -> Response<Body> {
        let path = req.uri().path().to_owned();
        let auth = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let resp = self.inner.handle(req).await;
        if !(path == "/ui" || path.starts_with("/ui/")) {
            let status = resp.status().as_u16();
            self.calls.lock().unwrap().push((path, auth, status));
        }
        resp
    }
}

type Front = Recorder<Authorized<App>>;

/// The API behind the authorizer, and (unless `ui` says otherwise) the provider it trusts.
struct Stack {
    front: Arc<Front>,
    addr: SocketAddr,
    issuer: Option<LocalIssuer>,
    table: TestTable,
    stop: watch::Sender<bool>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Page {
    /// A public client at the provider: "Sign in with the issuer".
    SignIn,
    /// No client: the page takes a pasted token.
    Paste,
    Iam,
}

async fn stack(label: &str, page: Page, ttl: u32) -> Stack {
    let table = TestTable::new(label).await;
    let (listener, addr) = bind(0).await.unwrap();
    let issuer = (page != Page::Iam).then(|| {
        let mut o = IssuerOptions::new(format!("http://{addr}/ui/"));
        o.access_ttl_seconds = ttl;
        LocalIssuer::start(&o)
    });
    let mut config = ApiConfig::new(table.name.clone());
    config.ui_auth = match (&issuer, page) {
        (Some(i), _) => UiAuth::Jwt(JwtSignIn {
            issuer: Some(i.issuer.clone()),
            audience: Some(AUDIENCE.into()),
            client_id: (page == Page::SignIn).then(|| CLIENT_ID.into()),
            ..JwtSignIn::default()
        }),
        (None, _) => UiAuth::Iam,
    };
    let scopes = config.scopes.clone();
    let authorizer = JwtAuthorizer::new(
        issuer
            .as_ref()
            .map_or("http://127.0.0.1:9".into(), |i| i.issuer.clone()),
        vec![AUDIENCE.into()],
    );
    let front = Arc::new(Recorder {
        inner: Authorized {
            inner: App::new(table.client.clone(), config),
            authorizer,
            scopes,
        },
        calls: Mutex::new(Vec::new()),
    });
    let (stop, rx) = watch::channel(false);
    tokio::spawn(serve(listener, front.clone(), rx));
    Stack {
        front,
        addr,
        issuer,
        table,
        stop,
    }
}

impl Stack {
    fn issuer(&self) -> &LocalIssuer {
        self.issuer.as_ref().unwrap()
    }

    /// A device and one open alert on it, written to the table as the pipeline would.
    async fn device_with_open_alert(&self, device: &str) -> String {
        let token = self
            .issuer()
            .machine_token("machine", "tidemark/write", None);
        let (status, _) = call(
            self.addr,
            "PUT",
            &format!("/devices/{device}"),
            Some(&token),
            r#"{"name":"Signed in"}"#,
        )
        .await;
        assert_eq!(status, 201);
        let alert = tidemark_testkit::open_alert(device);
        self.table
            .client
            .put_item()
            .table_name(&self.table.name)
            .set_item(Some(tidemark_store::to_item(&alert).unwrap()))
            .send()
            .await
            .unwrap();
        alert.alert_id.to_string()
    }

    async fn alert_state(&self, device: &str) -> String {
        let token = self
            .issuer()
            .machine_token("machine", "tidemark/read", None);
        let (status, body) = call(
            self.addr,
            "GET",
            &format!("/devices/{device}/alerts"),
            Some(&token),
            "",
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body["items"][0]["state"].as_str().unwrap().to_owned()
    }

    fn calls(&self) -> Vec<(String, Option<String>, u16)> {
        self.front.calls.lock().unwrap().clone()
    }
}

/// One request to the stack, with `token` as a bearer token if given.
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, addr.to_string());
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Through the provider's own login page, as `login` (any password).
fn sign_in(b: &Browser, login: &str) {
    b.wait_for("document.querySelector('#oidc')", WAIT);
    b.click("#oidc");
    b.wait_for("document.querySelector('input[name=login]')", WAIT);
    b.type_into("input[name=login]", login);
    b.type_into("input[name=password]", "any password");
    b.click("button[type=submit]");
}

fn wait_drawn(b: &Browser, view: &str) {
    b.wait_for(
        &format!(
            "window.tidemark && window.tidemark.view === '{view}' && \
             document.body.dataset.state === 'ready' && window.tidemark.renders > 0 && \
             !document.querySelector('.signin')"
        ),
        WAIT,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_at_the_issuer_sees_the_fleet_and_acknowledges_an_alert() {
    let s = stack("dash-oidc-op", Page::SignIn, 300).await;
    let alert = s.device_with_open_alert("oidc_dev").await;
    let addr = s.addr;
    let (rows, place, stored) = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 900);
        // The user was on the alerts page when asked to sign in.
        b.goto(&format!("http://{addr}/ui/#/alerts?state=all"));
        sign_in(&b, "operator");
        wait_drawn(&b, "alerts");
        let place = b.eval("return location.search + location.hash;", vec![]);
        b.click(&format!("button[data-ack='{alert}']"));
        b.wait_for(
            &format!(
                "document.querySelector(\"li[data-alert='{alert}']\")?.dataset.state === 'acknowledged'"
            ),
            WAIT,
        );
        b.goto(&format!("http://{addr}/ui/#/fleet"));
        b.wait_for(
            "document.querySelector('#fleet tbody tr[data-device=oidc_dev]')",
            WAIT,
        );
        b.screenshot(&screenshot_dir().join("oidc-fleet.png"));
        let rows = b.eval(
            "return [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.device);",
            vec![],
        );
        // The tokens stay in this tab: sessionStorage, never localStorage.
        let stored = b.eval(
            "return [localStorage.length, JSON.parse(sessionStorage.getItem('tidemark.session') || '{}')];",
            vec![],
        );
        (rows, place, stored)
    })
    .await
    .unwrap();
    assert_eq!(rows, json!(["oidc_dev"]));
    // The code left the URL; the view the user was on did not.
    assert_eq!(place, "#/alerts?state=all");
    assert_eq!(s.alert_state("oidc_dev").await, "acknowledged");
    assert_eq!(
        s.issuer().grants("authorization_code"),
        1,
        "one PKCE exchange"
    );
    assert_eq!(stored[0], 0, "nothing in localStorage: {stored}");
    let session = &stored[1];
    assert!(
        session["access"].is_string() && session["refresh"].is_string(),
        "{session}"
    );
    // The access token, not the ID token: it is for the API and carries its scopes.
    let claims = jwt_claims(session["access"].as_str().unwrap());
    assert_eq!(claims["aud"], AUDIENCE, "{claims}");
    assert!(
        claims["scope"].as_str().unwrap().contains("tidemark/write"),
        "{claims}"
    );
    // Every data call carried that kind of token and the authorizer let each through.
    let calls = s.calls();
    assert!(
        calls.iter().any(|(p, _, _)| p.ends_with("/ack")),
        "{calls:?}"
    );
    for (path, auth, status) in &calls {
        let token = auth.as_deref().and_then(|a| a.strip_prefix("Bearer "));
        assert!(token.is_some(), "{path} went out without a token");
        assert!(*status < 400, "{path}: {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_without_write_reads_every_view_and_is_told_acknowledging_needs_write() {
    let s = stack("dash-oidc-view", Page::SignIn, 300).await;
    let alert = s.device_with_open_alert("viewed_dev").await;
    let addr = s.addr;
    let (refusal, quarantine) = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 900);
        b.goto(&format!("http://{addr}/ui/#/fleet"));
        sign_in(&b, "viewer");
        b.wait_for(
            "document.querySelector('#fleet tbody tr[data-device=viewed_dev]')",
            WAIT,
        );
        b.goto(&format!("http://{addr}/ui/#/alerts"));
        wait_drawn(&b, "alerts");
        b.click(&format!("button[data-ack='{alert}']"));
        let refusal = b.wait_for(
            &format!(
                "(t => t.startsWith('Failed') && t)(document.querySelector(\"button[data-ack='{alert}']\").textContent)"
            ),
            WAIT,
        );
        b.screenshot(&screenshot_dir().join("oidc-viewer-ack-refused.png"));
        // The quarantine holds raw payloads: admin only, and the page says so.
        b.goto(&format!("http://{addr}/ui/#/quarantine"));
        let quarantine = b.wait_for(
            "document.querySelector('[data-missing-scope]')?.dataset.missingScope",
            WAIT,
        );
        // Still signed in, still reading.
        b.goto(&format!("http://{addr}/ui/#/device/viewed_dev"));
        wait_drawn(&b, "device");
        (refusal, quarantine)
    })
    .await
    .unwrap();
    let refusal = refusal.as_str().unwrap();
    assert!(refusal.contains("tidemark/write"), "{refusal}");
    assert_eq!(quarantine, "tidemark/admin");
    assert_eq!(s.alert_state("viewed_dev").await, "open");
    // The refusals were the authorizer's 403s, not sign-in failures.
    let calls = s.calls();
    let refused: Vec<_> = calls.iter().filter(|c| c.2 >= 400).collect();
    assert!(!refused.is_empty());
    assert!(refused.iter().all(|c| c.2 == 403), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_access_token_is_renewed_with_the_refresh_token_in_place() {
    let s = stack("dash-oidc-renew", Page::SignIn, 4).await;
    s.device_with_open_alert("renewed_dev").await;
    let addr = s.addr;
    let first = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 900);
        b.goto(&format!("http://{addr}/ui/#/fleet"));
        sign_in(&b, "operator");
        b.wait_for(
            "document.querySelector('#fleet tbody tr[data-device=renewed_dev]')",
            WAIT,
        );
        let first = b.eval(
            "return JSON.parse(sessionStorage.getItem('tidemark.session')).access;",
            vec![],
        );
        // Past the first token's life: the next view still draws, with a renewed token.
        // (This sleep only lets the 4 s token expire; the page is then waited for.)
        std::thread::sleep(Duration::from_secs(6));
        b.eval("location.hash = '#/alerts'; return null;", vec![]);
        wait_drawn(&b, "alerts");
        let second = b.eval(
            "return JSON.parse(sessionStorage.getItem('tidemark.session')).access;",
            vec![],
        );
        assert_ne!(first, second, "the access token was renewed");
        first
    })
    .await
    .unwrap();
    assert_eq!(
        s.issuer().grants("authorization_code"),
        1,
        "no second sign-in"
    );
    assert!(s.issuer().grants("refresh_token") >= 1);
    // The expired token is refused by the authorizer (no leeway), as by API Gateway.
    let (status, _) = call(s.addr, "GET", "/devices", first.as_str(), "").await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authorizer_refuses_other_audiences_expired_and_forged_tokens_and_missing_scopes() {
    let s = stack("dash-authorizer", Page::Paste, 300).await;
    let i = s.issuer();
    let read = i.machine_token("machine", "tidemark/read", None);
    let addr = s.addr;
    let get =
        |t: Option<String>| async move { call(addr, "GET", "/devices", t.as_deref(), "").await };
    assert_eq!(get(Some(read.clone())).await.0, 200);
    // No token, or not a JWT.
    assert_eq!(get(None).await, (401, json!({"message": "Unauthorized"})));
    assert_eq!(get(Some("not-a-jwt".into())).await.0, 401);
    // Signed by the provider, for another API.
    let other = i.machine_token("machine", "tidemark/read", Some("urn:other:api"));
    assert_eq!(jwt_claims(&other)["aud"], "urn:other:api");
    assert_eq!(get(Some(other)).await.0, 401);
    // Expired (a 1-second token, two seconds later: this sleep only lets it expire).
    let short = i.machine_token("machine-short", "tidemark/read", None);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(get(Some(short)).await.0, 401);
    // A bad signature, and a payload changed under a good one.
    let parts: Vec<&str> = read.split('.').collect();
    let sig = parts[2];
    let flipped = format!(
        "{}{}",
        &sig[..sig.len() - 2],
        if sig.ends_with("AA") { "BB" } else { "AA" }
    );
    assert_eq!(
        get(Some(format!("{}.{}.{flipped}", parts[0], parts[1])))
            .await
            .0,
        401
    );
    let mut claims = jwt_claims(&read);
    claims["scope"] = json!("tidemark/read tidemark/write tidemark/admin");
    let forged = format!("{}.{}.{}", parts[0], b64(&claims.to_string()), parts[2]);
    assert_eq!(get(Some(forged)).await.0, 401);
    // Unsigned.
    let none = format!("{}.{}.", b64(r#"{"alg":"none","typ":"JWT"}"#), parts[1]);
    assert_eq!(get(Some(none)).await.0, 401);
    // A good token without the route's scope: 403, and the function never ran.
    let (status, body) = call(s.addr, "PUT", "/devices/d1", Some(&read), "{}").await;
    assert_eq!((status, body), (403, json!({"message": "Forbidden"})));
    let (status, _) = call(s.addr, "GET", "/quarantine", Some(&read), "").await;
    assert_eq!(status, 403);
    // The catch-all route needs read, as in the template.
    let (status, body) = call(s.addr, "GET", "/nowhere", Some(&read), "").await;
    assert_eq!(status, 404, "{body}");
    // The dashboard's files need nothing.
    let (status, _) = call(s.addr, "GET", "/ui/config.json", None, "").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_the_page_takes_a_pasted_access_token_and_sends_it_on_every_call() {
    let s = stack("dash-paste", Page::Paste, 300).await;
    let token = s
        .issuer()
        .machine_token("machine", "tidemark/read tidemark/write", None);
    let (status, _) = call(
        s.addr,
        "PUT",
        "/devices/auth_dev",
        Some(&token),
        r#"{"name":"Behind the authorizer"}"#,
    )
    .await;
    assert_eq!(status, 201);
    s.front.calls.lock().unwrap().clear();
    let (addr, issuer, pasted) = (s.addr, s.issuer().issuer.clone(), token.clone());
    let rows = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 800);
        b.goto(&format!("http://{addr}/ui/"));
        // Before any token: the sign-in form, naming the issuer; no redirect offered.
        b.wait_for("document.querySelector('.signin textarea')", WAIT);
        let text = b.eval(
            "return document.querySelector('.signin').innerText;",
            vec![],
        );
        assert!(text.as_str().unwrap().contains(&issuer), "{text}");
        assert_eq!(
            b.eval("return !!document.querySelector('#oidc');", vec![]),
            json!(false)
        );
        // A token the authorizer refuses: the form again, with the API's answer.
        b.type_into(".signin textarea", "not-a-valid-token");
        b.click(".signin button[type=submit]");
        b.wait_for(
            "document.querySelector('.signin .error')?.innerText.includes('401')",
            WAIT,
        );
        b.type_into(".signin textarea", &pasted);
        b.click(".signin button[type=submit]");
        b.wait_for(
            "document.querySelector('#fleet tbody tr[data-device=auth_dev]')",
            WAIT,
        );
        b.screenshot(&screenshot_dir().join("jwt-fleet.png"));
        let rows = b.eval(
            "return [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.device);",
            vec![],
        );
        // Signing out forgets the token and asks again.
        b.click("#signout");
        b.wait_for("document.querySelector('.signin textarea')", WAIT);
        let kept = b.eval("return sessionStorage.getItem('tidemark.session');", vec![]);
        assert_eq!(kept, Value::Null);
        rows
    })
    .await
    .unwrap();
    assert_eq!(rows, json!(["auth_dev"]));
    let calls = s.calls();
    let bearer = |c: &(String, Option<String>, u16)| c.1.as_deref().map(str::to_owned);
    let first_good = calls
        .iter()
        .position(|c| bearer(c) == Some(format!("Bearer {token}")))
        .expect("the right token was sent");
    assert!(
        calls[..first_good]
            .iter()
            .all(|c| bearer(c).as_deref() == Some("Bearer not-a-valid-token") && c.2 == 401),
        "no data call went out without a token: {calls:?}"
    );
    assert!(
        calls[first_good..]
            .iter()
            .all(|c| bearer(c) == Some(format!("Bearer {token}")) && c.2 == 200),
        "every data call after sign-in carried the token: {calls:?}"
    );
    let paths: Vec<&str> = calls[first_good..].iter().map(|c| c.0.as_str()).collect();
    assert!(
        paths.contains(&"/devices") && paths.contains(&"/latest"),
        "{paths:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_iam_auth_only_the_page_explains_how_to_reach_it_and_reads_nothing() {
    let s = stack("dash-iam", Page::Iam, 300).await;
    let addr = s.addr;
    let text = tokio::task::spawn_blocking(move || {
        let (_one, b) = common::browser(1280, 800);
        b.goto(&format!("http://{addr}/ui/"));
        let text = b.wait_for(
            "document.body.dataset.state === 'ready' && document.querySelector('main').innerText",
            WAIT,
        );
        b.screenshot(&screenshot_dir().join("iam-only.png"));
        text
    })
    .await
    .unwrap();
    let text = text.as_str().unwrap();
    assert!(
        text.contains("IAM auth") && text.contains("JwtIssuer") && text.contains("make run"),
        "{text}"
    );
    assert!(s.calls().is_empty());
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

fn jwt_claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}
