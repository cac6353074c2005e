//! A real headless Chromium, driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`, installed by `scripts/browser.sh` when missing).
//!
//! The client is plain HTTP/1.1 over a `TcpStream` to the chromedriver this harness starts
//! on a free loopback port: the few WebDriver commands a dashboard test needs (navigate,
//! execute script, find and click, screenshot, window size) are JSON requests, not worth a
//! crate. Nothing of the browser is stubbed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::{unique_name, workspace_root};

/// The flags the brief for running Chromium as root in a container asks for.
const CHROME_ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// One browser session; the driver process and the profile go away on drop.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    profile: PathBuf,
}

/// Installs the browser when missing (`scripts/browser.sh`) and returns chromedriver's path.
fn driver_path() -> String {
    let out = Command::new("bash")
        .arg(workspace_root().join("scripts/browser.sh"))
        .output()
        .expect("run scripts/browser.sh");
    assert!(
        out.status.success(),
        "scripts/browser.sh could not provide chromium and chromedriver:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// One HTTP/1.1 exchange (`Connection: close`); returns the status and the JSON body.
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let payload = body.map(Value::to_string).unwrap_or_default();
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(120))).ok();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    s.write_all(req.as_bytes()).expect("send to chromedriver");
    // chromedriver keeps the connection open whatever we ask: read the head, then exactly
    // the body its Content-Length (or chunked encoding) announces.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let split = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut buf).expect("read from chromedriver");
        assert!(n > 0, "chromedriver closed the connection early");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let mut body = raw[split + 4..].to_vec();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = head.contains("transfer-encoding: chunked");
    loop {
        let done = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.windows(5).any(|w| w == b"0\r\n\r\n"),
            None => false,
        };
        if done {
            break;
        }
        let n = s.read(&mut buf).expect("read from chromedriver");
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    if chunked {
        body = dechunk(&body);
    }
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (status, json)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a fresh profile.
    pub fn start(width: u32, height: u32) -> Browser {
        let driver_bin = driver_path();
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {driver_bin}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(addr).is_err() {
            if Instant::now() > deadline {
                let _ = driver.kill();
                panic!("chromedriver did not listen on {addr}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Chromium now and then exits while starting when several tests start it at once
        // ("session not created: Chrome instance exited"): a fresh profile and another try.
        let mut attempt = 0;
        let (session, profile) = loop {
            attempt += 1;
            let profile = std::env::temp_dir().join(unique_name("tidemark-chromium"));
            let mut args: Vec<String> = CHROME_ARGS.iter().map(|s| s.to_string()).collect();
            args.push(format!("--user-data-dir={}", profile.display()));
            args.push(format!("--window-size={width},{height}"));
            let mut options = json!({ "args": args });
            if let Ok(p) = which("chromium") {
                options["binary"] = json!(p);
            }
            let (status, body) = http(
                addr,
                "POST",
                "/session",
                Some(&json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": options,
                }}})),
            );
            if let Some(session) = body["value"]["sessionId"].as_str() {
                break (session.to_owned(), profile);
            }
            let _ = std::fs::remove_dir_all(&profile);
            if attempt >= 3 {
                let _ = driver.kill();
                let _ = driver.wait();
                panic!("no WebDriver session after {attempt} tries ({status}): {body}");
            }
            std::thread::sleep(Duration::from_millis(500 * attempt));
        };
        let b = Browser {
            driver,
            addr,
            session,
            profile,
        };
        b.set_size(width, height);
        b
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let full = format!("/session/{}{path}", self.session);
        let (status, v) = http(self.addr, method, &full, body.as_ref());
        assert!(
            status == 200,
            "WebDriver {method} {path} failed ({status}): {v}"
        );
        v["value"].clone()
    }

    /// The viewport's outer size, e.g. a laptop's or a phone's.
    pub fn set_size(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Polls `expr` (a JS expression) until it is truthy; returns its value.
    pub fn wait_for(&self, expr: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(&format!("return ({expr});"), vec![]);
            let truthy =
                !matches!(v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                let state = self.eval(
                    "return {hash: location.hash, state: document.body.dataset.state, \
                     error: window.tidemark && window.tidemark.error, \
                     text: document.body.innerText.slice(0, 500)};",
                    vec![],
                );
                panic!("timed out waiting for {expr}; page: {state}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks the first element matching a CSS selector, as a user would (WebDriver click:
    /// scrolled into view, hit-tested, real mouse events).
    pub fn click(&self, css: &str) {
        let id = self.element(css);
        self.cmd("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    /// Types `text` into the first element matching a CSS selector (WebDriver send keys).
    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        );
    }

    fn element(&self, css: &str) -> String {
        let found = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// Saves a PNG of the viewport, creating the folder.
    pub fn screenshot(&self, path: &Path) {
        let b64 = self.cmd("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap_or_default())
            .expect("a base64 PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the screenshot folder");
        }
        std::fs::write(path, png).expect("write the screenshot");
    }
}

/// Where the tests put screenshots for people to look at: `target/dashboard/`.
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("dashboard")
}

fn which(bin: &str) -> Result<String, ()> {
    let out = Command::new("bash")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .map_err(|_| ())?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !p.is_empty() {
        Ok(p)
    } else {
        Err(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
