//! The typed `proxy_protocol` blocks: which PROXY protocol headers a
//! listener accepts and from whom, and which one a service sends to its
//! nodes. Reading and writing the headers is the data plane's
//! (`hopgate_proxy`'s `proxy_protocol` module).

use std::time::Duration;

use ipnet::IpNet;

/// `listeners[].proxy_protocol`. While set, every connection must start
/// with a header, and only `trusted_cidrs` may connect (HAProxy's
/// `accept-proxy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerProxyProtocol {
    /// Version 1 (text) headers are accepted.
    pub v1: bool,
    /// Version 2 (binary) headers are accepted.
    pub v2: bool,
    /// The sources allowed to connect; never empty.
    pub trusted_cidrs: Vec<IpNet>,
    /// How long the header may take to arrive after the accept.
    pub timeout: Duration,
}

/// `listeners[].proxy_protocol.timeout` when absent.
pub const DEFAULT_PROXY_PROTOCOL_TIMEOUT: Duration = Duration::from_secs(3);

/// `services[].proxy_protocol`: the header written first on every new
/// connection to the service's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProxyProtocolVersion {
    /// `PROXY TCP4 …\r\n`, the text form.
    V1,
    /// The binary form.
    V2,
}
