//! The access rules, pure: which identities may report for which node, who may query, and
//! the configuration that says so (with its defaults).
use std::time::SystemTime;

use crate::authn::Authenticated;
use crate::denial::{Denial, Reason};
use crate::identity::{BoundPod, ServiceAccount};
use crate::review::PodLookup;

/// Who may report load; see [`AgentPolicy::default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPolicy {
    /// Service accounts whose bound tokens agents present.
    pub service_accounts: Vec<ServiceAccount>,
    /// Audiences an agent token must be issued for.
    pub audiences: Vec<String>,
}

impl Default for AgentPolicy {
    /// `loadstar/loadstar-agent` (the DaemonSet's service account), audience `loadstar`.
    fn default() -> Self {
        AgentPolicy {
            service_accounts: vec![ServiceAccount {
                namespace: "loadstar".into(),
                name: "loadstar-agent".into(),
            }],
            audiences: vec!["loadstar".into()],
        }
    }
}

/// Who may call `Score`, `ListNodes`, `GetNode` and `WatchNodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueryAccess {
    /// Anyone who can reach the port.
    Open,
    /// Any authenticated caller (token or client certificate); a `Score` for a pod by
    /// reference also needs `get pods` in its namespace.
    #[default]
    Authenticated,
}

/// Everything authentication and authorisation need to know; see [`AuthConfig::default`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthConfig {
    /// Agents.
    pub agents: AgentPolicy,
    /// Queries.
    pub queries: QueryAccess,
    /// Audiences a client's (scheduler, tool) token must be valid for (empty: the API
    /// server's own, so a ServiceAccount's or `kubectl create token`'s token works).
    pub client_audiences: Vec<String>,
}

/// An agent stream's right to report: the pod its token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentGrant {
    /// The agent's service account.
    pub service_account: ServiceAccount,
    /// The pod the token was issued for (in the service account's namespace).
    pub pod: BoundPod,
    /// The node the token names, if the API server says (1.30+).
    pub node: Option<String>,
    /// When the token expires; the stream ends then.
    pub expires: Option<SystemTime>,
}

impl AgentPolicy {
    /// The grant of an authenticated caller: one of the agent service accounts, with a
    /// token bound to a pod.
    pub fn admit(&self, who: &Authenticated) -> Result<AgentGrant, Denial> {
        let id = &who.identity;
        let sa = id
            .service_account()
            .filter(|sa| self.service_accounts.contains(sa))
            .ok_or_else(|| {
                Denial::new(
                    Reason::WrongServiceAccount,
                    format!(
                        "{} is not an agent service account (allowed: {})",
                        loadstar_common::text::quote(&id.username),
                        self.service_accounts
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
        let pod = id.bound_pod().ok_or_else(|| {
            Denial::new(
                Reason::NotBoundToPod,
                format!(
                    "the token of {sa} is not bound to a pod; agents must send a projected \
                     service-account token (serviceAccountToken volume source)"
                ),
            )
        })?;
        Ok(AgentGrant {
            node: id.bound_node().map(str::to_string),
            service_account: sa,
            pod,
            expires: who.expires,
        })
    }
}

impl AgentGrant {
    /// `namespace/name` of the agent pod.
    pub fn pod_key(&self) -> String {
        format!("{}/{}", self.service_account.namespace, self.pod.name)
    }

    /// May this grant report for `node` at `now`, given what the cache knows of its pod?
    pub fn check(&self, node: &str, pod: &PodLookup, now: SystemTime) -> Result<(), Denial> {
        let key = self.pod_key();
        if self.expires.is_some_and(|e| e <= now) {
            return Err(Denial::new(
                Reason::TokenExpired,
                "the token this stream was opened with has expired; reconnect with the \
                 rotated token",
            ));
        }
        if let Some(n) = &self.node
            && n != node
        {
            return Err(wrong_node(&key, n, node));
        }
        match pod {
            PodLookup::NotSynced => Err(Denial::new(
                Reason::PodsNotSynced,
                "the scorer has not listed the cluster's pods yet; retry shortly",
            )),
            PodLookup::Missing => Err(Denial::new(
                Reason::PodNotFound,
                format!("pod {key}, which the token was issued for, does not exist"),
            )),
            PodLookup::Found(p) if p.uid != self.pod.uid => Err(Denial::new(
                Reason::PodNotFound,
                format!(
                    "pod {key} was replaced (uid {}, the token's {})",
                    p.uid, self.pod.uid
                ),
            )),
            PodLookup::Found(p) if !p.running => Err(Denial::new(
                Reason::PodNotRunning,
                format!("pod {key} is not running (or is being deleted)"),
            )),
            PodLookup::Found(p) => match p.node_name.as_deref() {
                Some(n) if n == node => Ok(()),
                Some(n) => Err(wrong_node(&key, n, node)),
                None => Err(Denial::new(
                    Reason::WrongNode,
                    format!("pod {key} is not bound to a node"),
                )),
            },
        }
    }
}

fn wrong_node(key: &str, actual: &str, claimed: &str) -> Denial {
    Denial::new(
        Reason::WrongNode,
        format!(
            "agent pod {key} runs on node {}, so it may not report for node {}",
            loadstar_common::text::quote(actual),
            loadstar_common::text::quote(claimed)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{Identity, POD_NAME_EXTRA, POD_UID_EXTRA};
    use crate::review::AgentPod;
    use std::time::Duration;

    fn who(user: &str, pod: Option<(&str, &str)>, expires: Option<SystemTime>) -> Authenticated {
        let mut identity = Identity {
            username: user.into(),
            ..Identity::default()
        };
        if let Some((name, uid)) = pod {
            identity
                .extra
                .insert(POD_NAME_EXTRA.into(), vec![name.into()]);
            identity
                .extra
                .insert(POD_UID_EXTRA.into(), vec![uid.into()]);
        }
        Authenticated { identity, expires }
    }

    const AGENT: &str = "system:serviceaccount:loadstar:loadstar-agent";

    #[test]
    fn only_agent_accounts_with_bound_tokens_are_admitted() {
        let p = AgentPolicy::default();
        let g = p
            .admit(&who(AGENT, Some(("agent-a", "u1")), None))
            .expect("admitted");
        assert_eq!(g.pod_key(), "loadstar/agent-a");
        let e = p
            .admit(&who(
                "system:serviceaccount:loadstar:default",
                Some(("x", "u")),
                None,
            ))
            .expect_err("other account");
        assert_eq!(e.reason, Reason::WrongServiceAccount);
        assert!(e.message.contains("loadstar/loadstar-agent"), "{e}");
        assert_eq!(
            p.admit(&who("alice", None, None)).expect_err("user").reason,
            Reason::WrongServiceAccount
        );
        assert_eq!(
            p.admit(&who(AGENT, None, None))
                .expect_err("legacy token")
                .reason,
            Reason::NotBoundToPod
        );
    }

    #[test]
    fn a_grant_reports_only_for_its_running_pods_node_until_expiry() {
        let now = SystemTime::now();
        let g = AgentPolicy::default()
            .admit(&who(
                AGENT,
                Some(("agent-a", "u1")),
                Some(now + Duration::from_secs(60)),
            ))
            .expect("admitted");
        let pod = |uid: &str, node: Option<&str>, running: bool| {
            PodLookup::Found(AgentPod {
                uid: uid.into(),
                node_name: node.map(str::to_string),
                running,
            })
        };
        assert_eq!(g.check("a", &pod("u1", Some("a"), true), now), Ok(()));
        let reason = |r: Result<(), Denial>| r.expect_err("denied").reason;
        assert_eq!(
            reason(g.check("b", &pod("u1", Some("a"), true), now)),
            Reason::WrongNode
        );
        assert_eq!(
            reason(g.check("a", &pod("u1", None, true), now)),
            Reason::WrongNode
        );
        assert_eq!(
            reason(g.check("a", &pod("u2", Some("a"), true), now)),
            Reason::PodNotFound
        );
        assert_eq!(
            reason(g.check("a", &PodLookup::Missing, now)),
            Reason::PodNotFound
        );
        assert_eq!(
            reason(g.check("a", &pod("u1", Some("a"), false), now)),
            Reason::PodNotRunning
        );
        assert_eq!(
            reason(g.check("a", &PodLookup::NotSynced, now)),
            Reason::PodsNotSynced
        );
        assert_eq!(
            reason(g.check(
                "a",
                &pod("u1", Some("a"), true),
                now + Duration::from_secs(60)
            )),
            Reason::TokenExpired
        );
        let msg = g
            .check("b", &pod("u1", Some("a"), true), now)
            .expect_err("denied")
            .message;
        assert_eq!(
            msg,
            "agent pod loadstar/agent-a runs on node \"a\", so it may not report for node \"b\""
        );
        // A token that names its node (1.30+) is held to it even before the pod is seen.
        let mut bound = g.clone();
        bound.node = Some("a".into());
        assert_eq!(
            reason(bound.check("b", &PodLookup::NotSynced, now)),
            Reason::WrongNode
        );
    }
}
