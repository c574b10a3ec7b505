//! The port's gate: who is calling (a verified client certificate, else a bearer token the
//! API server reviews) and what they may do — agents report only for the node their pod
//! runs on, queries need a caller when so configured, a bind needs the caller's own right
//! to bind the pod. Every refusal is a status with a reason, counted by service and reason,
//! and logged once per peer and reason.
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use loadstar_auth::logonce::LogOnce;
use loadstar_auth::review::{AccessReviewer, AccessVerdict, AgentPods, ResourceAttributes};
use loadstar_auth::token::{self, TokenError};
use loadstar_auth::{
    AgentGrant, AuthConfig, Authenticated, Authenticator, Denial, QueryAccess, Reason,
};
use loadstar_store::metrics::{Metrics, ResultLabel, ServiceReasonLabel};
use tonic::{Request, Status};
use tracing::warn;

use crate::listener::PeerInfo;

/// The service a check is for (the metric's `service` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Agent reports.
    Ingest,
    /// Score, ListNodes, GetNode, WatchNodes, ListProfiles.
    Query,
    /// Scheduler.Bind.
    Bind,
}

impl Service {
    fn as_str(self) -> &'static str {
        match self {
            Service::Ingest => "ingest",
            Service::Query => "query",
            Service::Bind => "bind",
        }
    }
}

/// What the gate needs when it checks callers.
#[derive(Debug, Clone)]
pub struct GateParts {
    /// The rules.
    pub config: AuthConfig,
    /// Token reviews.
    pub authenticator: Arc<Authenticator>,
    /// Access reviews.
    pub access: Arc<dyn AccessReviewer>,
    /// The cluster's pods (agent pods).
    pub pods: Arc<dyn AgentPods>,
}

struct Inner {
    parts: GateParts,
    metrics: Arc<Metrics>,
    logged: LogOnce<(Option<IpAddr>, Service, Reason)>,
}

/// The gate; cheap to clone. [`Gate::open`] lets everyone through (standalone on loopback,
/// or `--insecure-allow-unauthenticated`).
#[derive(Clone)]
pub struct Gate(Option<Arc<Inner>>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Gate(open)"),
            Some(i) => f.debug_tuple("Gate").field(&i.parts.config).finish(),
        }
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::open()
    }
}

/// The peer of a request (from the port's [`PeerInfo`]).
pub fn peer<T>(request: &Request<T>) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<PeerInfo>()
        .and_then(|p| p.remote)
        .or_else(|| request.remote_addr())
}

impl Gate {
    /// No checks at all.
    pub fn open() -> Gate {
        Gate(None)
    }

    /// Checks callers with `parts`.
    pub fn new(parts: GateParts, metrics: Arc<Metrics>) -> Gate {
        Gate(Some(Arc::new(Inner {
            parts,
            metrics,
            logged: LogOnce::default(),
        })))
    }

    /// Whether every call is let through unchecked.
    pub fn is_open(&self) -> bool {
        self.0.is_none()
    }

    /// Counts, logs (once per peer and reason) and converts a refusal.
    fn refuse(inner: &Inner, service: Service, peer: Option<SocketAddr>, d: Denial) -> Status {
        inner
            .metrics
            .auth_failures
            .get_or_create(&ServiceReasonLabel {
                service: service.as_str().into(),
                reason: d.reason.as_str().into(),
            })
            .inc();
        if inner
            .logged
            .first((peer.map(|p| p.ip()), service, d.reason), Instant::now())
        {
            warn!(peer = ?peer, service = service.as_str(), reason = d.reason.as_str(),
                  message = %d.message, "caller refused (logged once per peer and reason)");
        }
        crate::status::from_denial(&d)
    }

    /// The bearer token of a request, if it carries one.
    fn bearer<T>(request: &Request<T>) -> Result<Option<&str>, Denial> {
        match request.metadata().get("authorization") {
            None => Ok(None),
            Some(v) => token::bearer(v.as_bytes())
                .map(Some)
                .map_err(|e: TokenError| Denial::new(Reason::MalformedToken, e.to_string())),
        }
    }

    /// Who a client is: its verified certificate, else its token (for `audiences`).
    async fn client<T>(
        inner: &Inner,
        request: &Request<T>,
        audiences: &[String],
    ) -> Result<Authenticated, Denial> {
        if let Some(cert) = request
            .extensions()
            .get::<PeerInfo>()
            .and_then(|p| p.client.as_ref())
        {
            return cert
                .clone()
                .map(|identity| Authenticated {
                    identity,
                    expires: None,
                })
                .map_err(|e| Denial::new(Reason::InvalidCertificate, e));
        }
        match Self::bearer(request)? {
            Some(t) => inner.parts.authenticator.authenticate(t, audiences).await,
            None => Err(Denial::new(
                Reason::MissingCredentials,
                TokenError::Missing.to_string(),
            )),
        }
    }

    /// An agent stream's grant (`None`: the gate is open). Checked before any report is
    /// read.
    pub async fn agent<T>(&self, request: &Request<T>) -> Result<Option<AgentGrant>, Status> {
        let Some(inner) = &self.0 else {
            return Ok(None);
        };
        let agents = &inner.parts.config.agents;
        let result = async {
            let token = Self::bearer(request)?.ok_or_else(|| {
                Denial::new(
                    Reason::MissingCredentials,
                    "agents must send their projected service-account token as \
                     `authorization: Bearer <token>`",
                )
            })?;
            let who = inner
                .parts
                .authenticator
                .authenticate(token, &agents.audiences)
                .await?;
            agents.admit(&who)
        }
        .await;
        result
            .map(Some)
            .map_err(|d| Self::refuse(inner, Service::Ingest, peer(request), d))
    }

    /// May `grant`'s stream report for `node` now?
    pub fn report(
        &self,
        grant: &AgentGrant,
        node: &str,
        peer: Option<SocketAddr>,
    ) -> Result<(), Status> {
        let Some(inner) = &self.0 else {
            return Ok(());
        };
        let pod = inner
            .parts
            .pods
            .agent_pod(&grant.service_account.namespace, &grant.pod.name);
        grant
            .check(node, &pod, SystemTime::now())
            .map_err(|d| Self::refuse(inner, Service::Ingest, peer, d))
    }

    /// A query's caller: `None` when the gate or queries are open.
    pub async fn query<T>(&self, request: &Request<T>) -> Result<Option<Authenticated>, Status> {
        let Some(inner) = &self.0 else {
            return Ok(None);
        };
        if inner.parts.config.queries == QueryAccess::Open {
            return Ok(None);
        }
        Self::client(inner, request, &inner.parts.config.client_audiences)
            .await
            .map(Some)
            .map_err(|d| Self::refuse(inner, Service::Query, peer(request), d))
    }

    /// Whether `who` may do `attributes`, asked of the API server.
    pub async fn authorize(
        &self,
        service: Service,
        who: &Authenticated,
        attributes: &ResourceAttributes,
        peer: Option<SocketAddr>,
    ) -> Result<(), Status> {
        let Some(inner) = &self.0 else {
            return Ok(());
        };
        let count = |result: &str| {
            inner
                .metrics
                .access_reviews
                .get_or_create(&ResultLabel {
                    result: result.into(),
                })
                .inc();
        };
        let denial = match inner
            .parts
            .access
            .review_access(&who.identity, attributes)
            .await
        {
            Ok(AccessVerdict::Allowed) => {
                count("allowed");
                return Ok(());
            }
            Ok(AccessVerdict::Denied { reason }) => {
                count("denied");
                let mut message = format!(
                    "{} may not {}",
                    loadstar_common::text::quote(&who.identity.username),
                    describe(attributes)
                );
                if !reason.is_empty() {
                    message.push_str(": ");
                    message.push_str(&loadstar_common::text::truncate(&reason, 256));
                }
                Denial::new(Reason::Forbidden, message)
            }
            Err(e) => {
                count("error");
                Denial::new(Reason::ReviewUnavailable, e.to_string())
            }
        };
        Err(Self::refuse(inner, service, peer, denial))
    }

    /// A `Bind` of pod `namespace/name`: the caller must be authenticated and allowed to
    /// `create pods/binding` on it.
    pub async fn bind<T>(
        &self,
        request: &Request<T>,
        namespace: &str,
        name: &str,
    ) -> Result<(), Status> {
        let Some(inner) = &self.0 else {
            return Ok(());
        };
        let peer = peer(request);
        let who = Self::client(inner, request, &inner.parts.config.client_audiences)
            .await
            .map_err(|d| Self::refuse(inner, Service::Bind, peer, d))?;
        self.authorize(
            Service::Bind,
            &who,
            &ResourceAttributes::bind_pod(namespace, name),
            peer,
        )
        .await
    }
}

fn describe(a: &ResourceAttributes) -> String {
    let mut s = a.describe();
    if !a.name.is_empty() {
        s = format!("{s} (pod {})", loadstar_common::text::quote(&a.name));
    }
    s
}
