//! A codec that sends raw bytes, to put garbage on the wire, and an Ingest stream of such
//! frames.
use bytes::{Buf, BufMut};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder, Streaming};
use tonic::transport::Channel;

/// Opens `/loadstar.v1.Ingest/Report` on `channel` with `request`'s frames sent as they are
/// (each one gRPC message), and its answers as raw bytes.
pub async fn ingest(
    channel: Channel,
    request: tonic::Request<tokio_stream::Iter<std::vec::IntoIter<Vec<u8>>>>,
) -> Result<tonic::Response<Streaming<Vec<u8>>>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = http::uri::PathAndQuery::from_static("/loadstar.v1.Ingest/Report");
    grpc.streaming(request, path, RawCodec).await
}

#[derive(Default)]
pub struct RawCodec;
pub struct RawEncoder;
pub struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}
impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut v = vec![0; src.remaining()];
        src.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}
impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}
