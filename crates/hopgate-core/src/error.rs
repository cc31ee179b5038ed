//! The error vocabulary of the data plane: what went wrong, whose fault it
//! was, and whether the request may be tried again elsewhere.
//!
//! Owns [`ProxyError`] and [`ErrorKind`]. The single mapping from a kind to a
//! status code lives here too ([`ErrorKind::status`]) so every component
//! answers the same way. Must not touch: I/O.

use std::fmt;

/// Who caused an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client sent something we refuse.
    Downstream,
    /// The backend failed.
    Upstream,
    /// hopgate itself (config, no route, shutting down).
    Gateway,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// No rule matched the request.
    NoRoute,
    /// The client IP is not allowed.
    Forbidden,
    /// The route's service has no node able to take the request.
    NoLiveNode,
    /// Connecting to the backend failed (refused, unreachable). Not sent.
    ConnectFailed,
    /// Connecting to the backend took longer than `timeouts.connect`. Not sent.
    ConnectTimeout,
    /// A pooled connection was found dead before the request was written. Not sent.
    ConnectionLost,
    /// The request was sent but the backend closed or reset before answering.
    UpstreamReset,
    /// The backend did not answer within `timeouts.request`.
    UpstreamTimeout,
    /// The backend answered with something that is not HTTP.
    UpstreamProtocol,
    /// Request head larger than `limits.max_header_bytes` or too many headers.
    HeadersTooLarge,
    /// Request URI longer than `limits.max_uri_bytes`.
    UriTooLong,
    /// Request body larger than `limits.max_body_bytes`.
    BodyTooLarge,
    /// The request is malformed (bad Host, bad URI).
    BadRequest,
    /// The client's request body broke its framing (a bad chunk).
    MalformedBody,
    /// The client went away before its request body ended.
    ClientAborted,
    /// The client's request body did not arrive within `timeouts.request`.
    ClientTimeout,
    /// The client accepted none of the response for the stall limit
    /// (`timeouts.idle`): an HTTP/2 stream whose flow-control window stayed
    /// shut. Its upstream is released and its connection closed.
    ClientStalled,
    /// A method the gateway never forwards (TRACE).
    MethodNotAllowed,
    /// A gRPC request routed to a service that speaks HTTP/1.1 to its
    /// backends (no `protocol: http2`).
    GrpcNeedsHttp2,
    /// The node has `pool.max_connections` open and `pool.max_pending`
    /// requests already waiting for one. Not sent; load, not a failure.
    PoolQueueFull,
    /// No connection to the node became free within `pool.queue_timeout`.
    /// Not sent; load, not a failure.
    PoolQueueTimeout,
    /// The route's rate limit (`rate_limits[]`) refused the request: over
    /// the rate or over `max_in_flight` for its key.
    RateLimited,
    /// hopgate is shutting down.
    ShuttingDown,
}

impl ErrorKind {
    /// The HTTP status a client gets for this kind.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::NoRoute => 404,
            ErrorKind::Forbidden => 403,
            ErrorKind::NoLiveNode
            | ErrorKind::ShuttingDown
            | ErrorKind::PoolQueueFull
            | ErrorKind::PoolQueueTimeout => 503,
            ErrorKind::ConnectFailed
            | ErrorKind::ConnectionLost
            | ErrorKind::UpstreamReset
            | ErrorKind::UpstreamProtocol => 502,
            ErrorKind::ConnectTimeout | ErrorKind::UpstreamTimeout => 504,
            ErrorKind::HeadersTooLarge => 431,
            ErrorKind::UriTooLong => 414,
            ErrorKind::BodyTooLarge => 413,
            ErrorKind::BadRequest | ErrorKind::MalformedBody | ErrorKind::ClientAborted => 400,
            ErrorKind::ClientTimeout | ErrorKind::ClientStalled => 408,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::RateLimited => 429,
            ErrorKind::GrpcNeedsHttp2 => 502,
        }
    }

    pub fn side(self) -> Side {
        match self {
            ErrorKind::NoRoute
            | ErrorKind::NoLiveNode
            | ErrorKind::ShuttingDown
            | ErrorKind::GrpcNeedsHttp2
            | ErrorKind::PoolQueueFull
            | ErrorKind::PoolQueueTimeout => Side::Gateway,
            ErrorKind::Forbidden
            | ErrorKind::HeadersTooLarge
            | ErrorKind::UriTooLong
            | ErrorKind::BodyTooLarge
            | ErrorKind::BadRequest
            | ErrorKind::MalformedBody
            | ErrorKind::ClientAborted
            | ErrorKind::ClientTimeout
            | ErrorKind::ClientStalled
            | ErrorKind::MethodNotAllowed
            | ErrorKind::RateLimited => Side::Downstream,
            _ => Side::Upstream,
        }
    }

    /// True when the request never reached the backend, so any request may
    /// be retried on another node without risk of running twice.
    pub fn not_sent(self) -> bool {
        matches!(
            self,
            ErrorKind::ConnectFailed
                | ErrorKind::ConnectTimeout
                | ErrorKind::ConnectionLost
                | ErrorKind::PoolQueueFull
                | ErrorKind::PoolQueueTimeout
        )
    }

    /// True when the node was only busy (its connection limit and queue):
    /// load, never charged to the node's health, breaker or outliers.
    pub fn is_busy(self) -> bool {
        matches!(self, ErrorKind::PoolQueueFull | ErrorKind::PoolQueueTimeout)
    }

    /// A short, stable reason phrase (used in bodies, logs and metrics).
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::NoRoute => "no route matches this request",
            ErrorKind::Forbidden => "client address not allowed",
            ErrorKind::NoLiveNode => "no live node for this route",
            ErrorKind::ConnectFailed => "could not connect to the backend",
            ErrorKind::ConnectTimeout => "timed out connecting to the backend",
            ErrorKind::ConnectionLost => "backend connection lost before the request was sent",
            ErrorKind::UpstreamReset => "backend closed the connection without answering",
            ErrorKind::UpstreamTimeout => "backend did not answer in time",
            ErrorKind::UpstreamProtocol => "backend sent an invalid response",
            ErrorKind::HeadersTooLarge => "request headers too large",
            ErrorKind::UriTooLong => "request URI too long",
            ErrorKind::BodyTooLarge => "request body too large",
            ErrorKind::BadRequest => "malformed request",
            ErrorKind::MalformedBody => "malformed request body",
            ErrorKind::ClientAborted => "client closed the connection before its body ended",
            ErrorKind::ClientTimeout => "request body not received in time",
            ErrorKind::ClientStalled => "client accepted no response data in time",
            ErrorKind::MethodNotAllowed => "method not allowed",
            ErrorKind::GrpcNeedsHttp2 => {
                "gRPC needs HTTP/2 to the backend: the service must set protocol: http2"
            }
            ErrorKind::PoolQueueFull => {
                "backend busy: the node is at its connection limit and its queue is full"
            }
            ErrorKind::PoolQueueTimeout => {
                "backend busy: no connection to the node became free in time"
            }
            ErrorKind::RateLimited => "too many requests: rate limit exceeded",
            ErrorKind::ShuttingDown => "gateway is shutting down",
        }
    }

    /// A label for metrics and access logs.
    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::NoRoute => "no_route",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::NoLiveNode => "no_live_node",
            ErrorKind::ConnectFailed => "connect_failed",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::ConnectionLost => "connection_lost",
            ErrorKind::UpstreamReset => "upstream_reset",
            ErrorKind::UpstreamTimeout => "upstream_timeout",
            ErrorKind::UpstreamProtocol => "upstream_protocol",
            ErrorKind::HeadersTooLarge => "headers_too_large",
            ErrorKind::UriTooLong => "uri_too_long",
            ErrorKind::BodyTooLarge => "body_too_large",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::MalformedBody => "malformed_body",
            ErrorKind::ClientAborted => "client_aborted",
            ErrorKind::ClientTimeout => "client_timeout",
            ErrorKind::ClientStalled => "client_stalled",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::GrpcNeedsHttp2 => "grpc_needs_http2",
            ErrorKind::PoolQueueFull => "pool_queue_full",
            ErrorKind::PoolQueueTimeout => "pool_queue_timeout",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::ShuttingDown => "shutting_down",
        }
    }
}

/// An error on the request path, with context for logs.
#[derive(Debug)]
pub struct ProxyError {
    pub kind: ErrorKind,
    /// Extra detail for logs (never sent to clients: it may name internals).
    pub detail: Option<String>,
}

impl ProxyError {
    pub fn new(kind: ErrorKind) -> Self {
        ProxyError { kind, detail: None }
    }

    pub fn with_detail(kind: ErrorKind, detail: impl fmt::Display) -> Self {
        ProxyError {
            kind,
            detail: Some(detail.to_string()),
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{}: {d}", self.kind.reason()),
            None => f.write_str(self.kind.reason()),
        }
    }
}

impl std::error::Error for ProxyError {}
