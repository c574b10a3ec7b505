//! The architecture, checked: the dependency graph between the workspace's crates must be
//! exactly the one drawn in `docs/architecture.md`, the policy layer must not pull in the RPC,
//! Kubernetes, HTTP or plotting stacks, the test kit must never ship, and no two modules of a
//! crate may import each other (directly or around a loop).
//!
//! The graph comes from `cargo metadata` (normal dependencies only: dev-dependencies may
//! point anywhere a test needs), the banned stacks from `cargo tree -p <crate>`, and the module
//! graph from the sources' `crate::`, `super::`, `self::` and child-module paths, outside
//! `#[cfg(test)] mod tests` and not counting `use super::*` (an inline module's view of its
//! own file).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Where the documented graph sits in `docs/architecture.md`.
const GRAPH_BEGIN: &str = "<!-- crate-graph:begin -->";
const GRAPH_END: &str = "<!-- crate-graph:end -->";

/// Crates that must stay free of these dependencies, however indirect.
const FORBIDDEN: &[(&str, &[&str])] = &[
    (
        "loadstar-common",
        &["tonic", "prost", "tokio", "kube", "axum", "plotters"],
    ),
    (
        "loadstar-framework",
        &["tonic", "prost", "tokio", "kube", "axum", "plotters"],
    ),
    (
        "loadstar-parity",
        &["tonic", "prost", "tokio", "kube", "axum", "plotters"],
    ),
    (
        "loadstar-policy",
        &["tonic", "prost", "tokio", "kube", "axum", "plotters"],
    ),
    (
        "loadstar-sampler",
        &[
            "tonic",
            "tokio",
            "hyper",
            "h2",
            "axum",
            "clap",
            "prometheus-client",
            "tracing-subscriber",
            "kube",
            "plotters",
        ],
    ),
    (
        "loadstar-autoscale",
        &["tonic", "prost", "tokio", "kube", "axum", "plotters"],
    ),
    (
        "loadstar-kube-model",
        &["kube", "tonic", "axum", "plotters"],
    ),
    ("loadstar-kube-client", &["tonic", "axum", "plotters"]),
    ("loadstar-store", &["kube", "axum", "plotters"]),
    ("loadstar-auth", &["kube", "axum", "plotters"]),
    ("loadstar-sim", &["tonic", "kube", "axum"]),
];

/// Most lines a crate's own code may hold: every `.rs` file under its `src/`, comments
/// included, up to its `#[cfg(test)] mod tests`. A crate larger than this is more than one
/// layer, or one that every edit makes a 2-core machine rebuild whole: split it.
const MAX_CRATE_LINES: usize = 6_000;

/// Test-only crates: nothing shipped may depend on them (the integration-test crate may).
const TEST_ONLY: &[&str] = &["loadstar-testkit", "loadstar-tests"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn metadata() -> Result<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(root())
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).context("parsing cargo metadata")
}

/// Workspace packages: name → (manifest dir, normal dependencies on workspace packages).
fn workspace(meta: &Value) -> Result<BTreeMap<String, (PathBuf, BTreeSet<String>)>> {
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .context("workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let packages = meta["packages"].as_array().context("packages")?;
    let names: BTreeSet<String> = packages
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(id)))
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect();
    let mut out = BTreeMap::new();
    for p in packages {
        let Some(name) = p["name"].as_str().filter(|n| names.contains(*n)) else {
            continue;
        };
        let dir = Path::new(p["manifest_path"].as_str().context("manifest_path")?)
            .parent()
            .context("manifest dir")?
            .to_path_buf();
        let deps = p["dependencies"]
            .as_array()
            .context("dependencies")?
            .iter()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str())
            .filter(|d| names.contains(*d))
            .map(String::from)
            .collect();
        out.insert(name.to_string(), (dir, deps));
    }
    Ok(out)
}

/// The edges drawn in the architecture document, `a --> b` meaning a depends on b.
fn documented() -> Result<BTreeSet<(String, String)>> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md"))?;
    let start = doc.find(GRAPH_BEGIN).context("graph begin marker")?;
    let end = doc.find(GRAPH_END).context("graph end marker")?;
    let mut edges = BTreeSet::new();
    for line in doc[start + GRAPH_BEGIN.len()..end].lines() {
        if let Some((a, b)) = line.trim().split_once("-->") {
            edges.insert((a.trim().to_string(), b.trim().to_string()));
        }
    }
    Ok(edges)
}

#[test]
fn crate_graph_matches_the_architecture_document() -> Result<()> {
    let ws = workspace(&metadata()?)?;
    let actual: BTreeSet<(String, String)> = ws
        .iter()
        .flat_map(|(a, (_, deps))| deps.iter().map(move |b| (a.clone(), b.clone())))
        .collect();
    let documented = documented()?;
    let undocumented: Vec<_> = actual.difference(&documented).collect();
    let missing: Vec<_> = documented.difference(&actual).collect();
    assert!(
        undocumented.is_empty() && missing.is_empty(),
        "the crate graph differs from docs/architecture.md:\n  in Cargo.toml but not drawn: \
         {undocumented:?}\n  drawn but not in Cargo.toml: {missing:?}"
    );
    Ok(())
}

#[test]
fn test_kit_never_ships() -> Result<()> {
    let ws = workspace(&metadata()?)?;
    for (name, (_, deps)) in &ws {
        if TEST_ONLY.contains(&name.as_str()) {
            continue;
        }
        for t in TEST_ONLY {
            assert!(
                !deps.contains(*t),
                "{name} depends on the test-only crate {t} (allowed only as a dev-dependency)"
            );
        }
    }
    Ok(())
}

/// Every package a build of `krate` alone compiles, through normal dependencies, with the
/// features that build enables: what `cargo tree -p krate -e normal` shows.
fn closure(krate: &str) -> Result<BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree", "-p", krate, "-e", "normal", "--prefix", "none", "-f", "{p}",
        ])
        .current_dir(root())
        .output()
        .context("running cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree -p {krate}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let deps: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != krate)
        .map(String::from)
        .collect();
    if deps.is_empty() {
        bail!("cargo tree -p {krate} listed no dependencies");
    }
    Ok(deps)
}

#[test]
fn lower_layers_stay_free_of_upper_stacks() -> Result<()> {
    for (krate, banned) in FORBIDDEN {
        let deps = closure(krate)?;
        let found: Vec<&&str> = banned.iter().filter(|b| deps.contains(**b)).collect();
        assert!(
            found.is_empty(),
            "{krate} depends (transitively) on {found:?}"
        );
    }
    Ok(())
}

/// Lines of `text` before its `#[cfg(test)] mod tests` block.
fn own_lines(text: &str) -> usize {
    text.find("#[cfg(test)]\nmod tests {")
        .map_or(text, |i| &text[..i])
        .lines()
        .count()
}

#[test]
fn own_lines_stop_at_the_test_module() {
    assert_eq!(own_lines("a\nb\n#[cfg(test)]\nmod tests {\n x\n}\n"), 2);
    assert_eq!(own_lines("a\n#[cfg(test)]\nmod tests_util {\n}\n"), 4);
    assert_eq!(own_lines("a\nb\n"), 2);
    // Only the module named `tests` at the top level ends the count.
    assert_eq!(own_lines("a\n#[cfg(test)]\nmod fake {\n}\n"), 4);
}

#[test]
fn no_crate_outgrows_its_layer() -> Result<()> {
    let ws = workspace(&metadata()?)?;
    let mut sizes = Vec::new();
    for (name, (dir, _)) in &ws {
        let mut total = 0;
        let mut dirs = vec![dir.join("src")];
        while let Some(d) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries {
                let path = entry?.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    total += own_lines(&std::fs::read_to_string(&path)?);
                }
            }
        }
        sizes.push((total, name.clone()));
    }
    sizes.sort();
    let too_big: Vec<_> = sizes.iter().filter(|(n, _)| *n > MAX_CRATE_LINES).collect();
    assert!(
        too_big.is_empty(),
        "crates above {MAX_CRATE_LINES} lines of their own code: {too_big:?}"
    );
    assert!(
        sizes.iter().any(|(n, _)| *n > MAX_CRATE_LINES / 4),
        "the count found almost nothing: {sizes:?}"
    );
    Ok(())
}

/// Module path (inside the crate) of each source file under `src`, binaries excluded.
fn modules(src: &Path) -> Result<BTreeMap<Vec<String>, PathBuf>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    dirs.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src)?.with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("lib" | "main" | "mod")
            ) {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
    Ok(out)
}

/// The source without comments and without its `#[cfg(test)] mod tests` block.
fn production_code(text: &str) -> String {
    let code = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |i| &text[..i]);
    code.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The modules of `files` that file `module` refers to by path.
fn references(
    module: &[String],
    code: &str,
    files: &BTreeMap<Vec<String>, PathBuf>,
) -> BTreeSet<Vec<String>> {
    // Flatten `a::{b, c::d}` groups into separate `a::b`, `a::c::d` paths first.
    let mut paths: Vec<String> = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if is_ident(bytes[i]) && (i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            let mut j = i;
            let mut path = String::new();
            loop {
                let start = j;
                while j < bytes.len() && is_ident(bytes[j]) {
                    j += 1;
                }
                path.extend(&bytes[start..j]);
                if j + 2 < bytes.len() && bytes[j] == ':' && bytes[j + 1] == ':' {
                    if bytes[j + 2] == '{' {
                        let close = bytes[j..].iter().position(|c| *c == '}').map(|p| p + j);
                        if let Some(close) = close {
                            let inner: String = bytes[j + 3..close].iter().collect();
                            for item in inner.split(',') {
                                let item = item.split(" as ").next().unwrap_or("").trim();
                                if !item.is_empty() && item != "self" && item != "*" {
                                    paths.push(format!("{path}::{item}"));
                                }
                            }
                            j = close;
                        }
                        break;
                    }
                    path.push_str("::");
                    j += 2;
                    continue;
                }
                break;
            }
            if path.contains("::") {
                paths.push(path);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    let mut out = BTreeSet::new();
    for p in paths {
        // `use super::*` is how inline modules (serde adapters, tests) see their own file:
        // a glob of the parent is not counted as an import.
        if p.ends_with("::") {
            continue;
        }
        let mut parts: Vec<&str> = p.split("::").collect();
        let mut base: Vec<String> = match parts.first() {
            Some(&"crate") => {
                parts.remove(0);
                Vec::new()
            }
            Some(&"self") => {
                parts.remove(0);
                module.to_vec()
            }
            Some(&"super") => {
                let mut b = module.to_vec();
                while parts.first() == Some(&"super") {
                    parts.remove(0);
                    b.pop();
                }
                b
            }
            // A bare path through a child module (`child::Item`).
            Some(first) if files.contains_key(&[module, &[first.to_string()]].concat()) => {
                module.to_vec()
            }
            _ => continue,
        };
        base.extend(parts.iter().map(|s| s.to_string()));
        while !base.is_empty() && !files.contains_key(&base) {
            base.pop();
        }
        if base != module {
            out.insert(base);
        }
    }
    out
}

/// A cycle in `edges`, if any, as the list of modules around it.
fn find_cycle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        n: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        marks: &mut HashMap<Vec<String>, Mark>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match marks.get(n) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let at = stack.iter().position(|s| s == n).unwrap_or(0);
                return Some(stack[at..].to_vec());
            }
            None => {}
        }
        marks.insert(n.clone(), Mark::Open);
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, marks, stack) {
                return Some(c);
            }
        }
        stack.pop();
        marks.insert(n.clone(), Mark::Done);
        None
    }
    let mut marks = HashMap::new();
    for n in edges.keys() {
        if let Some(c) = visit(n, edges, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_two_modules_import_each_other() -> Result<()> {
    let ws = workspace(&metadata()?)?;
    let mut checked = 0;
    for (name, (dir, _)) in &ws {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let files = modules(&src)?;
        let mut edges = BTreeMap::new();
        for (module, path) in &files {
            let code = production_code(&std::fs::read_to_string(path)?);
            edges.insert(module.clone(), references(module, &code, &files));
        }
        if let Some(cycle) = find_cycle(&edges) {
            let names: Vec<String> = cycle
                .iter()
                .map(|m| {
                    if m.is_empty() {
                        "lib".into()
                    } else {
                        m.join("::")
                    }
                })
                .collect();
            panic!("{name}: modules import each other: {}", names.join(" → "));
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} crates checked");
    Ok(())
}

#[test]
fn the_cycle_finder_finds_cycles() {
    // The checker itself: a file pair that imports each other is found, a chain is not.
    let files: BTreeMap<Vec<String>, PathBuf> = [vec![], vec!["a".into()], vec!["b".into()]]
        .into_iter()
        .map(|m| (m, PathBuf::new()))
        .collect();
    let a = references(&["a".into()], "use crate::b::Thing;\nuse super::b;", &files);
    assert_eq!(a, BTreeSet::from([vec!["b".to_string()]]));
    let b = references(&["b".into()], "use crate::{a::X, b::Y};", &files);
    assert_eq!(b, BTreeSet::from([vec!["a".to_string()]]));
    let lib = references(&[], "pub use a::X;", &files);
    assert_eq!(lib, BTreeSet::from([vec!["a".to_string()]]));
    let mut edges = BTreeMap::new();
    edges.insert(vec!["a".to_string()], a);
    edges.insert(vec!["b".to_string()], b.clone());
    assert!(find_cycle(&edges).is_some());
    edges.insert(vec!["b".to_string()], BTreeSet::new());
    edges.insert(vec![], lib);
    assert!(find_cycle(&edges).is_none());
}
