//! The knobs: query parameters that shape the backend's answer. Parsing
//! never panics; a bad value is a message for a 400, unknown parameters are
//! ignored (they are just part of the query the JSON reports).

use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use http::StatusCode;

/// What the query asked for; every knob combines with the others.
#[derive(Debug, Default)]
pub(super) struct Knobs {
    /// `sleep_ms=N`: wait before answering.
    pub(super) sleep_for: Duration,
    /// `status=N`: answer with that status (204/304 without a body).
    pub(super) status: Option<StatusCode>,
    /// `bytes=N`: a body of N pattern bytes instead of the JSON.
    pub(super) bytes: Option<u64>,
    /// `chunk_delay_ms=M`: with `bytes`, the pause between 16 KiB chunks.
    pub(super) chunk_delay: Duration,
    /// `chunked=1`: no Content-Length.
    pub(super) chunked: bool,
    /// `header=Name:Value`, repeatable: extra response headers.
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    /// `close=1`: `Connection: close` (HTTP/1.x).
    pub(super) close: bool,
    /// `context=VALUE`: respond with `Hop-Session-Context: VALUE`.
    pub(super) context: Option<HeaderValue>,
    /// `maint=VALUE`: respond with `Hop-Maintenance: VALUE`.
    pub(super) maint: Option<HeaderValue>,
    /// `trailers=1`: `x-checksum` and `grpc-status: 0` trailers.
    pub(super) trailers: bool,
    /// `echo=1`: the request body, streamed back.
    pub(super) echo: bool,
    /// `drop=1`: close the connection without any response.
    pub(super) drop: bool,
}

impl Knobs {
    pub(super) fn parse(query: Option<&str>) -> Result<Self, String> {
        let mut knobs = Knobs::default();
        for (name, value) in pairs(query) {
            let text = || String::from_utf8_lossy(&value).into_owned();
            match name.as_str() {
                "sleep_ms" => knobs.sleep_for = Duration::from_millis(number(&name, &text())?),
                "status" => knobs.status = Some(status(&text())?),
                "bytes" => knobs.bytes = Some(number(&name, &text())?),
                "chunk_delay_ms" => {
                    knobs.chunk_delay = Duration::from_millis(number(&name, &text())?)
                }
                "chunked" => knobs.chunked = boolean(&name, &text())?,
                "header" => knobs.headers.push(header(&value)?),
                "close" => knobs.close = boolean(&name, &text())?,
                "context" => knobs.context = Some(header_value(&name, &value)?),
                "maint" => knobs.maint = Some(header_value(&name, &value)?),
                "trailers" => knobs.trailers = boolean(&name, &text())?,
                "echo" => knobs.echo = boolean(&name, &text())?,
                "drop" => knobs.drop = boolean(&name, &text())?,
                _ => {}
            }
        }
        Ok(knobs)
    }

    /// Waits for `sleep_ms`, if any.
    pub(super) async fn sleep(&self) {
        if !self.sleep_for.is_zero() {
            tokio::time::sleep(self.sleep_for).await;
        }
    }
}

/// The boolean parameter `name` of a control endpoint (`on=1`, `ok=0`).
pub(super) fn flag(query: Option<&str>, name: &str) -> Result<bool, String> {
    let mut found = None;
    for (key, value) in pairs(query) {
        if key == name {
            found = Some(boolean(name, &String::from_utf8_lossy(&value))?);
        }
    }
    found.ok_or_else(|| format!("missing query parameter {name}=1|0"))
}

/// Query pairs, percent-decoded (`+` is a space); names lossily as UTF-8.
fn pairs(query: Option<&str>) -> impl Iterator<Item = (String, Vec<u8>)> + '_ {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                String::from_utf8_lossy(&decode(name)).into_owned(),
                decode(value),
            )
        })
}

fn decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                bytes.get(i + 1).and_then(hex),
                bytes.get(i + 2).and_then(hex),
            ) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    out
}

fn hex(digit: &u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

fn number(name: &str, text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{name}: expected a non-negative integer, got {text:?}"))
}

fn boolean(name: &str, text: &str) -> Result<bool, String> {
    match text.trim() {
        "" | "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{name}: expected 1 or 0, got {text:?}")),
    }
}

fn status(text: &str) -> Result<StatusCode, String> {
    let code: u16 = text
        .trim()
        .parse()
        .map_err(|_| format!("status: expected 200..=999, got {text:?}"))?;
    match StatusCode::from_u16(code) {
        Ok(status) if code >= 200 => Ok(status),
        _ => Err(format!("status: expected 200..=999, got {code}")),
    }
}

fn header(value: &[u8]) -> Result<(HeaderName, HeaderValue), String> {
    let text = String::from_utf8_lossy(value);
    let Some(colon) = value.iter().position(|&b| b == b':') else {
        return Err(format!("header: expected Name:Value, got {text:?}"));
    };
    let name = HeaderName::from_bytes(value[..colon].trim_ascii())
        .map_err(|_| format!("header: invalid header name in {text:?}"))?;
    let value = header_value("header", value[colon + 1..].trim_ascii())?;
    Ok((name, value))
}

fn header_value(name: &str, value: &[u8]) -> Result<HeaderValue, String> {
    HeaderValue::from_bytes(value).map_err(|_| {
        format!(
            "{name}: invalid header value {:?}",
            String::from_utf8_lossy(value)
        )
    })
}
