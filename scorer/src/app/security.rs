//! The security flags shared by `serve` and `standalone`: TLS for the gRPC and extender
//! ports (files reloaded on rotation, optional client certificates) and who may call what
//! (`docs/security.md`). `serve` authenticates by default; turning it off takes
//! `--insecure-allow-unauthenticated`.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use loadstar_auth::tls::{ServerTls, TlsFiles};
use loadstar_auth::{AgentPolicy, AuthConfig, AuthenticatorConfig, QueryAccess, ServiceAccount};
use loadstar_store::metrics::Metrics;

use crate::app::AppError;

/// TLS flags of one port.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// PEM certificate chain for the gRPC port: with --tls-key it serves TLS only. The
    /// files are re-read every --tls-reload-interval-seconds; a changed, valid pair is used
    /// for new connections without a restart.
    #[arg(long, env = "LOADSTAR_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key matching --tls-cert.
    #[arg(long, env = "LOADSTAR_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle for client certificates (mTLS): a verified certificate authenticates
    /// its holder as user CN, groups O (as the API server reads client certificates).
    #[arg(long, env = "LOADSTAR_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: refuse connections without a client certificate (agents then
    /// need one too).
    #[arg(long, requires = "tls_client_ca")]
    pub tls_require_client_cert: bool,
    /// Seconds between checks of the TLS files (gRPC and extender ports).
    #[arg(long, default_value_t = 10.0)]
    pub tls_reload_interval_seconds: f64,
}

impl TlsArgs {
    /// The gRPC port's TLS, if configured; its reload task runs until the process ends.
    pub fn grpc(&self, metrics: &Arc<Metrics>) -> Result<Option<Arc<ServerTls>>, AppError> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
            require_client_cert: self.tls_require_client_cert,
        };
        self.serve(files, &[b"h2"], metrics).map(Some)
    }

    /// The extender port's TLS from its flags (HTTP/1.1; with a client CA, client
    /// certificates are required), reloaded like the gRPC port's, if configured.
    pub fn extender(
        &self,
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
        metrics: &Arc<Metrics>,
    ) -> Result<Option<Arc<ServerTls>>, AppError> {
        let (Some(cert), Some(key)) = (cert, key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            client_ca: client_ca.map(Path::to_path_buf),
            require_client_cert: client_ca.is_some(),
        };
        self.serve(files, &[b"http/1.1"], metrics)
            .map(Some)
            .map_err(|e| AppError::Other(format!("extender: {e}")))
    }

    /// TLS for a port offering `alpn`, reloaded every --tls-reload-interval-seconds.
    pub fn serve(
        &self,
        files: TlsFiles,
        alpn: &[&[u8]],
        metrics: &Arc<Metrics>,
    ) -> Result<Arc<ServerTls>, AppError> {
        let every = self.tls_reload_interval_seconds;
        if !(every.is_finite() && every > 0.0 && every <= 86_400.0) {
            return Err(AppError::Other(format!(
                "--tls-reload-interval-seconds must be in (0, 86400], got {every}"
            )));
        }
        let tls = Arc::new(
            ServerTls::load(files, alpn, metrics.clone())
                .map_err(|e| AppError::Other(e.to_string()))?,
        );
        tls.watch(Duration::from_secs_f64(every));
        Ok(tls)
    }
}

/// Who may query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QueryAccessArg {
    /// Anyone who can reach the port.
    Open,
    /// Any authenticated caller (token or client certificate).
    Authenticated,
}

/// Authentication and authorisation flags of `serve`.
#[derive(Debug, Clone, Args)]
pub struct AuthArgs {
    /// Serve with no authentication at all: anyone who can reach the port may report load
    /// for any node no live agent owns, query, and Bind with the scorer's own credentials.
    /// For tests and isolated networks only.
    #[arg(long)]
    pub insecure_allow_unauthenticated: bool,
    /// Service accounts (namespace/name) whose pod-bound tokens agents present;
    /// comma-separated.
    #[arg(
        long = "agent-service-account",
        value_delimiter = ',',
        default_value = "loadstar/loadstar-agent"
    )]
    pub agent_service_accounts: Vec<String>,
    /// Audience agent tokens must be issued for (the DaemonSet's projected token);
    /// comma-separated.
    #[arg(
        long = "agent-audience",
        value_delimiter = ',',
        default_value = "loadstar"
    )]
    pub agent_audiences: Vec<String>,
    /// Audiences client tokens (Bind, queries) must be valid for; comma-separated
    /// [default: the API server's own, so ServiceAccount and `kubectl create token` tokens
    /// work].
    #[arg(long = "client-audience", value_delimiter = ',')]
    pub client_audiences: Vec<String>,
    /// Who may call Score, ListNodes, GetNode, WatchNodes and ListProfiles.
    #[arg(long, value_enum, default_value = "authenticated")]
    pub query_access: QueryAccessArg,
    /// Let Scheduler.Bind bind pods whose schedulerName is not one of the profiles (the
    /// caller still needs `create pods/binding` on the pod).
    #[arg(long)]
    pub bind_other_schedulers: bool,
    /// Token review results cached at most.
    #[arg(long, default_value_t = AuthenticatorConfig::default().cache_capacity)]
    pub token_cache_size: usize,
    /// Longest a valid token's review is trusted before it is asked again, seconds.
    #[arg(long, default_value_t = AuthenticatorConfig::default().max_cache_ttl.as_secs_f64())]
    pub token_cache_ttl_seconds: f64,
    /// Token reviews in flight at most (more logins at once are told to retry).
    #[arg(long, default_value_t = AuthenticatorConfig::default().max_in_flight)]
    pub max_token_reviews_in_flight: usize,
}

impl AuthArgs {
    /// The rules these flags set.
    pub fn config(&self) -> Result<AuthConfig, AppError> {
        let service_accounts = self
            .agent_service_accounts
            .iter()
            .map(|s| s.parse::<ServiceAccount>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| AppError::Other(format!("--agent-service-account: {e}")))?;
        if service_accounts.is_empty() {
            return Err(AppError::Other(
                "--agent-service-account needs at least one namespace/name".into(),
            ));
        }
        Ok(AuthConfig {
            agents: AgentPolicy {
                service_accounts,
                audiences: self
                    .agent_audiences
                    .iter()
                    .filter(|a| !a.is_empty())
                    .cloned()
                    .collect(),
            },
            queries: match self.query_access {
                QueryAccessArg::Open => QueryAccess::Open,
                QueryAccessArg::Authenticated => QueryAccess::Authenticated,
            },
            client_audiences: self
                .client_audiences
                .iter()
                .filter(|a| !a.is_empty())
                .cloned()
                .collect(),
        })
    }

    /// The token cache settings these flags set.
    pub fn authenticator(&self) -> Result<AuthenticatorConfig, AppError> {
        let ttl = self.token_cache_ttl_seconds;
        if !(ttl.is_finite() && (0.0..=86_400.0).contains(&ttl)) {
            return Err(AppError::Other(format!(
                "--token-cache-ttl-seconds must be in [0, 86400], got {ttl}"
            )));
        }
        Ok(AuthenticatorConfig {
            cache_capacity: self.token_cache_size.max(1),
            max_cache_ttl: Duration::from_secs_f64(ttl),
            max_in_flight: self.max_token_reviews_in_flight.max(1),
            ..AuthenticatorConfig::default()
        })
    }
}
