//! What an agent stream holds between reports on the Ingest server's decode path, measured by
//! `dhat`'s heap counters: with request bodies cut after each message header
//! ([`loadstar_grpc::aligned::HeaderAligned`]) and each report's bytes split off tonic's
//! buffer, the stream and its node's kept report hold one buffer-sized block; without the cut
//! tonic doubles its buffer (the reason the wrapper exists — if a tonic upgrade stops doing
//! so, the control case here says so). One test function: `dhat` counts the whole process.
use futures::StreamExt;
use http_body::Frame;
use http_body_util::StreamBody;
use loadstar_grpc::aligned::HeaderAligned;
use loadstar_proto::codec::{DECODE_BUFFER_BYTES, EncodedReportCodec};
use loadstar_proto::pb;
use prost::Message;
use prost::bytes::Bytes;
use tonic::codec::Codec;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// A report of `len` encoded bytes, with its gRPC header, as one DATA frame.
fn frame(len: usize, sequence: u64) -> Bytes {
    let mut report = pb::NodeReport {
        node_name: "node-a".into(),
        sequence,
        ..Default::default()
    };
    // The padding's field adds a tag and a length prefix to its bytes.
    let overhead =
        |pad: usize| prost::encoding::key_len(1) + prost::encoding::encoded_len_varint(pad as u64);
    let mut pad = len - report.encoded_len();
    pad -= overhead(pad);
    report.agent_instance = "i".repeat(pad);
    assert_eq!(report.encoded_len(), len, "padding");
    let mut out = vec![0];
    out.extend_from_slice(&(len as u32).to_be_bytes());
    report.encode(&mut out).expect("encodes");
    Bytes::from(out)
}

/// Bytes the heap holds, beyond what it held before, once tonic has decoded `reports` reports
/// of `len` bytes (each its own frame, made as it is read) and only the last one's bytes are
/// kept, as the store keeps a node's: the stream's buffer and the kept report.
fn held_after(len: usize, reports: u64, aligned: bool) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let before = dhat::HeapStats::get().curr_bytes;
    let frames = futures::stream::iter(1..=reports)
        .map(move |s| Ok::<_, tonic::Status>(Frame::data(frame(len, s))));
    let body = StreamBody::new(frames);
    let decoder = EncodedReportCodec.decoder();
    let mut stream = if aligned {
        tonic::Streaming::new_request(decoder, HeaderAligned::new(body), None, None)
    } else {
        tonic::Streaming::new_request(decoder, body, None, None)
    };
    let mut kept: Option<Bytes> = None;
    runtime.block_on(async {
        let mut seen = 0;
        while let Some(report) = stream.next().await {
            let report = report.expect("decodes");
            seen += 1;
            assert_eq!(report.report.sequence, seen);
            assert_eq!(report.encoded.len(), len);
            kept = Some(report.encoded);
        }
        assert_eq!(seen, reports);
    });
    let held = dhat::HeapStats::get().curr_bytes.saturating_sub(before);
    drop((stream, kept));
    eprintln!("{len}-byte reports, cut {aligned}: {held} bytes held");
    held
}

#[test]
fn an_idle_stream_holds_one_block_beside_nothing_else() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let len = 900;
    assert!(len + 5 <= DECODE_BUFFER_BYTES);
    // Beside the block: the stream's boxed decoder and body, and `bytes`' shared-block header.
    const SLACK: usize = 256;
    let aligned = held_after(len, 50, true);
    assert!(
        aligned <= DECODE_BUFFER_BYTES + SLACK,
        "{aligned} bytes held with the header cut, buffer {DECODE_BUFFER_BYTES}"
    );
    let uncut = held_after(len, 50, false);
    assert!(
        uncut >= aligned + 600,
        "{uncut} bytes held without the cut against {aligned} with it: tonic no longer \
         reserves a message's length on top of its buffered body, and `HeaderAligned` may no \
         longer be needed"
    );
    // A report larger than the buffer gets a block near its size, not a doubled one beside it.
    let big = 3000;
    let held = held_after(big, 20, true);
    assert!(
        held < 2 * (big + 5) + SLACK,
        "{held} bytes held for {big}-byte reports"
    );
}
