//! The dashboard's static files as the API function serves them under `/ui/`, through HTTP
//! API (payload v2) events as API Gateway sends them, stage prefix included. (The page
//! itself is driven in a real browser by `crates/devstack/tests/it/local/dashboard.rs`.)

use http::header;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tidemark_api::memory::MemoryStore;
use tidemark_api::{ApiConfig, App, JwtSignIn, UiAuth, ui};

fn request(method: &str, raw_path: &str, stage: &str, headers: Value) -> lambda_http::Request {
    routed(method, raw_path, stage, headers, "GET /ui/{proxy+}")
}

fn routed(
    method: &str,
    raw_path: &str,
    stage: &str,
    headers: Value,
    route_key: &str,
) -> lambda_http::Request {
    let event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": raw_path,
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012", "apiId": "abc", "domainName": "abc.example",
            "domainPrefix": "abc", "requestId": "r", "routeKey": route_key,
            "stage": stage, "time": "20/Apr/2026:15:00:00 +0000", "timeEpoch": 1776697200000u64,
            "http": {"method": method, "path": raw_path, "protocol": "HTTP/1.1",
                     "sourceIp": "203.0.113.10", "userAgent": "test"}
        },
        "isBase64Encoded": false
    });
    lambda_http::request::from_str(&event.to_string()).expect("a valid HTTP API event")
}

fn app(auth: UiAuth) -> App<MemoryStore> {
    let mut config = ApiConfig::new("t");
    config.ui_auth = auth;
    App::with_store(MemoryStore::new(), config)
}

fn body(resp: &lambda_http::Response<lambda_http::Body>) -> String {
    String::from_utf8_lossy(resp.body().as_ref()).into_owned()
}

#[tokio::test]
async fn every_embedded_file_is_served_with_its_type_and_no_auth_header_needed() {
    let app = app(UiAuth::None);
    for asset in ui::ASSETS {
        let resp = app
            .handle(request(
                "GET",
                &format!("/prod/ui/{}", asset.name),
                "prod",
                json!({}),
            ))
            .await;
        assert_eq!(resp.status(), 200, "{}", asset.name);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], asset.content_type);
        assert_eq!(body(&resp), asset.body);
        assert!(
            resp.headers()[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
    }
}

#[tokio::test]
async fn the_index_answers_ui_slash_and_ui_without_slash_redirects_relative_to_the_stage() {
    let app = app(UiAuth::None);
    let index = app
        .handle(request("GET", "/prod/ui/", "prod", json!({})))
        .await;
    assert_eq!(index.status(), 200);
    assert!(body(&index).contains("<title>Tidemark</title>"));
    let bare = app
        .handle(request("GET", "/prod/ui", "prod", json!({})))
        .await;
    assert_eq!(bare.status(), 308);
    // Relative: /prod/ui + "ui/" resolves to /prod/ui/.
    assert_eq!(bare.headers()[header::LOCATION], "ui/");
}

#[tokio::test]
async fn an_unchanged_file_is_a_304_for_its_etag() {
    let app = app(UiAuth::None);
    let first = app
        .handle(request("GET", "/ui/app.js", "$default", json!({})))
        .await;
    let etag = first.headers()[header::ETAG].to_str().unwrap().to_owned();
    let again = app
        .handle(request(
            "GET",
            "/ui/app.js",
            "$default",
            json!({"if-none-match": etag}),
        ))
        .await;
    assert_eq!(again.status(), 304);
    assert!(body(&again).is_empty());
}

#[tokio::test]
async fn unknown_files_are_404_and_other_methods_405_as_json() {
    let app = app(UiAuth::None);
    let missing = app
        .handle(request("GET", "/ui/secret.txt", "$default", json!({})))
        .await;
    assert_eq!(missing.status(), 404);
    let v: Value = serde_json::from_str(&body(&missing)).unwrap();
    assert_eq!(v["error"]["code"], "not_found");
    let post = app
        .handle(request("POST", "/ui/app.js", "$default", json!({})))
        .await;
    assert_eq!(post.status(), 405);
    assert_eq!(post.headers()[header::ALLOW], "GET, HEAD");
}

#[tokio::test]
async fn the_page_is_told_which_auth_the_deployment_uses() {
    for (auth, want) in [
        (UiAuth::None, json!({"auth": "none", "refreshSeconds": 5})),
        (UiAuth::Iam, json!({"auth": "iam", "refreshSeconds": 30})),
        (
            UiAuth::Jwt(JwtSignIn {
                issuer: Some("https://issuer.example/".into()),
                audience: Some("urn:tidemark:api".into()),
                client_id: Some("dash".into()),
                ..JwtSignIn::default()
            }),
            // The page asks for the API's scopes by the deployment's names, never only
            // `openid` (whose token carries no API scope).
            json!({"auth": "jwt", "issuer": "https://issuer.example/", "clientId": "dash",
                   "audience": "urn:tidemark:api",
                   "scopes": {"read": "tidemark/read", "write": "tidemark/write",
                              "admin": "tidemark/admin"},
                   "requestScopes": "openid tidemark/read tidemark/write",
                   "refreshSeconds": 30}),
        ),
    ] {
        let resp = app(auth)
            .handle(request("GET", "/ui/config.json", "$default", json!({})))
            .await;
        assert_eq!(resp.status(), 200);
        let got: Value = serde_json::from_str(&body(&resp)).unwrap();
        assert_eq!(got, want);
    }
}

#[test]
fn every_file_the_page_references_is_embedded() {
    let names: Vec<&str> = ui::ASSETS.iter().map(|a| a.name).collect();
    for asset in ui::ASSETS
        .iter()
        .filter(|a| a.name.ends_with(".html") || a.name.ends_with(".js"))
    {
        if asset.name.starts_with("vendor/") {
            continue;
        }
        for quote in ['"', '\''] {
            for part in asset.body.split(quote).skip(1).step_by(2) {
                let local = part.starts_with("./") || part.starts_with("vendor/");
                let file = part.trim_start_matches("./");
                if local
                    && (file.ends_with(".js") || file.ends_with(".css") || file.contains("LICENSE"))
                {
                    assert!(
                        names.contains(&file),
                        "{} references {file}, not embedded",
                        asset.name
                    );
                }
            }
        }
    }
}

#[test]
fn the_vendored_uplot_is_the_pinned_release_with_its_licence() {
    let hex = |s: &str| -> String {
        Sha256::digest(s.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let file = |n: &str| ui::ASSETS.iter().find(|a| a.name == n).unwrap().body;
    assert_eq!(
        hex(file("vendor/uPlot.iife.min.js")),
        "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f"
    );
    assert_eq!(
        hex(file("vendor/uPlot.min.css")),
        "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04"
    );
    assert!(file("vendor/LICENSE.uPlot").contains("Leon Sorokin"));
}

#[tokio::test]
async fn a_request_on_the_unauthenticated_dashboard_routes_never_reaches_data() {
    let app = app(UiAuth::Iam);
    // A path API Gateway matched to `GET /ui/{proxy+}` whose segments decode to something
    // else: answered as a missing file, never routed to the data handlers.
    for raw in ["/ui%2F..%2Fdevices", "/ui%2Fdevices", "/devices"] {
        let resp = app
            .handle(routed(
                "GET",
                raw,
                "$default",
                json!({}),
                "GET /ui/{proxy+}",
            ))
            .await;
        assert_eq!(resp.status(), 404, "{raw}");
        let v: Value = serde_json::from_str(&body(&resp)).unwrap();
        assert_eq!(v["error"]["code"], "not_found", "{raw}");
    }
}

#[tokio::test]
async fn an_oidc_sign_in_lets_the_page_connect_to_the_issuer_and_its_token_endpoint_only() {
    let csp = |auth: UiAuth| async move {
        let resp = app(auth)
            .handle(request("GET", "/ui/", "$default", json!({})))
            .await;
        let policy = resp.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        policy
            .split(';')
            .map(str::trim)
            .find_map(|d| d.strip_prefix("connect-src "))
            .unwrap()
            .to_owned()
    };
    assert_eq!(csp(UiAuth::None).await, "'self'");
    let pasted = JwtSignIn {
        issuer: Some("https://issuer.example/pool".into()),
        ..JwtSignIn::default()
    };
    assert_eq!(csp(UiAuth::Jwt(pasted.clone())).await, "'self'");
    let oidc = JwtSignIn {
        client_id: Some("dash".into()),
        ..pasted
    };
    assert_eq!(
        csp(UiAuth::Jwt(oidc.clone())).await,
        "'self' https://issuer.example"
    );
    // Cognito: discovery at the issuer, the token endpoint on the user pool's domain.
    let cognito = JwtSignIn {
        token_origin: Some("https://fleet.auth.eu-west-1.amazoncognito.com".into()),
        ..oidc
    };
    assert_eq!(
        csp(UiAuth::Jwt(cognito)).await,
        "'self' https://issuer.example https://fleet.auth.eu-west-1.amazoncognito.com"
    );
}
