//! Scorer addresses: each `--scorer` name is resolved every `resolve_interval`, and every
//! address it resolves to gets its own stream (a headless Service's name reaches every
//! replica, so a standby is warm); addresses that disappear are dropped. The resolver is a
//! trait so that tests can hand out addresses of their own.
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tracing::{Instrument, info, info_span};

use super::error::ReportError;
use super::session::connection;
use super::shared::{ReportReceiver, Shared, closed};
use super::target::ScorerTarget;
use super::throttle::Throttle;
use loadstar_common::backoff::Backoff;

/// Resolves scorer host names to addresses (injectable for tests).
pub trait Resolve: Send + Sync + 'static {
    /// Every address `host:port` resolves to.
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>>;
}

/// The system resolver (`getaddrinfo` via tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        Box::pin(async move {
            let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
            addrs.sort();
            addrs.dedup();
            Ok(addrs)
        })
    }
}

/// Resolves without a resolver for IP literals.
async fn resolve(
    resolver: &dyn Resolve,
    target: &ScorerTarget,
) -> Result<Vec<SocketAddr>, ReportError> {
    if let Some(ip) = target.ip() {
        return Ok(vec![SocketAddr::new(ip, target.port)]);
    }
    resolver
        .resolve(&target.host, target.port)
        .await
        .map_err(|source| ReportError::Resolve {
            host: target.host.clone(),
            source,
        })
}

/// Keeps one connection task per address `target` resolves to, until shutdown.
pub(super) async fn supervise(
    target: Arc<ScorerTarget>,
    resolver: Arc<dyn Resolve>,
    shared: Arc<Shared>,
    mut reports: ReportReceiver,
) {
    let mut tasks: HashMap<SocketAddr, JoinHandle<()>> = HashMap::new();
    let mut backoff = Backoff::new(shared.backoff);
    let mut throttle = Throttle::default();
    loop {
        let wait = match resolve(resolver.as_ref(), &target).await {
            Ok(addrs) if !addrs.is_empty() => {
                throttle.clear();
                backoff.reset();
                track(&mut tasks, &addrs, &target, &shared, &reports);
                if target.ip().is_some() {
                    // Nothing to re-resolve: wait for shutdown.
                    closed(&mut reports).await;
                    break;
                }
                shared.resolve_interval
            }
            failed => {
                let message = match failed {
                    Err(e) => e.to_string(),
                    Ok(_) => "resolved to no addresses".to_string(),
                };
                throttle.log(&message);
                backoff
                    .next_delay(rand::random())
                    .min(shared.resolve_interval)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = closed(&mut reports) => break,
        }
    }
    for (_, task) in tasks {
        let _ = task.await;
    }
}

/// Starts a connection task for each new address and aborts those of addresses gone.
fn track(
    tasks: &mut HashMap<SocketAddr, JoinHandle<()>>,
    addrs: &[SocketAddr],
    target: &Arc<ScorerTarget>,
    shared: &Arc<Shared>,
    reports: &ReportReceiver,
) {
    for addr in addrs {
        tasks.entry(*addr).or_insert_with(|| {
            info!(%addr, "scorer address added");
            let span = info_span!("scorer", addr = %addr);
            tokio::spawn(
                connection(target.clone(), *addr, shared.clone(), reports.clone()).instrument(span),
            )
        });
    }
    tasks.retain(|addr, task| {
        let keep = addrs.contains(addr);
        if !keep {
            info!(%addr, "scorer address removed");
            task.abort();
            shared.metrics.forget_scorer(&addr.to_string());
        }
        keep
    });
}
