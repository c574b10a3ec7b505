//! `--scorer` values: parsed and checked once at start, so that a typo fails the agent at
//! once instead of turning into a reconnect loop, and kept in the form the connection needs.
use std::net::IpAddr;

use tonic::transport::Uri;

use super::error::ReportError;

/// One `--scorer` value: `http://host:port` or `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScorerTarget {
    /// As given.
    pub original: String,
    /// `https`.
    pub tls: bool,
    /// Host name or IP literal (without brackets).
    pub host: String,
    /// Port (default 80 for http, 443 for https).
    pub port: u16,
}

impl ScorerTarget {
    /// Parses and checks a `--scorer` value.
    pub fn parse(s: &str) -> Result<ScorerTarget, ReportError> {
        let invalid = |reason: &str| ReportError::InvalidTarget {
            target: s.to_string(),
            reason: reason.to_string(),
        };
        let uri: Uri = s.parse().map_err(|_| invalid("not a URI"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(invalid("scheme must be http or https")),
        };
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(invalid("must not have a path"));
        }
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| invalid("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(ScorerTarget {
            original: s.to_string(),
            tls,
            host,
            port,
        })
    }

    /// The IP address when the host is a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// `scheme://host:port`, the `:authority` requests carry (IPv6 literals in brackets).
    pub(super) fn origin(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        match self.ip() {
            Some(IpAddr::V6(ip)) => format!("{scheme}://[{ip}]:{}", self.port),
            _ => format!("{scheme}://{}:{}", self.host, self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = ScorerTarget::parse("http://scorer.loadstar-system:7443").expect("valid");
        assert_eq!(
            (t.tls, t.host.as_str(), t.port),
            (false, "scorer.loadstar-system", 7443)
        );
        assert_eq!(t.ip(), None);
        let t = ScorerTarget::parse("https://[::1]:50051").expect("valid");
        assert_eq!(t.ip(), Some("::1".parse().expect("ip")));
        assert_eq!(t.origin(), "https://[::1]:50051");
        assert_eq!(
            ScorerTarget::parse("http://10.0.0.1").expect("valid").port,
            80
        );
        for bad in ["10.0.0.1:80", "ftp://x:1", "http://x:1/path", "http://"] {
            assert!(ScorerTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
