//! Loadstar's wire contract as Rust: the generated `loadstar.v1` messages (and, with the
//! default `grpc` feature, its tonic clients and servers), its descriptor set
//! for reflection, and the validating conversions between wire and domain types. Kept apart
//! from `loadstar-common` so that the policy layer builds without tonic or prost.
#[cfg(feature = "grpc")]
pub mod codec;
pub mod convert;
pub mod limits;

/// Generated `loadstar.v1` protocol types, and with the `grpc` feature its clients and
/// servers.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/loadstar.v1.rs"));
}

/// The scorer's `loadstar.v1.Ingest` server with each report's wire bytes alongside it
/// ([`codec::EncodedReport`]); the wire and route are `pb::ingest_server`'s.
#[cfg(feature = "grpc")]
#[allow(missing_docs, clippy::all)]
pub mod encoded {
    include!(concat!(env!("OUT_DIR"), "/encoded/loadstar.v1.Ingest.rs"));
}

/// Encoded `FileDescriptorSet` of `loadstar.v1`, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/loadstar_v1_descriptor.bin"));
