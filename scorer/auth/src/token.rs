//! Bearer tokens as they arrive: taken from the `authorization` header with shape checks
//! before anything reaches the API server, the expiry a JWT carries, and the digest the
//! cache keys on (the cache never holds a token itself).
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;

/// Longest token accepted (service-account JWTs are ~1 KiB; the header limit of most
/// proxies is 8–16 KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// What is wrong with the credentials as sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No `authorization` header.
    #[error("no credentials: send `authorization: Bearer <token>` or a client certificate")]
    Missing,
    /// A header that is not `Bearer <token>`.
    #[error("the authorization header is not `Bearer <token>`")]
    NotBearer,
    /// Longer than [`MAX_TOKEN_BYTES`].
    #[error("the bearer token is {0} bytes long, more than the limit {MAX_TOKEN_BYTES}")]
    TooLong(usize),
    /// Characters no token has (space, control, non-ASCII).
    #[error("the bearer token contains characters a token cannot have")]
    BadCharacters,
}

/// The token of an `authorization` header value (`Bearer <token>`, scheme case-insensitive).
pub fn bearer(header: &[u8]) -> Result<&str, TokenError> {
    if header.len() > MAX_TOKEN_BYTES + 7 {
        return Err(TokenError::TooLong(header.len().saturating_sub(7)));
    }
    let text = std::str::from_utf8(header).map_err(|_| TokenError::BadCharacters)?;
    let (scheme, token) = text.split_once(' ').ok_or(TokenError::NotBearer)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(TokenError::NotBearer);
    }
    let token = token.trim_matches(' ');
    if token.is_empty() {
        return Err(TokenError::NotBearer);
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLong(token.len()));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenError::BadCharacters);
    }
    Ok(token)
}

/// The `exp` claim of a JWT, read without checking the signature: used only to bound how
/// long a result the API server already vouched for is trusted. `None` for tokens that are
/// not JWTs (static tokens) or carry no expiry.
pub fn expiry(token: &str) -> Option<SystemTime> {
    #[derive(serde::Deserialize)]
    struct Claims {
        exp: Option<f64>,
    }
    let mut parts = token.split('.');
    let (_header, payload, _sig) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let exp = serde_json::from_slice::<Claims>(&bytes).ok()?.exp?;
    (exp.is_finite() && exp > 0.0 && exp < 1e11).then(|| UNIX_EPOCH + Duration::from_secs_f64(exp))
}

/// SHA-256 of the token and the audiences asked for: the cache's key.
pub fn digest(token: &str, audiences: &[String]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(token.as_bytes());
    for a in audiences {
        ctx.update(b"\0");
        ctx.update(a.as_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(payload: &str) -> String {
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.sig",
            enc.encode(r#"{"alg":"RS256"}"#),
            enc.encode(payload)
        )
    }

    #[test]
    fn bearer_headers_are_checked_before_review() {
        assert_eq!(bearer(b"Bearer abc.def"), Ok("abc.def"));
        assert_eq!(bearer(b"bearer  abc "), Ok("abc"));
        assert_eq!(bearer(b"Basic dXNlcjpwYXNz"), Err(TokenError::NotBearer));
        assert_eq!(bearer(b"Bearer"), Err(TokenError::NotBearer));
        assert_eq!(bearer(b"Bearer "), Err(TokenError::NotBearer));
        assert_eq!(bearer(b"Bearer a\x01b"), Err(TokenError::BadCharacters));
        assert_eq!(bearer(b"Bearer a b"), Err(TokenError::BadCharacters));
        assert_eq!(bearer(b"Bearer \xff"), Err(TokenError::BadCharacters));
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES + 1));
        assert!(matches!(
            bearer(long.as_bytes()),
            Err(TokenError::TooLong(_))
        ));
        let huge = vec![b'a'; 10 * MAX_TOKEN_BYTES];
        assert!(matches!(bearer(&huge), Err(TokenError::TooLong(_))));
    }

    #[test]
    fn expiry_comes_from_the_exp_claim() {
        let t = jwt(r#"{"iss":"x","exp":1700000000}"#);
        assert_eq!(
            expiry(&t),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(expiry(&jwt(r#"{"iss":"x"}"#)), None);
        assert_eq!(expiry(&jwt(r#"{"exp":"soon"}"#)), None);
        assert_eq!(expiry(&jwt(r#"{"exp":-5}"#)), None);
        assert_eq!(expiry(&jwt(r#"{"exp":1e300}"#)), None);
        assert_eq!(expiry("static-token"), None);
        assert_eq!(expiry("a.!!!.c"), None);
        assert_eq!(expiry("a.b.c.d"), None);
    }

    #[test]
    fn digests_differ_by_token_and_audience() {
        let a = digest("t", &["loadstar".into()]);
        assert_eq!(a, digest("t", &["loadstar".into()]));
        assert_ne!(a, digest("t", &[]));
        assert_ne!(a, digest("u", &["loadstar".into()]));
        assert_ne!(
            digest("t", &["a".into(), "b".into()]),
            digest("t", &["ab".into()])
        );
    }
}
