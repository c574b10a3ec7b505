//! A kube-scheduler filter extender that records and rejects: kube-scheduler v1.20 calls an
//! extender's `filter` verb only with the nodes that passed all of its own filter plugins,
//! so recording that list per pod UID and answering "every node failed" yields
//! kube-scheduler's exact feasible set without binding anything.
//!
//! Wire types: `k8s.io/kube-scheduler/extender/v1` (`ExtenderArgs {Pod, Nodes, NodeNames}`,
//! `ExtenderFilterResult {Nodes, NodeNames, FailedNodes, Error}`); the Go structs have no
//! JSON tags, so the field names are the Go names. With `nodeCacheCapable: false` the nodes
//! arrive as a full `NodeList` in `Nodes`.
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// The verb (URL path) kube-scheduler is configured to call.
pub const FILTER_VERB: &str = "filter";
/// The reason the extender gives for every node; it shows up in kube-scheduler's
/// `FailedScheduling` message, counting the nodes that passed kube-scheduler's filters.
pub const PASSED_REASON: &str = "diff extender: passed kube-scheduler's filters";

/// Annotation of a pod the extender lets through (every node it is shown passes): the
/// incoming pod of a preemption scenario. After preempting, kube-scheduler 1.20 retries the
/// pod at once (its own status update counts as an update); rejected by the extender on the
/// freed node, it would preempt again with candidates that need no victims, a case that
/// crashes its `pickOneNodeForPreemption`. Let through, it binds, as in a real cluster.
pub const ACCEPT: &str = "loadstar-diff/extender-accepts";

type Calls = Arc<Mutex<HashMap<String, Vec<Vec<String>>>>>;

/// The running extender.
pub struct Extender {
    addr: SocketAddr,
    calls: Calls,
    errors: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

#[derive(Clone)]
struct AppState {
    calls: Calls,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Extender {
    /// Serves on a free loopback port.
    pub async fn start() -> Result<Extender> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the extender's port")?;
        let addr = listener.local_addr()?;
        let state = AppState {
            calls: Calls::default(),
            errors: Arc::default(),
        };
        let app = Router::new()
            .route(&format!("/{FILTER_VERB}"), post(filter))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("diff extender stopped: {e}");
            }
        });
        Ok(Extender {
            addr,
            calls: state.calls,
            errors: state.errors,
            task,
        })
    }

    /// The `urlPrefix` for kube-scheduler's configuration.
    pub fn url_prefix(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The node lists of every filter call for the pod with this UID, oldest first.
    pub fn calls(&self, uid: &str) -> Vec<Vec<String>> {
        lock(&self.calls).get(uid).cloned().unwrap_or_default()
    }

    /// Requests it could not understand (each also answered with an error).
    pub fn errors(&self) -> Vec<String> {
        lock(&self.errors).clone()
    }
}

impl Drop for Extender {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pod UID and node names of an `ExtenderArgs` body.
fn parse_args(body: &[u8]) -> Result<(String, Vec<String>), String> {
    parse(body).map(|(uid, nodes, _)| (uid, nodes))
}

/// [`parse_args`], and whether the pod carries [`ACCEPT`].
fn parse(body: &[u8]) -> Result<(String, Vec<String>, bool), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let accept = v
        .pointer("/Pod/metadata/annotations")
        .and_then(|a| a.get(ACCEPT))
        .and_then(Value::as_str)
        == Some("true");
    let uid = v
        .pointer("/Pod/metadata/uid")
        .and_then(Value::as_str)
        .ok_or("no Pod.metadata.uid")?
        .to_string();
    let items = v
        .pointer("/Nodes/items")
        .and_then(Value::as_array)
        .ok_or("no Nodes.items (is nodeCacheCapable false?)")?;
    let nodes = items
        .iter()
        .map(|n| {
            n.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or("a node without metadata.name")
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((uid, nodes, accept))
}

async fn filter(State(state): State<AppState>, body: Bytes) -> impl IntoResponse {
    let answer = match parse(&body) {
        Ok((uid, nodes, true)) => {
            lock(&state.calls).entry(uid).or_default().push(nodes);
            // Every node passes: the same NodeList back.
            let list = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("Nodes").cloned())
                .unwrap_or(Value::Null);
            json!({"Nodes": list, "NodeNames": null, "FailedNodes": {}, "Error": ""})
        }
        Ok((uid, nodes, false)) => {
            let failed: serde_json::Map<String, Value> = nodes
                .iter()
                .map(|n| (n.clone(), json!(PASSED_REASON)))
                .collect();
            lock(&state.calls).entry(uid).or_default().push(nodes);
            json!({"Nodes": null, "NodeNames": null, "FailedNodes": failed, "Error": ""})
        }
        Err(e) => {
            lock(&state.errors).push(e.clone());
            json!({"Error": format!("diff extender: {e}")})
        }
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_read_with_go_field_names() {
        let body = br#"{"Pod":{"metadata":{"uid":"u1"}},
            "Nodes":{"metadata":{},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]},
            "NodeNames":null}"#;
        assert_eq!(
            parse_args(body),
            Ok(("u1".to_string(), vec!["a".to_string(), "b".to_string()]))
        );
        assert!(parse_args(br#"{"Pod":{"metadata":{"uid":"u"}},"NodeNames":["a"]}"#).is_err());
    }
}
