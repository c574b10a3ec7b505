//! Finds the API resource of a StepScaler's target kind and whether it has a `scale`
//! subresource, through the API server's discovery (so any kind with `/scale` works:
//! Deployments, StatefulSets, ReplicaSets, custom resources). Answers are cached briefly;
//! a failure names the apiVersion and kind the user wrote.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use kube::error::DiscoveryError;
use thiserror::Error;

/// Why a target cannot be scaled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TargetError {
    /// The apiVersion or the kind is not served.
    #[error("the API server serves no kind {kind} in {api_version}")]
    UnknownKind {
        /// As written.
        api_version: String,
        /// As written.
        kind: String,
    },
    /// The kind exists but has no scale subresource.
    #[error("{kind} ({api_version}) has no scale subresource: a StepScaler needs one")]
    NoScale {
        /// As written.
        api_version: String,
        /// As written.
        kind: String,
    },
    /// Discovery failed for another reason (the API server is unreachable, RBAC).
    #[error("discovering {kind} in {api_version} failed: {message}")]
    Discovery {
        /// As written.
        api_version: String,
        /// As written.
        kind: String,
        /// The client's error.
        message: String,
    },
}

impl TargetError {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            TargetError::UnknownKind { .. } => "UnknownKind",
            TargetError::NoScale { .. } => "NoScaleSubresource",
            TargetError::Discovery { .. } => "FailedDiscovery",
        }
    }
}

/// Successful answers are kept this long (a CRD added later is found within it).
const KEEP_FOUND: Duration = Duration::from_secs(300);
/// Failures are kept this long (a CRD installed after the StepScaler is picked up soon).
const KEEP_FAILED: Duration = Duration::from_secs(15);

/// Most answers kept: the kinds StepScalers name are written by users, so the cache must not
/// grow with every kind anyone ever typed.
const MAX_CACHED: usize = 512;

type Answer = (Result<ApiResource, TargetError>, Instant);

/// How long `answer` is kept.
fn keep(answer: &Result<ApiResource, TargetError>) -> Duration {
    if answer.is_ok() {
        KEEP_FOUND
    } else {
        KEEP_FAILED
    }
}

/// Stores `answer` under `key`, first dropping expired answers and, when the cache is still
/// full, the oldest one.
fn remember(cache: &mut HashMap<(String, String), Answer>, key: (String, String), answer: Answer) {
    if !cache.contains_key(&key) && cache.len() >= MAX_CACHED {
        cache.retain(|_, (a, at)| at.elapsed() < keep(a));
        if cache.len() >= MAX_CACHED
            && let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
        {
            cache.remove(&oldest);
        }
    }
    cache.insert(key, answer);
}

/// Discovery with a cache.
pub struct Targets {
    client: Client,
    cache: Mutex<HashMap<(String, String), Answer>>,
}

impl std::fmt::Debug for Targets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Targets").finish_non_exhaustive()
    }
}

/// Splits `apps/v1` into group and version (`v1` is the core group).
pub fn group_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

impl Targets {
    /// Over `client`.
    pub fn new(client: Client) -> Targets {
        Targets {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The resource of `kind` in `api_version`, if it has `/scale`.
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<ApiResource, TargetError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some((answer, at)) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && at.elapsed() < keep(answer)
        {
            return answer.clone();
        }
        let answer = self.discover(api_version, kind).await;
        remember(
            &mut self.cache.lock().unwrap_or_else(|p| p.into_inner()),
            key,
            (answer.clone(), Instant::now()),
        );
        answer
    }

    async fn discover(&self, api_version: &str, kind: &str) -> Result<ApiResource, TargetError> {
        let (group, version) = group_version(api_version);
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let unknown = || TargetError::UnknownKind {
            api_version: api_version.into(),
            kind: kind.into(),
        };
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((ar, caps)) => {
                if caps
                    .subresources
                    .iter()
                    .any(|(sub, _)| sub.plural == "scale")
                {
                    Ok(ar)
                } else {
                    Err(TargetError::NoScale {
                        api_version: api_version.into(),
                        kind: kind.into(),
                    })
                }
            }
            Err(kube::Error::Discovery(DiscoveryError::MissingKind(_)))
            | Err(kube::Error::Discovery(DiscoveryError::MissingApiGroup(_))) => Err(unknown()),
            Err(kube::Error::Api(s)) if s.code == 404 => Err(unknown()),
            Err(e) => Err(TargetError::Discovery {
                api_version: api_version.into(),
                kind: kind.into(),
                message: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_named_groups() {
        assert_eq!(group_version("apps/v1"), ("apps", "v1"));
        assert_eq!(group_version("v1"), ("", "v1"));
        assert_eq!(
            group_version("example.com/v1beta1"),
            ("example.com", "v1beta1")
        );
    }

    #[test]
    fn the_cache_stays_bounded_whatever_kinds_are_written() {
        let mut cache = HashMap::new();
        let failed = |i: usize| {
            Err(TargetError::UnknownKind {
                api_version: "v1".into(),
                kind: format!("K{i}"),
            })
        };
        for i in 0..MAX_CACHED + 100 {
            remember(
                &mut cache,
                ("v1".into(), format!("K{i}")),
                (failed(i), Instant::now()),
            );
        }
        assert_eq!(cache.len(), MAX_CACHED);
        assert!(cache.contains_key(&("v1".to_string(), format!("K{}", MAX_CACHED + 99))));
        assert!(
            !cache.contains_key(&("v1".to_string(), "K0".to_string())),
            "oldest left"
        );
        // Expired answers go first.
        let mut cache = HashMap::new();
        let long_ago = Instant::now()
            .checked_sub(KEEP_FAILED + Duration::from_secs(1))
            .expect("a clock that started over 16 s ago");
        for i in 0..MAX_CACHED {
            remember(
                &mut cache,
                ("v1".into(), format!("K{i}")),
                (failed(i), long_ago),
            );
        }
        remember(
            &mut cache,
            ("v1".into(), "new".into()),
            (failed(0), Instant::now()),
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn errors_name_what_was_written() {
        let e = TargetError::UnknownKind {
            api_version: "apps/v1".into(),
            kind: "Deploymnet".into(),
        };
        assert_eq!(
            e.to_string(),
            "the API server serves no kind Deploymnet in apps/v1"
        );
        assert_eq!(e.reason(), "UnknownKind");
    }
}
