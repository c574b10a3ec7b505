//! Generates the `loadstar.v1` gRPC code from this folder's `.proto` files at build time, with a vendored protoc so
//! a fresh machine needs no system install, and writes the descriptor set for reflection.
use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not baked in at compile time: a build-script binary cached from a
    // checkout at another path would otherwise look for the .proto files there.
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join(".");
    let files = [
        "types.proto",
        "ingest.proto",
        "scorer.proto",
        "scheduler.proto",
    ]
    .map(|f| root.join("loadstar/v1").join(f));
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let out = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::create_dir_all(out.join("encoded"))?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Clients and servers only with the `grpc` feature: the messages need prost alone.
    let grpc = env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        // tonic-prost's codec with smaller per-stream buffers (src/codec.rs).
        .codec_path("crate::codec::CompactCodec")
        .file_descriptor_set_path(out.join("loadstar_v1_descriptor.bin"))
        .compile_with_config(config, &files, &[root])?;
    if grpc {
        // The scorer's Ingest server once more, by hand: the same route and wire, but each
        // report comes with the bytes it was decoded from (`codec::EncodedReport`), which the
        // store keeps instead of encoding the report again.
        let report = tonic_build::manual::Method::builder()
            .name("report")
            .route_name("Report")
            .input_type("crate::codec::EncodedReport")
            .output_type("crate::pb::ReportAck")
            .codec_path("crate::codec::EncodedReportCodec")
            .client_streaming()
            .server_streaming()
            .build();
        let ingest = tonic_build::manual::Service::builder()
            .name("Ingest")
            .package("loadstar.v1")
            .method(report)
            .build();
        tonic_build::manual::Builder::new()
            .build_client(false)
            .out_dir(out.join("encoded"))
            .compile(&[ingest]);
    }
    Ok(())
}
