//! hopgate's own HTTP/1.1 codec, built on `httparse`, and the upstream
//! client on it.
//!
//! Owns: heads parsed into byte ranges of the read buffer with their
//! framing facts ([`head`]), the chunked decoder ([`chunked`]), head and
//! body writing ([`write`]), one request/response exchange over a raw
//! pooled socket ([`client`]), the backend's response head made into a
//! response or kept raw ([`response_head`]), and the client-facing server: the
//! connection loop ([`server`]), the request body it streams
//! ([`server_body`]), the responses it writes ([`server_write`]) and
//! their `Date` line ([`date`]); the lazily re-armed timer both sides
//! keep per connection ([`deadline`]); the per-thread spares of the
//! buffers each request fills and drops ([`spare`]). Must not touch: pool bookkeeping,
//! routing, retries.

pub(crate) mod chunked;
pub(crate) mod client;
pub(crate) mod date;
pub(crate) mod deadline;
pub(crate) mod head;
pub(crate) mod response_head;
pub(crate) mod server;
pub(crate) mod server_body;
pub(crate) mod server_write;
pub(crate) mod spare;
pub(crate) mod write;

pub use chunked::{ChunkError, ChunkedDecoder, Step, MAX_CHUNK_LINE};
pub use client::ResponseBody;
pub use head::{
    parse_request, parse_response, parse_trailers, request_body, response_kind, BodyKind, Facts,
    Head, HeadError, HeaderRange, ResponseKind, MAX_HEADERS, MAX_HEAD_BYTES,
};
pub use server::request_from_head;
pub use server_body::{RequestBody, ServerBody};
