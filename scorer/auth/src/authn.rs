//! Bearer tokens to identities: each token reviewed by the API server once (concurrent
//! logins with one token share a review), the result cached (valid tokens until their
//! expiry, at most `max_cache_ttl`; refused ones briefly), the cache bounded, the reviews in
//! flight bounded, expired JWTs refused without a review.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use loadstar_store::metrics::{Metrics, ResultLabel};
use tokio::sync::{Semaphore, watch};

use crate::cache::DeadlineCache;
use crate::denial::{Denial, Reason};
use crate::identity::Identity;
use crate::review::{TokenReviewer, TokenVerdict};
use crate::token;

/// Authenticator settings; see [`AuthenticatorConfig::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthenticatorConfig {
    /// Cached review results at most.
    pub cache_capacity: usize,
    /// A valid token's result is trusted at most this long (then reviewed again), even if
    /// it expires later: a deleted pod or service account invalidates its tokens.
    pub max_cache_ttl: Duration,
    /// A refused token's result is remembered this long (so a client retrying a bad token
    /// does not cost a review each time).
    pub negative_ttl: Duration,
    /// Reviews in flight at most; more logins at once are told to retry (`UNAVAILABLE`).
    pub max_in_flight: usize,
    /// A review that takes longer is abandoned (`UNAVAILABLE`).
    pub review_timeout: Duration,
}

impl Default for AuthenticatorConfig {
    /// 10 000 entries (a 5 000-node cluster's agents plus clients, twice over), valid results
    /// for at most 2 minutes (the API server's own webhook token cache default), refused
    /// ones for 10 s, 64 reviews in flight, 5 s per review.
    fn default() -> Self {
        AuthenticatorConfig {
            cache_capacity: 10_000,
            max_cache_ttl: Duration::from_secs(120),
            negative_ttl: Duration::from_secs(10),
            max_in_flight: 64,
            review_timeout: Duration::from_secs(5),
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// Who.
    pub identity: Identity,
    /// When the credential expires (a JWT's `exp`; `None`: never, or not known).
    pub expires: Option<SystemTime>,
}

/// A review in progress: its answer, once there.
type Answer = watch::Receiver<Option<Result<Authenticated, Denial>>>;

/// Drops a token's in-progress entry when its review ends or is abandoned.
struct Pending<'a> {
    auth: &'a Authenticator,
    key: [u8; 32],
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.auth.lock_pending().remove(&self.key);
    }
}

#[derive(Debug, Clone)]
enum Cached {
    Valid(Authenticated),
    Refused(String),
}

/// Reviews tokens through a [`TokenReviewer`], with a cache.
#[derive(Debug)]
pub struct Authenticator {
    reviewer: Arc<dyn TokenReviewer>,
    cache: DeadlineCache<[u8; 32], Cached>,
    pending: Mutex<HashMap<[u8; 32], Answer>>,
    in_flight: Semaphore,
    config: AuthenticatorConfig,
    metrics: Arc<Metrics>,
}

impl Authenticator {
    /// An authenticator asking `reviewer`.
    pub fn new(
        reviewer: Arc<dyn TokenReviewer>,
        config: AuthenticatorConfig,
        metrics: Arc<Metrics>,
    ) -> Authenticator {
        Authenticator {
            reviewer,
            cache: DeadlineCache::new(config.cache_capacity),
            pending: Mutex::new(HashMap::new()),
            in_flight: Semaphore::new(config.max_in_flight.max(1)),
            config,
            metrics,
        }
    }

    fn count(&self, result: &str) {
        self.metrics
            .token_reviews
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// Who `token` belongs to, if it is valid for `audiences` (empty: the API server's).
    pub async fn authenticate(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Authenticated, Denial> {
        let now = Instant::now();
        let wall = SystemTime::now();
        let key = token::digest(token, audiences);
        if let Some(hit) = self.cache.get(&key, now) {
            self.count("cache_hit");
            return match hit {
                Cached::Valid(a) if a.expires.is_none_or(|e| e > wall) => Ok(a),
                Cached::Valid(_) => Err(expired()),
                Cached::Refused(reason) => Err(refused(&reason)),
            };
        }
        let expires = token::expiry(token);
        if expires.is_some_and(|e| e <= wall) {
            return Err(expired());
        }
        // One review per token at a time: concurrent logins with the same token (a client's
        // burst of calls, many streams of one agent) wait for the first one's answer.
        loop {
            let (mut rx, lead) = {
                let mut pending = self.lock_pending();
                match pending.get(&key) {
                    Some(rx) => (rx.clone(), None),
                    None => {
                        let (tx, rx) = watch::channel(None);
                        pending.insert(key, rx.clone());
                        (rx, Some(tx))
                    }
                }
            };
            if let Some(tx) = lead {
                // Removes the entry even if this login is abandoned mid-review.
                let _done = Pending { auth: self, key };
                let result = self.review(key, token, audiences, expires).await;
                let _ = tx.send(Some(result.clone()));
                return result;
            }
            if let Ok(answer) = rx.wait_for(Option::is_some).await
                && let Some(result) = answer.clone()
            {
                return result;
            }
            // The leading login was abandoned before its answer: lead one ourselves.
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Answer>> {
        // Every operation is one insert or remove: a poisoned map is still consistent.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the reviewer about `token` (bounded in flight and in time) and caches the answer.
    async fn review(
        &self,
        key: [u8; 32],
        token: &str,
        audiences: &[String],
        expires: Option<SystemTime>,
    ) -> Result<Authenticated, Denial> {
        let Ok(_permit) = self.in_flight.try_acquire() else {
            self.count("busy");
            return Err(Denial::new(
                Reason::Busy,
                "too many logins are being checked at once; retry shortly",
            ));
        };
        let review = tokio::time::timeout(
            self.config.review_timeout,
            self.reviewer.review_token(token, audiences),
        )
        .await;
        let verdict = match review {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                self.count("error");
                return Err(Denial::new(Reason::ReviewUnavailable, e.to_string()));
            }
            Err(_) => {
                self.count("error");
                return Err(Denial::new(
                    Reason::ReviewUnavailable,
                    format!(
                        "the API server did not review the token within {:?}",
                        self.config.review_timeout
                    ),
                ));
            }
        };
        let result = match verdict {
            TokenVerdict::Authenticated { audiences: got, .. }
                if !audiences.is_empty() && !got.iter().any(|g| audiences.contains(g)) =>
            {
                Err(format!(
                    "the token is not valid for the audience(s) {audiences:?}"
                ))
            }
            TokenVerdict::Authenticated { identity, .. } => Ok(Authenticated { identity, expires }),
            TokenVerdict::Rejected { reason } => Err(reason),
        };
        let now = Instant::now();
        match result {
            Ok(a) => {
                self.count("authenticated");
                let left = a
                    .expires
                    .and_then(|e| e.duration_since(SystemTime::now()).ok())
                    .unwrap_or(self.config.max_cache_ttl);
                let ttl = left.min(self.config.max_cache_ttl);
                self.cache
                    .insert(key, Cached::Valid(a.clone()), now + ttl, now);
                self.metrics
                    .token_cache_entries
                    .set(self.cache.len() as i64);
                Ok(a)
            }
            Err(reason) => {
                self.count("rejected");
                let reason = loadstar_common::text::truncate(&reason, 256);
                self.cache.insert(
                    key,
                    Cached::Refused(reason.clone()),
                    now + self.config.negative_ttl,
                    now,
                );
                self.metrics
                    .token_cache_entries
                    .set(self.cache.len() as i64);
                Err(refused(&reason))
            }
        }
    }
}

fn expired() -> Denial {
    Denial::new(
        Reason::InvalidToken,
        "the token has expired; send the rotated one",
    )
}

fn refused(reason: &str) -> Denial {
    Denial::new(
        Reason::InvalidToken,
        if reason.is_empty() {
            "the API server did not accept the token".to_string()
        } else {
            format!("the API server did not accept the token: {reason}")
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::ReviewError;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Accepts `good-*` tokens as user `*` for audience `loadstar`; counts reviews.
    #[derive(Debug, Default)]
    struct Fake {
        reviews: AtomicUsize,
        delay: Option<Duration>,
        down: bool,
    }

    #[async_trait::async_trait]
    impl TokenReviewer for Fake {
        async fn review_token(
            &self,
            token: &str,
            audiences: &[String],
        ) -> Result<TokenVerdict, ReviewError> {
            self.reviews.fetch_add(1, Ordering::SeqCst);
            if let Some(d) = self.delay {
                tokio::time::sleep(d).await;
            }
            if self.down {
                return Err(ReviewError("connection refused".into()));
            }
            Ok(match token.strip_prefix("good-") {
                Some(user) => TokenVerdict::Authenticated {
                    identity: Identity {
                        username: user.into(),
                        ..Identity::default()
                    },
                    audiences: audiences
                        .iter()
                        .filter(|a| *a == "loadstar")
                        .cloned()
                        .collect(),
                },
                None => TokenVerdict::Rejected {
                    reason: "invalid bearer token".into(),
                },
            })
        }
    }

    fn auth(fake: Fake, config: AuthenticatorConfig) -> (Arc<Fake>, Authenticator) {
        let fake = Arc::new(fake);
        let a = Authenticator::new(fake.clone(), config, Metrics::new());
        (fake, a)
    }

    #[tokio::test]
    async fn results_are_cached_both_ways_and_audiences_checked() {
        let (fake, a) = auth(Fake::default(), AuthenticatorConfig::default());
        let aud = vec!["loadstar".to_string()];
        for _ in 0..3 {
            assert_eq!(
                a.authenticate("good-alice", &aud)
                    .await
                    .map(|a| a.identity.username),
                Ok("alice".into())
            );
        }
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 1);
        for _ in 0..3 {
            let e = a.authenticate("bad", &aud).await.expect_err("refused");
            assert_eq!(e.reason, Reason::InvalidToken);
            assert!(e.message.contains("invalid bearer token"), "{e}");
        }
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 2);
        let e = a
            .authenticate("good-alice", &["other".to_string()])
            .await
            .expect_err("wrong audience");
        assert!(e.message.contains("not valid for the audience"), "{e}");
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn expired_jwts_never_reach_the_api_server() {
        use base64::Engine;
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let token = format!("good-x.{}.sig", enc.encode(r#"{"exp":1000}"#));
        let (fake, a) = auth(Fake::default(), AuthenticatorConfig::default());
        let e = a.authenticate(&token, &[]).await.expect_err("expired");
        assert_eq!(e.reason, Reason::InvalidToken);
        assert!(e.message.contains("expired"));
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn reviews_in_flight_are_bounded_and_outages_are_unavailable() {
        let (fake, a) = auth(
            Fake {
                delay: Some(Duration::from_millis(200)),
                ..Fake::default()
            },
            AuthenticatorConfig {
                max_in_flight: 2,
                ..AuthenticatorConfig::default()
            },
        );
        let a = Arc::new(a);
        let tasks: Vec<_> = (0..5)
            .map(|i| {
                let a = a.clone();
                tokio::spawn(async move { a.authenticate(&format!("good-{i}"), &[]).await })
            })
            .collect();
        let mut busy = 0;
        for t in tasks {
            if let Err(e) = t.await.expect("join") {
                assert_eq!(e.reason, Reason::Busy);
                busy += 1;
            }
        }
        assert_eq!(busy, 3);
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 2);

        let (_, down) = auth(
            Fake {
                down: true,
                ..Fake::default()
            },
            AuthenticatorConfig::default(),
        );
        let e = down.authenticate("good-a", &[]).await.expect_err("down");
        assert_eq!(e.reason, Reason::ReviewUnavailable);
        assert_eq!(e.kind(), crate::DenialKind::Unavailable);
        let (_, slow) = auth(
            Fake {
                delay: Some(Duration::from_secs(3)),
                ..Fake::default()
            },
            AuthenticatorConfig {
                review_timeout: Duration::from_millis(50),
                ..AuthenticatorConfig::default()
            },
        );
        let e = slow.authenticate("good-a", &[]).await.expect_err("slow");
        assert_eq!(e.reason, Reason::ReviewUnavailable);
    }

    #[tokio::test]
    async fn concurrent_logins_with_one_token_share_one_review() {
        let (fake, a) = auth(
            Fake {
                delay: Some(Duration::from_millis(100)),
                ..Fake::default()
            },
            AuthenticatorConfig {
                max_in_flight: 2,
                ..AuthenticatorConfig::default()
            },
        );
        let a = Arc::new(a);
        let logins: Vec<_> = (0..50)
            .map(|_| {
                let a = a.clone();
                tokio::spawn(async move { a.authenticate("good-agent", &[]).await })
            })
            .collect();
        for l in logins {
            assert_eq!(
                l.await.expect("join").map(|a| a.identity.username),
                Ok("agent".to_string())
            );
        }
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 1);

        // A leading login abandoned mid-review: the one waiting on it leads its own.
        let leader = {
            let a = a.clone();
            tokio::spawn(async move { a.authenticate("good-other", &[]).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let follower = {
            let a = a.clone();
            tokio::spawn(async move { a.authenticate("good-other", &[]).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        leader.abort();
        assert_eq!(
            follower.await.expect("join").map(|a| a.identity.username),
            Ok("other".to_string())
        );
        assert_eq!(fake.reviews.load(Ordering::SeqCst), 3);
        assert!(a.lock_pending().is_empty(), "no review left pending");
    }
}
