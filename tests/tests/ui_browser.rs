//! The web view in a real headless Chromium: a live standalone scorer with simulated agents
//! and a few `Score` calls; the page must load without console errors, draw a tile per node,
//! list the decisions, open a node's windows and a decision's per-plugin scores.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`tests/e2e/install-deps.sh`), hence
//! ignored in plain `cargo test`; `.ci/run` runs it. `LOADSTAR_UI_NODES` sets the simulated
//! node count (default 40), `LOADSTAR_UI_SCREENSHOT` where the PNG goes, and the figures it
//! prints (first paint, first frame of tiles) are what `bench/ui-render.sh` records.
#![allow(missing_docs)]

mod e2e_support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e_support::webdriver::Browser;
use e2e_support::{Agents, eventually, free_port, load};
use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;

/// The scorer binary: `LOADSTAR_E2E_SCORER_BIN`, else this workspace's debug build.
fn scorer_bin() -> Result<PathBuf> {
    let p = std::env::var_os("LOADSTAR_E2E_SCORER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/loadstar-scorer")
        });
    if !p.exists() {
        bail!(
            "{} is missing: build it first (cargo build -p loadstar-scorer)",
            p.display()
        );
    }
    Ok(p)
}

struct Standalone(std::process::Child);

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn describe(name: &str, cpu: &str) -> pb::ScoreRequest {
    pb::ScoreRequest {
        pod: Some(pb::score_request::Pod::Description(pb::PodDescription {
            namespace: "shop".into(),
            name: name.into(),
            requests: [("cpu".to_string(), cpu.to_string())].into(),
            ..Default::default()
        })),
        limit: 5,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromium-driver (tests/e2e/install-deps.sh); run by .ci/run"]
async fn the_web_view_shows_live_nodes_and_decisions_in_chromium() -> Result<()> {
    let nodes: usize = std::env::var("LOADSTAR_UI_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let grpc = format!("127.0.0.1:{}", free_port()?);
    let http = format!("127.0.0.1:{}", free_port()?);
    let log = std::env::temp_dir().join(format!("loadstar-ui-{}.log", std::process::id()));
    let _scorer = Standalone(
        Command::new(scorer_bin()?)
            .args(["standalone", "--listen", &grpc, "--metrics-listen", &http])
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting loadstar-scorer standalone")?,
    );
    let endpoint = format!("http://{grpc}");
    eventually("scorer gRPC port", Duration::from_secs(30), || async {
        Ok(match tokio::net::TcpStream::connect(&grpc).await {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        })
    })
    .await?;
    // Simulated nodes from cool to hot, so the grid shows the whole colour range.
    let sims: Vec<(String, _)> = (0..nodes)
        .map(|i| {
            let x = i as f64 / nodes.max(2).saturating_sub(1) as f64;
            (format!("sim-{i:05}"), load(0.05 + 0.9 * x, 0.2 + 0.6 * x))
        })
        .collect();
    // One connection per 90 streams: the scorer serves at most 100 streams per connection.
    let mut _agents = Vec::new();
    for chunk in sims.chunks(90) {
        _agents.push(
            Agents::start(
                std::slice::from_ref(&endpoint),
                chunk,
                Duration::from_secs(1),
            )
            .await?,
        );
    }
    let mut sc = ScorerClient::connect(endpoint).await?;
    // A few seconds per thousand nodes to connect and report (debug builds ramp slowly).
    let ramp = Duration::from_secs(60 + nodes as u64 / 25);
    eventually("every simulated node reporting", ramp, || {
        let sc = sc.clone();
        async move {
            // Every page (a page stops at 3 MiB, ~3 000 nodes with full reports).
            let all = loadstar_testkit::client::all_nodes(sc).await?;
            let fresh = all.iter().filter(|n| !n.stale).count();
            Ok(if fresh > nodes {
                Ok(())
            } else {
                Err(format!("{fresh} fresh of {}", all.len()))
            })
        }
    })
    .await?;
    for (name, cpu) in [
        ("web-1", "500m"),
        ("web-2", "1"),
        ("batch-1", "2"),
        ("giant", "900"),
    ] {
        sc.score(describe(name, cpu)).await?;
    }

    let browser = Browser::start(1500, 950).await?;
    let started = Instant::now();
    browser.goto(&format!("http://{http}/ui")).await?;
    let tiles = eventually("a tile per node", Duration::from_secs(60), || async {
        let n = browser
            .eval("return document.querySelectorAll('#grid .tile').length")
            .await?
            .as_u64()
            .unwrap_or(0) as usize;
        Ok(if n > nodes {
            Ok(n)
        } else {
            Err(format!("{n} tiles"))
        })
    })
    .await?;
    let to_tiles = started.elapsed();
    let timing = browser
        .eval(
            "const p = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint');
             const f = performance.getEntriesByName('loadstar-first-frame')[0];
             return {paint: p ? p.startTime : null, frame: f ? f.startTime : null};",
        )
        .await?;
    println!(
        "UI: {tiles} tiles; first contentful paint {:.0} ms, first frame of tiles {:.0} ms after navigation start, {:.0} ms from the WebDriver navigation to all tiles",
        timing["paint"].as_f64().unwrap_or(f64::NAN),
        timing["frame"].as_f64().unwrap_or(f64::NAN),
        to_tiles.as_secs_f64() * 1000.0
    );
    // The hottest node is red, the coolest green (hsl hue 0 vs 120).
    let colours = browser
        .eval(&format!(
            "const c = n => getComputedStyle(document.querySelector(`.tile[data-name='${{n}}']`)).backgroundColor;
             return [c('sim-00000'), c('sim-{:05}')];",
            nodes - 1
        ))
        .await?;
    let rgb = |v: &serde_json::Value| -> Vec<u32> {
        v.as_str()
            .unwrap_or_default()
            .trim_start_matches("rgb(")
            .trim_end_matches(')')
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect()
    };
    let (cool, hot) = (rgb(&colours[0]), rgb(&colours[1]));
    assert!(
        cool.len() == 3 && hot.len() == 3 && cool[1] > cool[0] && hot[0] > hot[1],
        "coolest tile should be green and hottest red: {colours}"
    );
    // The decisions arrive on the stream: the four Score calls, the giant one unschedulable.
    let rows = eventually("decisions listed", Duration::from_secs(20), || async {
        let v = browser
            .eval("return [...document.querySelectorAll('#decisions tbody tr')].map(r => r.textContent)")
            .await?;
        let rows: Vec<String> = v
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
            .unwrap_or_default();
        Ok(if rows.len() >= 4 { Ok(rows) } else { Err(format!("{rows:?}")) })
    })
    .await?;
    let giant = rows
        .iter()
        .find(|r| r.contains("shop/giant"))
        .context("the giant pod's decision is listed")?;
    assert!(giant.contains("Insufficient cpu"), "{giant}");
    // A node's page: its windows, with the 60/300/900 s columns filled.
    browser
        .eval(&format!(
            "document.querySelector(`.tile[data-name='sim-{:05}']`).click()",
            nodes - 1
        ))
        .await?;
    let windows = eventually("the node's windows", Duration::from_secs(10), || async {
        let v = browser
            .eval("return [...document.querySelectorAll('#node-windows tbody tr')].map(r => r.textContent)")
            .await?;
        let rows: Vec<String> = v
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
            .unwrap_or_default();
        Ok(if rows.iter().any(|r| r.starts_with("cpu")) { Ok(rows) } else { Err(format!("{rows:?}")) })
    })
    .await?;
    assert!(
        windows
            .iter()
            .any(|r| r.starts_with("cpu") && r.contains('%')),
        "{windows:?}"
    );
    // A decision's candidates with each plugin's score.
    browser
        .eval("[...document.querySelectorAll('#decisions tbody tr')].find(r => r.textContent.includes('shop/web-1')).click()")
        .await?;
    let head = browser
        .eval("return document.querySelector('#decision-candidates thead').textContent")
        .await?;
    let head = head.as_str().unwrap_or_default();
    assert!(
        head.contains("total") && head.contains('×'),
        "plugin columns: {head}"
    );
    let candidates = browser
        .eval("return document.querySelectorAll('#decision-candidates tbody tr').length")
        .await?;
    assert_eq!(
        candidates.as_u64(),
        Some(5),
        "the five ranked nodes asked for"
    );
    // Filtering narrows the grid.
    browser
        .eval("const f = document.getElementById('filter'); f.value = 'sim-0000'; f.dispatchEvent(new Event('input'));")
        .await?;
    let shown = browser
        .eval("return document.querySelectorAll('#grid .tile').length")
        .await?;
    assert_eq!(
        shown.as_u64(),
        Some(nodes.min(10) as u64),
        "filter 'sim-0000'"
    );
    browser
        .eval("const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input'));")
        .await?;
    let console = browser.console().await?;
    let errors: Vec<&(String, String)> = console
        .iter()
        .filter(|(level, _)| level == "SEVERE" || level == "WARNING")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    // Responsiveness: what applying and drawing one pushed frame costs, and re-sorting the
    // whole grid by load (a click on "hottest first").
    let frames = eventually("three frames applied", Duration::from_secs(30), || async {
        let v = browser.eval("return window.loadstar").await?;
        Ok(if v["frames"].as_u64().unwrap_or(0) >= 3 {
            Ok(v)
        } else {
            Err(v.to_string())
        })
    })
    .await?;
    let resort = browser
        .eval(
            "const s = document.getElementById('sort'); const t = performance.now();
             s.value = 'hot'; s.dispatchEvent(new Event('change'));
             const took = performance.now() - t;
             s.value = 'name'; s.dispatchEvent(new Event('change'));
             return took;",
        )
        .await?;
    println!(
        "UI: a pushed frame of {tiles} nodes applies and draws in {:.1} ms (slowest {:.1} ms); re-sorting by load {:.1} ms",
        frames["frameMs"].as_f64().unwrap_or(f64::NAN),
        frames["maxFrameMs"].as_f64().unwrap_or(f64::NAN),
        resort.as_f64().unwrap_or(f64::NAN)
    );
    if let Some(path) = std::env::var_os("LOADSTAR_UI_SCREENSHOT") {
        // A few more frames, so the open node's trend line has points.
        tokio::time::sleep(Duration::from_secs(6)).await;
        std::fs::write(&path, browser.screenshot().await?)?;
        println!("screenshot: {}", PathBuf::from(path).display());
    }
    browser.quit().await;
    Ok(())
}
