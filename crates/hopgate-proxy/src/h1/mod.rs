//! hopgate's own HTTP/1.1 codec, built on `httparse`, and the upstream
//! client on it.
//!
//! Owns: heads parsed into byte ranges of the read buffer with their
//! framing facts ([`head`]), the chunked decoder ([`chunked`]), head and
//! body writing ([`write`]) and one request/response exchange over a raw
//! pooled socket ([`client`]). Must not touch: pool bookkeeping, routing,
//! retries.

pub(crate) mod chunked;
pub(crate) mod client;
pub(crate) mod head;
pub(crate) mod write;

pub use chunked::{ChunkError, ChunkedDecoder, Step, MAX_CHUNK_LINE};
pub use client::ResponseBody;
pub use head::{
    parse_request, parse_response, parse_trailers, request_body, response_kind, BodyKind, Facts,
    Head, HeadError, HeaderRange, ResponseKind, MAX_HEADERS, MAX_HEAD_BYTES,
};
