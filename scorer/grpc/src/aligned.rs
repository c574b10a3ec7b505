//! Hands an agent stream's request body to tonic in pieces that end after each gRPC message
//! header, so tonic's per-stream decode buffer is not doubled.
//!
//! tonic's decoder, on reading a message's 5-byte header, reserves the message's length *on
//! top of* the bytes already buffered. When a report arrives as one HTTP/2 DATA frame
//! (header and body together, as every gRPC client sends it), the body is already in the
//! buffer at that moment, so a 1 KiB buffer holding a 900-byte report grows to ~2 KiB, and
//! keeps that size for the stream's life: at one stream per node, ~1 KiB per node of memory
//! that is never used (issue #21's ≤ 10 KB per node). Cut after the header, the body is not
//! yet buffered when tonic reserves, and for a message up to the buffer's size the reservation
//! fits. Only where the pieces end changes: the bytes, their order, trailers and errors pass
//! through as they came (`Bytes` slices of the same frame, no copy). A frame that carries
//! several messages is handed on one piece per poll, so its remainder (at most one frame) may
//! wait in [`HeaderAligned`] while the stream waits on its ack or pacing.
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use tonic::codegen::Service;
use tonic::server::NamedService;

/// The length of a gRPC message header: a compression flag and a big-endian `u32` length.
const HEADER_BYTES: usize = tonic::codec::HEADER_SIZE;

/// Where the next byte of the stream falls in gRPC's length-prefixed framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// In a header, this many of its bytes seen, and the length bytes seen so far.
    Header { seen: usize, length: u32 },
    /// In a message body, this many bytes of it still to come.
    Body { left: u64 },
}

impl Position {
    const START: Position = Position::Header { seen: 0, length: 0 };

    /// How many of `data`'s bytes go into the piece that ends after the first header
    /// completed in `data` (all of `data` when none completes in it), and the position after
    /// them.
    fn cut(mut self, data: &[u8]) -> (usize, Position) {
        let mut at = 0;
        while at < data.len() {
            match self {
                Position::Header { seen, length } => {
                    // seen < HEADER_BYTES: a complete header moves to its body.
                    let byte = data[at];
                    at += 1;
                    let length = if seen == 0 {
                        length // the compression flag
                    } else {
                        (length << 8) | u32::from(byte)
                    };
                    self = if seen + 1 == HEADER_BYTES {
                        Position::Body {
                            left: u64::from(length),
                        }
                    } else {
                        Position::Header {
                            seen: seen + 1,
                            length,
                        }
                    };
                    if let Position::Body { left } = self {
                        if left == 0 {
                            self = Position::START;
                        }
                        return (at, self);
                    }
                }
                Position::Body { left } => {
                    let take = left.min((data.len() - at) as u64);
                    at += take as usize;
                    let left = left - take;
                    self = if left == 0 {
                        Position::START
                    } else {
                        Position::Body { left }
                    };
                }
            }
        }
        (at, self)
    }
}

/// A request body whose DATA pieces end after each gRPC message header (see the module).
#[derive(Debug)]
pub struct HeaderAligned<B> {
    inner: B,
    /// What is left of the DATA frame being handed on.
    rest: Bytes,
    position: Position,
}

impl<B> HeaderAligned<B> {
    /// Wraps `inner`, which starts at a message boundary (a request body does).
    pub fn new(inner: B) -> Self {
        HeaderAligned {
            inner,
            rest: Bytes::new(),
            position: Position::START,
        }
    }

    /// The next piece of `self.rest`.
    fn piece(&mut self) -> Bytes {
        let (n, position) = self.position.cut(&self.rest);
        self.position = position;
        self.rest.split_to(n)
    }
}

impl<B> Body for HeaderAligned<B>
where
    B: Body + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if this.rest.is_empty() {
            let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            };
            match frame.into_data() {
                Ok(mut data) => this.rest = data.copy_to_bytes(data.remaining()),
                Err(frame) => {
                    // Trailers (or another kind): on as they came. A non-data frame carries
                    // no bytes, so the framing position is unchanged.
                    return Poll::Ready(Some(Ok(
                        frame.map_data(|mut d| d.copy_to_bytes(d.remaining()))
                    )));
                }
            }
        }
        Poll::Ready(Some(Ok(Frame::data(this.piece()))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

/// A gRPC service whose requests' bodies are [`HeaderAligned`]; same name, same responses.
#[derive(Debug, Clone)]
pub struct AlignRequests<S>(pub S);

impl<S: NamedService> NamedService for AlignRequests<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<tonic::body::Body>> for AlignRequests<S>
where
    S: Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> S::Future {
        self.0
            .call(request.map(|b| tonic::body::Body::new(HeaderAligned::new(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use proptest::prelude::*;

    /// `len`-byte message with header, flag 0.
    fn message(len: usize, fill: u8) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&(len as u32).to_be_bytes());
        m.extend(std::iter::repeat_n(fill, len));
        m
    }

    fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    /// The pieces `HeaderAligned` makes of `frames`.
    fn pieces(frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let stream = futures::stream::iter(
            frames
                .into_iter()
                .map(|f| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(f)))),
        );
        let mut body = HeaderAligned::new(StreamBody::new(stream));
        let mut out = Vec::new();
        block_on(async {
            while let Some(frame) = body.frame().await {
                out.push(frame.expect("frame").into_data().expect("data").to_vec());
            }
        });
        out
    }

    #[test]
    fn a_frame_with_header_and_body_is_cut_after_the_header() {
        let m = message(900, 7);
        assert_eq!(
            pieces(vec![m.clone()]),
            vec![m[..5].to_vec(), m[5..].to_vec()]
        );
    }

    #[test]
    fn each_following_header_ends_its_piece() {
        // Two messages and half a third in one frame, the rest in the next.
        let (a, b, c) = (message(3, 1), message(0, 2), message(4, 3));
        let mut f1 = [a.clone(), b.clone()].concat();
        f1.extend_from_slice(&c[..7]);
        let f2 = c[7..].to_vec();
        assert_eq!(
            pieces(vec![f1, f2]),
            vec![
                a[..5].to_vec(),
                [&a[5..], &b[..]].concat(), // b is empty: its header ends the piece
                c[..5].to_vec(),
                c[5..7].to_vec(),
                c[7..].to_vec(),
            ]
        );
    }

    #[test]
    fn a_header_split_over_frames_ends_where_it_completes() {
        let m = message(10, 9);
        assert_eq!(
            pieces(vec![m[..2].to_vec(), m[2..8].to_vec(), m[8..].to_vec()]),
            vec![
                m[..2].to_vec(),
                m[2..5].to_vec(),
                m[5..8].to_vec(),
                m[8..].to_vec()
            ]
        );
    }

    #[test]
    fn trailers_pass_through() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let frames = vec![
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(message(1, 5)))),
            Ok(Frame::trailers(trailers.clone())),
        ];
        let mut body = HeaderAligned::new(StreamBody::new(futures::stream::iter(frames)));
        let got = block_on(async {
            let mut got = Vec::new();
            while let Some(f) = body.frame().await {
                got.push(f.expect("frame"));
            }
            got
        });
        assert_eq!(got.len(), 3);
        assert_eq!(got[2].trailers_ref(), Some(&trailers));
    }

    proptest! {
        /// However messages are split into frames, the pieces carry the same bytes in the
        /// same order, and every header ends a piece (so no piece holds a header and any
        /// byte of its own body).
        #[test]
        fn same_bytes_and_every_header_ends_a_piece(
            lens in proptest::collection::vec(0usize..40, 1..6),
            cuts in proptest::collection::vec(1usize..30, 0..20),
        ) {
            let stream: Vec<u8> = lens.iter().enumerate()
                .flat_map(|(i, &l)| message(l, i as u8)).collect();
            let mut frames = Vec::new();
            let mut at = 0;
            for c in cuts {
                if at >= stream.len() { break; }
                let end = (at + c).min(stream.len());
                frames.push(stream[at..end].to_vec());
                at = end;
            }
            if at < stream.len() { frames.push(stream[at..].to_vec()); }
            let got = pieces(frames);
            prop_assert_eq!(got.concat(), stream.clone());
            prop_assert!(got.iter().all(|p| !p.is_empty()));
            // Each header's end is a piece boundary.
            let mut ends = std::collections::HashSet::new();
            let mut off = 0;
            for p in &got { off += p.len(); ends.insert(off); }
            let mut pos = 0;
            for &l in &lens {
                prop_assert!(ends.contains(&(pos + 5)), "header ending at {} not a boundary", pos + 5);
                pos += 5 + l;
            }
        }
    }
}
