//! hopgate's own HTTP/1.1 codec, built on `httparse`: a leaf. Nothing
//! here names the request path, the pool or the gateway's body type; they
//! plug in through the traits below and [`server::Handler`] and
//! [`client::Connection`].
//!
//! Owns: heads parsed into byte ranges of the read buffer with their
//! framing facts ([`head`]), the chunked decoder ([`chunked`]), the one
//! body reader both sides read a body with (length, chunked with
//! trailers, until close: [`body`]), head and body writing ([`write`]),
//! one request/response exchange over a raw socket whose reuse is the
//! caller's business ([`client`]), the backend's response head made into a
//! response or kept raw ([`response_head`]), and the client-facing server:
//! the connection loop around a handler ([`server`]), the request body it
//! streams ([`server_body`]), the responses it writes ([`server_write`])
//! and their `Date` line ([`date`]); the lazily re-armed timer both sides
//! keep per connection ([`deadline`]); the per-thread spares of the lists
//! each head fills and drops ([`spare`]).
//!
//! Must not touch: anything of the crate outside `h1/` (pool
//! bookkeeping, routing, retries, forwarding, tunnels, error pages): only
//! std, the HTTP crates, tokio and `hopgate_core`'s error kinds.

pub(crate) mod body;
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
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod write;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::Body;

pub use chunked::{ChunkError, ChunkedDecoder, Step, MAX_CHUNK_LINE};
pub use client::{Connection, Failure, FromUpstream, ResponseBody, Socket, Upgraded, Wire};
pub use deadline::LazyTimer;
pub use head::{
    parse_request, parse_response, parse_trailers, request_body, response_kind, BodyKind, Facts,
    Head, HeadError, HeaderRange, ResponseKind, MAX_HEADERS, MAX_HEAD_BYTES,
};
pub use response_head::{HeadFor, RawHead};
pub use server::{request_from_head, upgrade_request, Handler, Upgrade, UpgradedClient};
pub use server_body::{ClientStream, ServerBody};
pub use write::ExtraLines;

/// The error of a body.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type the codec's requests and answers carry (the gateway's
/// `ProxyBody`): what the codec needs of it besides being a body. The
/// defaults are those of a plain body with no spares and no raw heads.
pub trait Payload:
    Body<Data = Bytes, Error = BoxError> + Default + Send + Unpin + Sized + 'static
{
    /// A request box as `Request::new(Self::default())` makes it, maybe
    /// with the room an earlier request on this thread gave it.
    fn request() -> Box<Request<Self>> {
        Box::new(Request::new(Self::default()))
    }

    /// A request box the codec is done with (its head went upstream).
    fn give_request(req: Box<Request<Self>>) {
        drop(req);
    }

    /// An answer box as `Response::new(Self::default())` makes it.
    fn response() -> Box<Response<Self>> {
        Box::new(Response::new(Self::default()))
    }

    /// An answer box the codec is done with (its head went to the client).
    fn give_response(resp: Box<Response<Self>>) {
        drop(resp);
    }

    /// `body` with the head it came with kept as the backend's bytes.
    fn with_raw_head(raw: RawHead, body: Self) -> Self;

    /// The raw head this answer's body carries, if any.
    fn raw_head(&self) -> Option<&RawHead>;

    /// Takes the raw head off this answer's body, leaving the body.
    fn take_raw_head(&mut self) -> Option<RawHead>;

    /// A body held whole in memory: its bytes, taken (`Some(None)`: it
    /// had none left). `None` for every other body.
    fn take_whole(&mut self) -> Option<Option<Bytes>> {
        None
    }

    /// `rest` after `trailers` already read from it (a writer that looked
    /// ahead puts them back).
    fn after_trailers(trailers: HeaderMap, rest: Self) -> Self;

    /// The kind of an error of a request body on its way upstream when the
    /// body itself caused it (not the client going away, not the backend).
    fn own_error(e: &BoxError) -> Option<hopgate_core::error::ErrorKind> {
        let _ = e;
        None
    }
}
