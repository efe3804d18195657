//! A real browser for the page tests: headless Chromium driven through chromedriver's
//! WebDriver protocol (W3C), spoken here directly over HTTP with the few commands the
//! tests use. chromedriver is started for the test on a port of its choosing and stopped
//! with it.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use base64::Engine as _;
use serde_json::{Value, json};

/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A running chromedriver with one headless Chromium session.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver, and every browser process it started, which killing chromedriver
        // alone would leave running.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}

/// The browser binary: Debian's `chromium`, or `PLANWRIGHT_TEST_CHROMIUM`.
fn chromium() -> String {
    std::env::var("PLANWRIGHT_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium `width`×`height` pixels large.
    pub async fn start(width: u32, height: u32) -> Browser {
        use std::os::unix::process::CommandExt as _;
        let mut driver = Command::new("chromedriver")
            .arg("--port=0")
            // A group of its own, so the browser it starts goes with it.
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver is installed (Debian's chromium-driver)");
        let stdout = driver.stdout.take().expect("stdout is piped");
        let port = tokio::task::spawn_blocking(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.expect("chromedriver writes text");
                if let Some(port) = line
                    .split("started successfully on port ")
                    .nth(1)
                    .and_then(|p| p.trim_end_matches('.').trim().parse::<u16>().ok())
                {
                    return port;
                }
            }
            panic!("chromedriver ended before it said where it listens");
        })
        .await
        .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let profile = tempfile::tempdir().unwrap();
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium(),
                    "args": [
                        "--headless=new",
                        // As root (CI), Chromium's own sandbox cannot start.
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--hide-scrollbars",
                        "--force-device-scale-factor=1",
                        format!("--window-size={width},{height}"),
                        format!("--user-data-dir={}", profile.path().display()),
                    ],
                },
            }}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {created}"))
            .to_owned();
        Browser {
            driver,
            base,
            session,
            http,
            _profile: profile,
        }
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method, &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        if answer["value"]["error"].is_string() {
            panic!("WebDriver {path}: {answer}");
        }
        answer["value"].clone()
    }

    pub async fn go(&self, url: &str) {
        self.command(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    pub async fn url(&self) -> String {
        self.command(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The page's HTML as the browser holds it now.
    pub async fn source(&self) -> String {
        self.command(reqwest::Method::GET, "/source", None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The first element `css` selects; the test fails without one.
    pub async fn find(&self, css: &str) -> String {
        let found = self
            .command(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// How many elements `css` selects.
    pub async fn count(&self, css: &str) -> usize {
        self.command(
            reqwest::Method::POST,
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )
        .await
        .as_array()
        .map_or(0, Vec::len)
    }

    /// The text an element shows.
    pub async fn text(&self, css: &str) -> String {
        let element = self.find(css).await;
        self.command(
            reqwest::Method::GET,
            &format!("/element/{element}/text"),
            None,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.command(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.command(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Makes the window `width`×`height` pixels large (what a screenshot shows).
    pub async fn resize(&self, width: u32, height: u32) {
        self.command(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// Saves what the window shows as a PNG.
    pub async fn screenshot(&self, to: &Path) {
        let encoded = self
            .command(reqwest::Method::GET, "/screenshot", None)
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(to, png).unwrap();
    }
}
