//! A headless Chromium driven over the W3C WebDriver protocol by the real `chromedriver`
//! (Debian's `chromium-driver`), for the web view's browser test and its render benchmark.
//!
//! Why not a WebDriver client crate: the test needs six JSON calls over HTTP/1.1 plus
//! chromedriver's browser-log endpoint (`/se/log`, outside W3C), and `fantoccini`/`thirtyfour`
//! would add an HTTP client stack and the `webdriver` crate (ICU segmenter included) to the
//! workspace's build on a 2-core machine for those six calls.
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{eventually, free_port};

/// A chromedriver process with one headless Chromium session.
pub struct Browser {
    driver: Option<Child>,
    addr: String,
    session: String,
}

/// The chromedriver binary: `LOADSTAR_CHROMEDRIVER`, else `chromedriver` on PATH.
fn chromedriver() -> PathBuf {
    std::env::var_os("LOADSTAR_CHROMEDRIVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("chromedriver"))
}

/// The browser binary: `LOADSTAR_CHROMIUM`, else Debian's real binary behind the
/// `/usr/bin/chromium` wrapper script.
fn chromium() -> PathBuf {
    std::env::var_os("LOADSTAR_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/chromium/chromium"))
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a `width`×`height` window,
    /// recording the browser console at every level.
    pub async fn start(width: u32, height: u32) -> Result<Browser> {
        let port = free_port()?;
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (Debian: apt-get install chromium chromium-driver; \
                     tests/e2e/install-deps.sh installs both)",
                    chromedriver().display()
                )
            })?;
        let mut b = Browser {
            driver: Some(driver),
            addr: format!("127.0.0.1:{port}"),
            session: String::new(),
        };
        let addr = b.addr.clone();
        eventually("chromedriver ready", Duration::from_secs(20), || {
            let addr = addr.clone();
            async move {
                Ok(match request(&addr, "GET", "/status", None).await {
                    Ok(v) if v["value"]["ready"] == json!(true) => Ok(()),
                    Ok(v) => Err(v.to_string()),
                    Err(e) => Err(e.to_string()),
                })
            }
        })
        .await?;
        let browser = chromium();
        if !browser.exists() {
            bail!(
                "{} does not exist (install Debian's chromium, or set LOADSTAR_CHROMIUM)",
                browser.display()
            );
        }
        let caps = json!({
            "capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": browser,
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--no-first-run",
                             "--disable-background-networking", "--disable-component-update",
                             "--disable-sync", format!("--window-size={width},{height}")],
                },
                "goog:loggingPrefs": {"browser": "ALL"},
            }}
        });
        let v = request(&b.addr, "POST", "/session", Some(caps))
            .await
            .context("creating a Chromium session")?;
        b.session = v["value"]["sessionId"]
            .as_str()
            .with_context(|| format!("no sessionId in {v}"))?
            .to_string();
        Ok(b)
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let v = request(
            &self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
        .await?;
        if let Some(err) = v["value"]["error"].as_str() {
            bail!(
                "WebDriver {method} {path}: {err}: {}",
                v["value"]["message"].as_str().unwrap_or_default()
            );
        }
        Ok(v["value"].clone())
    }

    /// Navigates to `url` (returns when the page's load event fired).
    pub async fn goto(&self, url: &str) -> Result<()> {
        self.call("POST", "/url", Some(json!({ "url": url })))
            .await
            .map(|_| ())
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub async fn eval(&self, script: &str) -> Result<Value> {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// The browser console since the last call: (level, message), e.g. `("SEVERE", …)`.
    pub async fn console(&self) -> Result<Vec<(String, String)>> {
        let v = self
            .call("POST", "/se/log", Some(json!({ "type": "browser" })))
            .await?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["level"].as_str().unwrap_or_default().to_string(),
                            e["message"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Result<Vec<u8>> {
        let v = self.call("GET", "/screenshot", None).await?;
        let b64 = v.as_str().context("screenshot is not a string")?;
        Ok(base64::engine::general_purpose::STANDARD.decode(b64)?)
    }

    /// Ends the session (closing Chromium) and stops chromedriver.
    pub async fn quit(mut self) {
        let _ = request(
            &self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        )
        .await;
        self.kill();
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.driver.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One HTTP/1.1 request to chromedriver (`Connection: close`), its JSON answer.
async fn request(addr: &str, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    let payload = tokio::time::timeout(Duration::from_secs(60), read_answer(&mut s))
        .await
        .with_context(|| format!("{method} {path}: no answer within 60 s"))??;
    serde_json::from_str(&payload).with_context(|| {
        format!(
            "{method} {path}: not JSON: {}",
            &payload[..payload.len().min(200)]
        )
    })
}

/// Reads one answer: headers, then a `Content-Length` body, a chunked body, or (neither)
/// everything until the server closes (chromedriver keeps connections open otherwise).
async fn read_answer(s: &mut tokio::net::TcpStream) -> Result<String> {
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let header_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).await?;
        if n == 0 {
            bail!("connection closed before the headers ended");
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let headers = String::from_utf8_lossy(&raw[..header_end]).to_ascii_lowercase();
    let length = headers.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    let chunked = headers.contains("transfer-encoding: chunked");
    loop {
        let body = &raw[header_end..];
        let done = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.windows(5).any(|w| w == b"0\r\n\r\n"),
            None => false,
        };
        if done {
            break;
        }
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let body = String::from_utf8_lossy(&raw[header_end..]).into_owned();
    if chunked { dechunk(&body) } else { Ok(body) }
}

/// Decodes a chunked HTTP/1.1 body.
fn dechunk(mut s: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").context("chunk size line")?;
        let n = usize::from_str_radix(size.trim(), 16).context("chunk size")?;
        if n == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..n).context("short chunk")?);
        s = rest.get(n + 2..).context("chunk terminator")?;
    }
}
