//! Loadstar's wire contract as Rust: the generated `loadstar.v1` gRPC code, its descriptor set
//! for reflection, and the validating conversions between wire and domain types. Kept apart
//! from `loadstar-common` so that the policy layer builds without tonic or prost.
pub mod convert;
pub mod limits;

/// Generated `loadstar.v1` protocol types, clients and servers.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("loadstar.v1");
}

/// Encoded `FileDescriptorSet` of `loadstar.v1`, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("loadstar_v1_descriptor");
