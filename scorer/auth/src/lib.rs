//! Who may call the scorer, and as whom: bearer tokens reviewed by the API server (cached
//! and bounded), client certificates, agents bound to the node their pod runs on, the
//! checks before a bind, and server TLS that follows certificate rotation. Pure decisions
//! (`policy`) apart from the seams to the API server (`review`) and the caches around them.
pub mod authn;
pub mod cache;
pub mod denial;
pub mod identity;
pub mod logonce;
pub mod policy;
pub mod review;
pub mod tls;
pub mod token;

pub use authn::{Authenticated, Authenticator, AuthenticatorConfig};
pub use denial::{Denial, DenialKind, Reason};
pub use identity::{BoundPod, Identity, ServiceAccount};
pub use policy::{AgentGrant, AgentPolicy, AuthConfig, QueryAccess};
