//! Shared core of Loadstar: the `loadstar.v1` wire protocol, sliding-window statistics,
//! Kubernetes quantities and the domain types the agent, scorer and simulator share.
pub mod convert;
pub mod model;
pub mod quantity;
pub mod window;

/// Generated `loadstar.v1` protocol types, clients and servers.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("loadstar.v1");
}

/// Encoded `FileDescriptorSet` of `loadstar.v1`, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("loadstar_v1_descriptor");

/// The version of this build, reported by agents and shown by `--version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
