//! The dashboard deployed behind auth, in a real headless Chromium. Locally there is no
//! authorizer, so a gate in front of the API function plays API Gateway's part: `/ui` routes
//! pass without auth (as in `template.yaml`), every other route needs the one valid bearer
//! token or gets API Gateway's 401; a minimal OpenID Connect issuer on another loopback port
//! plays the identity provider. The page and the API function are the real ones.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lambda_http::{Body, Request, Response};
use tidemark_api::{ApiConfig, App, UiAuth};
use tidemark_devstack::http_api::{HttpHandler, bind, serve};
use tidemark_testkit::TestTable;
use tidemark_testkit::browser::{Browser, screenshot_dir};
use tokio::sync::watch;

const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.dGVzdA.c2ln";

/// API Gateway with a JWT authorizer, reduced to what the page can observe.
struct Gate {
    app: App,
    /// (path, Authorization header) of every request that reached a data route.
    data_calls: Mutex<Vec<(String, Option<String>)>>,
}

impl HttpHandler for Gate {
    async fn handle(&self, req: Request) -> Response<Body> {
        let path = req.uri().path().to_owned();
        if path == "/ui" || path.starts_with("/ui/") {
            return self.app.handle(req).await;
        }
        let auth = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.data_calls.lock().unwrap().push((path, auth.clone()));
        if auth.as_deref() != Some(&format!("Bearer {TOKEN}")) {
            return Response::builder()
                .status(401)
                .header("content-type", "application/json")
                .body(Body::Text(r#"{"message":"Unauthorized"}"#.into()))
                .unwrap();
        }
        self.app.handle(req).await
    }
}

async fn put_device(addr: std::net::SocketAddr, id: &str, body: &str) -> u16 {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::put(format!("/devices/{id}"))
        .header(http::header::HOST, addr.to_string())
        .header(http::header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    status
}

/// An identity provider reduced to the authorization code flow with PKCE (S256).
#[derive(Default)]
struct Issuer {
    addr: OnceLock<SocketAddr>,
    /// (code challenge, redirect URI) of the pending sign-in.
    pending: Mutex<Option<(String, String)>>,
    /// Token requests whose code verifier matched the challenge.
    exchanged: Mutex<u32>,
}

const CLIENT_ID: &str = "dash-client";
const CODE: &str = "the-code";

fn form(s: &str) -> std::collections::HashMap<String, String> {
    let dec = |x: &str| tidemark_api::request::percent_decode(x, true).unwrap_or_default();
    s.split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (dec(k), dec(v)))
        .collect()
}

fn json_reply(status: u16, body: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("access-control-allow-origin", "*")
        .body(Body::Text(body.to_string()))
        .unwrap()
}

impl HttpHandler for Issuer {
    async fn handle(&self, req: Request) -> Response<Body> {
        use base64::Engine;
        use sha2::Digest;
        let base = format!("http://{}", self.addr.get().unwrap());
        let q = form(req.uri().query().unwrap_or_default());
        match (req.method().as_str(), req.uri().path()) {
            ("GET", "/.well-known/openid-configuration") => json_reply(
                200,
                serde_json::json!({"issuer": base, "authorization_endpoint": format!("{base}/authorize"),
                                   "token_endpoint": format!("{base}/token")}),
            ),
            ("GET", "/authorize") => {
                assert_eq!(q["client_id"], CLIENT_ID);
                assert_eq!(q["response_type"], "code");
                assert_eq!(q["code_challenge_method"], "S256");
                *self.pending.lock().unwrap() =
                    Some((q["code_challenge"].clone(), q["redirect_uri"].clone()));
                Response::builder()
                    .status(302)
                    .header(
                        "location",
                        format!("{}?code={CODE}&state={}", q["redirect_uri"], q["state"]),
                    )
                    .body(Body::Empty)
                    .unwrap()
            }
            ("POST", "/token") => {
                let f = form(&String::from_utf8_lossy(req.body().as_ref()));
                let pending = self.pending.lock().unwrap().clone();
                let digest = sha2::Sha256::digest(f["code_verifier"].as_bytes());
                let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
                let ok = f["grant_type"] == "authorization_code"
                    && f["code"] == CODE
                    && f["client_id"] == CLIENT_ID
                    && pending == Some((challenge, f["redirect_uri"].clone()));
                if !ok {
                    return json_reply(400, serde_json::json!({"error": "invalid_grant"}));
                }
                *self.exchanged.lock().unwrap() += 1;
                json_reply(
                    200,
                    serde_json::json!({"access_token": TOKEN, "token_type": "Bearer"}),
                )
            }
            _ => json_reply(404, serde_json::json!({"error": "not_found"})),
        }
    }
}

async fn serve_gate(
    auth: UiAuth,
) -> (
    Arc<Gate>,
    std::net::SocketAddr,
    watch::Sender<bool>,
    TestTable,
) {
    let table = TestTable::new("dash-auth").await;
    let mut config = ApiConfig::new(table.name.clone());
    config.ui_auth = auth;
    let gate = Arc::new(Gate {
        app: App::new(table.client.clone(), config),
        data_calls: Mutex::new(Vec::new()),
    });
    let (listener, addr) = bind(0).await.unwrap();
    let (stop, rx) = watch::channel(false);
    tokio::spawn(serve(listener, gate.clone(), rx));
    (gate, addr, stop, table)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_jwt_authorizer_the_page_asks_for_a_token_and_sends_it_on_every_data_call() {
    let (gate, addr, stop, _table) = serve_gate(UiAuth::Jwt {
        issuer: Some("https://issuer.example/".into()),
        client_id: None,
    })
    .await;
    assert_eq!(
        put_device(addr, "auth_dev", r#"{"name":"Behind the gate"}"#).await,
        201
    );
    gate.data_calls.lock().unwrap().clear();

    let rows = tokio::task::spawn_blocking(move || {
        let b = Browser::start(1280, 800);
        b.goto(&format!("http://{addr}/ui/"));
        // Before any token: the sign-in form, naming the issuer.
        b.wait_for(
            "document.querySelector('.signin textarea')",
            Duration::from_secs(30),
        );
        let text = b.eval(
            "return document.querySelector('.signin').innerText;",
            vec![],
        );
        assert!(
            text.as_str().unwrap().contains("https://issuer.example/"),
            "{text}"
        );
        // A token the authorizer refuses: the form again, with the API's answer.
        b.type_into(".signin textarea", "not-a-valid-token");
        b.click(".signin button[type=submit]");
        b.wait_for(
            "document.querySelector('.signin .error')?.innerText.includes('401')",
            Duration::from_secs(30),
        );
        // The right token: the fleet, read through the gate.
        b.type_into(".signin textarea", TOKEN);
        b.click(".signin button[type=submit]");
        b.wait_for(
            "document.querySelector('#fleet tbody tr[data-device=auth_dev]')",
            Duration::from_secs(30),
        );
        b.screenshot(&screenshot_dir().join("jwt-fleet.png"));
        let rows = b.eval(
            "return [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.device);",
            vec![],
        );
        // Signing out forgets the token and asks again.
        b.click("#signout");
        b.wait_for(
            "document.querySelector('.signin textarea')",
            Duration::from_secs(30),
        );
        let kept = b.eval("return sessionStorage.getItem('tidemark.token');", vec![]);
        assert_eq!(kept, serde_json::Value::Null);
        rows
    })
    .await
    .unwrap();
    assert_eq!(rows, serde_json::json!(["auth_dev"]));

    let calls = gate.data_calls.lock().unwrap().clone();
    let refused: Vec<_> = calls
        .iter()
        .filter(|(_, a)| a.as_deref() == Some("Bearer not-a-valid-token"))
        .collect();
    assert!(!refused.is_empty(), "the wrong token was tried: {calls:?}");
    let first_good = calls
        .iter()
        .position(|(_, a)| a.as_deref() == Some(&format!("Bearer {TOKEN}")))
        .expect("the right token was sent");
    assert!(
        calls[..first_good]
            .iter()
            .all(|(_, a)| a.as_deref() == Some("Bearer not-a-valid-token")),
        "no data call went out without a token: {calls:?}"
    );
    assert!(
        calls[first_good..]
            .iter()
            .all(|(_, a)| a.as_deref() == Some(&format!("Bearer {TOKEN}"))),
        "every data call after sign-in carried the token: {calls:?}"
    );
    let paths: Vec<&str> = calls[first_good..]
        .iter()
        .map(|(p, _)| p.as_str())
        .collect();
    assert!(
        paths.contains(&"/devices") && paths.contains(&"/latest"),
        "{paths:?}"
    );
    stop.send(true).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_iam_auth_only_the_page_explains_how_to_reach_it_and_reads_nothing() {
    let (gate, addr, stop, _table) = serve_gate(UiAuth::Iam).await;
    let text = tokio::task::spawn_blocking(move || {
        let b = Browser::start(1280, 800);
        b.goto(&format!("http://{addr}/ui/"));
        let text = b.wait_for(
            "document.body.dataset.state === 'ready' && document.querySelector('main').innerText",
            Duration::from_secs(30),
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
    assert!(gate.data_calls.lock().unwrap().is_empty());
    stop.send(true).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_oidc_client_the_page_signs_in_by_redirect_with_pkce_and_uses_the_token() {
    let issuer = Arc::new(Issuer::default());
    let (listener, idp) = bind(0).await.unwrap();
    issuer.addr.set(idp).unwrap();
    let (stop_idp, rx) = watch::channel(false);
    tokio::spawn(serve(listener, issuer.clone(), rx));
    let (gate, addr, stop, _table) = serve_gate(UiAuth::Jwt {
        issuer: Some(format!("http://{idp}")),
        client_id: Some(CLIENT_ID.into()),
    })
    .await;
    assert_eq!(
        put_device(addr, "oidc_dev", r#"{"name":"Signed in"}"#).await,
        201
    );
    gate.data_calls.lock().unwrap().clear();

    let (rows, url) = tokio::task::spawn_blocking(move || {
        let b = Browser::start(1280, 800);
        b.goto(&format!("http://{addr}/ui/#/fleet?status=active"));
        b.wait_for("document.querySelector('#oidc')", Duration::from_secs(30));
        b.click("#oidc");
        b.wait_for(
            "document.querySelector('#fleet tbody tr[data-device=oidc_dev]')",
            Duration::from_secs(30),
        );
        b.screenshot(&screenshot_dir().join("oidc-fleet.png"));
        (
            b.eval(
                "return [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.device);",
                vec![],
            ),
            b.eval("return location.search + location.hash;", vec![]),
        )
    })
    .await
    .unwrap();
    assert_eq!(rows, serde_json::json!(["oidc_dev"]));
    // The code left the URL, the view the user asked for did not.
    assert_eq!(url, "#/fleet?status=active");
    assert_eq!(
        *issuer.exchanged.lock().unwrap(),
        1,
        "one PKCE-verified exchange"
    );
    let calls = gate.data_calls.lock().unwrap().clone();
    assert!(!calls.is_empty());
    assert!(
        calls
            .iter()
            .all(|(_, a)| a.as_deref() == Some(&format!("Bearer {TOKEN}"))),
        "every data call carried the issued token: {calls:?}"
    );
    stop.send(true).unwrap();
    stop_idp.send(true).unwrap();
}
