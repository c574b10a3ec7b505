//! The protobuf codec of every generated service: tonic-prost's, with smaller per-stream
//! buffers. tonic gives each stream an 8 KiB decode buffer and an 8 KiB encode buffer and
//! keeps them for the stream's life; the scorer holds one agent stream per node, so at 10 000
//! nodes that default alone is ~160 MiB of the scorer's memory for reports of ~1 KiB and
//! acks of a few bytes (here 1 KiB to decode, 64 bytes to encode). Buffers still grow to
//! fit any larger message (tonic reserves what a message needs), so only idle capacity
//! shrinks. Selected in `build.rs` with
//! `codec_path`, as tonic's `codec_buffers` example does. The scorer's Ingest server uses
//! [`EncodedReportCodec`], which also keeps each report's bytes.
use prost::Message;
use prost::bytes::{Buf, BufMut, Bytes};
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstCodec;

use crate::pb;

/// Initial decode buffer per stream, bytes. A report of the default agent encodes to a few
/// hundred bytes up to ~2 KiB with many pods. On the Ingest server each report's bytes are
/// split off this buffer ([`EncodedReportDecoder`]), so between reports a stream keeps only the
/// tail of the block its last report came in, and the next report gets a block of this size
/// (or of its own size, when larger).
pub const DECODE_BUFFER_BYTES: usize = 1024;
/// Initial (and idle) encode buffer per stream, bytes. What the scorer sends on its
/// long-lived streams are acks of ~20 bytes each with their header (a rejection's reason
/// more); a larger message (a `Score` response, an agent's report) grows its buffer as it
/// needs. Below 1 KiB `bytes` keeps no capacity hint, so a buffer replaced while the previous
/// frame is still in flight is allocated at the size the next message needs: more small
/// allocations, less idle memory per stream (256 bytes here until 2026-11-28: ~1 MB at
/// 5 000 agent streams).
pub const ENCODE_BUFFER_BYTES: usize = 64;
/// tonic's default: how much encoded data a response stream buffers before yielding.
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

fn settings(buffer_bytes: usize) -> BufferSettings {
    BufferSettings::new(buffer_bytes, YIELD_THRESHOLD_BYTES)
}

/// [`ProstCodec`] with [`DECODE_BUFFER_BYTES`] decode and [`ENCODE_BUFFER_BYTES`] encode
/// buffers.
#[derive(Debug)]
pub struct CompactCodec<T, U>(std::marker::PhantomData<(T, U)>);

impl<T, U> Default for CompactCodec<T, U> {
    fn default() -> Self {
        CompactCodec(std::marker::PhantomData)
    }
}

impl<T, U> Codec for CompactCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = <ProstCodec<T, U> as Codec>::Decoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings(ENCODE_BUFFER_BYTES))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings(DECODE_BUFFER_BYTES))
    }
}

/// A report as it came: decoded, and the bytes it was decoded from, which the scorer keeps
/// for `GetNode` and watches instead of encoding the report again (at 10 000 agents that
/// encoding was ~6 % of the ingest CPU). The bytes are the stream's decode buffer itself, split
/// off without a copy: the node's stored report then owns the block tonic read it into, and
/// the stream's buffer keeps only that block's tail and takes a fresh block for the next
/// report, so an idle stream holds no buffer of its own beside the report the store keeps
/// (~1 KiB less per node than a copy next to a buffer that keeps its size).
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedReport {
    /// The report.
    pub report: pb::NodeReport,
    /// Its protobuf encoding as received (exactly one message, no gRPC framing).
    pub encoded: Bytes,
}

/// The codec of the scorer's Ingest server: reports in as [`EncodedReport`], acks out as
/// [`CompactCodec`] encodes them, with its buffer sizes.
#[derive(Debug, Default)]
pub struct EncodedReportCodec;

impl Codec for EncodedReportCodec {
    type Encode = pb::ReportAck;
    type Decode = EncodedReport;
    type Encoder = <ProstCodec<pb::ReportAck, pb::NodeReport> as Codec>::Encoder;
    type Decoder = EncodedReportDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<pb::ReportAck, pb::NodeReport>::raw_encoder(settings(ENCODE_BUFFER_BYTES))
    }

    fn decoder(&mut self) -> Self::Decoder {
        EncodedReportDecoder::default()
    }
}

/// Decodes one stream's reports and keeps their bytes (one decoder per stream).
#[derive(Debug, Default)]
pub struct EncodedReportDecoder {
    /// The stream's largest message so far, bytes.
    largest: usize,
}

impl EncodedReportDecoder {
    /// Whether a message of `len` bytes is split off the stream's buffer rather than copied:
    /// unless it is less than half the stream's largest message. tonic's buffer grows to fit
    /// the largest message, and a small report split off such a block would keep all of it
    /// alive in the store (a 1 MiB block for a 1 KiB report, for as long as the tail lasts);
    /// copied, it holds only its own bytes, as before the split.
    fn splits(&mut self, len: usize) -> bool {
        self.largest = self.largest.max(len);
        len.saturating_mul(2) >= self.largest
    }
}

impl Decoder for EncodedReportDecoder {
    type Item = EncodedReport;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<EncodedReport>, Status> {
        let split = self.splits(buf.remaining());
        encoded_report(buf, split).map(Some)
    }

    fn buffer_settings(&self) -> BufferSettings {
        settings(DECODE_BUFFER_BYTES)
    }
}

/// One report from `buf` (all of it), with its bytes: with `split`, taken without a copy where
/// `buf` allows (`DecodeBuf::copy_to_bytes` splits tonic's `BytesMut`); else copied.
fn encoded_report(mut buf: impl Buf, split: bool) -> Result<EncodedReport, Status> {
    let len = buf.remaining();
    let encoded = if split {
        buf.copy_to_bytes(len)
    } else {
        let mut copy = Vec::with_capacity(len);
        copy.put(buf);
        Bytes::from(copy)
    };
    // As tonic-prost words an undecodable message.
    let report =
        pb::NodeReport::decode(&encoded[..]).map_err(|e| Status::internal(e.to_string()))?;
    Ok(EncodedReport { report, encoded })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_comes_with_the_bytes_it_came_in() {
        let report = pb::NodeReport {
            node_name: "n1".into(),
            sequence: 7,
            ack_interval_seconds: 10.0,
            ..Default::default()
        };
        let mut bytes = report.encode_to_vec();
        // A field this build does not know (a newer agent's): kept in the bytes, which
        // encoding the decoded report again would have dropped.
        bytes.extend_from_slice(&[0xf8, 0x06, 0x01]); // field 111, varint 1
        for split in [true, false] {
            let got = encoded_report(&bytes[..], split).expect("decodes");
            assert_eq!(got.report, report);
            assert_eq!(&got.encoded[..], &bytes[..]);
            // Split over two chunks, as a stream's buffer may hold it.
            let (a, b) = bytes.split_at(5);
            let got = encoded_report(a.chain(b), split).expect("decodes");
            assert_eq!(&got.encoded[..], &bytes[..]);
            let e = encoded_report(&[0x0a, 0x64, b'a'][..], split).expect_err("truncated");
            assert_eq!(e.code(), tonic::Code::Internal);
        }
    }

    #[test]
    fn reports_are_split_off_the_buffer_unless_small_beside_the_largest() {
        let report = |n: usize| {
            pb::NodeReport {
                node_name: "n".repeat(n),
                ..Default::default()
            }
            .encode_to_vec()
        };
        let mut decoder = EncodedReportDecoder::default();
        let mut take = |bytes: Vec<u8>| {
            let mut buf = prost::bytes::BytesMut::from(&bytes[..]);
            let range = buf.as_ptr_range();
            let split = decoder.splits(buf.len());
            let got = encoded_report(&mut buf, split).expect("decodes");
            assert_eq!(&got.encoded[..], &bytes[..]);
            // Split: the bytes are the buffer's own.
            range.contains(&got.encoded.as_ptr())
        };
        assert!(take(report(900)), "a first report is split off");
        assert!(take(report(600)), "one over half the largest too");
        assert!(take(report(60_000)), "a larger one too");
        assert!(
            !take(report(900)),
            "a small one after a large one is copied"
        );
        assert!(take(report(40_000)));
    }

    #[test]
    fn the_hand_made_ingest_server_is_the_generated_ones_service() {
        assert_eq!(
            crate::encoded::ingest_server::SERVICE_NAME,
            crate::pb::ingest_server::SERVICE_NAME
        );
    }
}
