//! An incremental decoder of the chunked transfer coding (RFC 9112 §7.1).
//!
//! Fed whatever bytes have arrived, it hands back body data as ranges of
//! its input (no copy), asks for more when a chunk line is cut short, and
//! ends with the trailer section, which [`super::head::parse_trailers`]
//! reads. Chunk extensions are skipped, bounded and checked for control
//! characters; a chunk size that overflows 64 bits, a bare LF, a missing
//! CRLF after chunk data and an oversized trailer section are errors.

use super::head::{parse_trailers, MAX_HEAD_BYTES};

/// Longest chunk-size line accepted (size, extensions, CRLF).
pub const MAX_CHUNK_LINE: usize = 4096;

/// Why a chunked body is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked body: {0}")]
pub struct ChunkError(pub &'static str);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// At the start of a chunk-size line.
    SizeStart,
    /// In the hex digits.
    Size,
    /// After the digits: whitespace, then `;` or CR.
    SizeEnd,
    /// In a chunk extension, up to CR.
    Ext,
    /// CR seen, LF expected.
    SizeLf,
    Data,
    /// After the data: CR expected.
    DataCr,
    DataLf,
    /// The last chunk was read: the trailer section follows.
    Trailers,
    Done,
}

/// What one call to [`ChunkedDecoder::decode`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Body data at `input[start..start + len]`; everything up to its end
    /// is consumed.
    Data { start: usize, len: usize },
    /// The body ended; its trailer section is `input[start..start + len]`
    /// (just the final CRLF when there are no trailers); everything up to
    /// its end is consumed.
    End { start: usize, len: usize },
    /// `consumed` bytes of framing were used; more input is needed.
    Need { consumed: usize },
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    digits: u8,
    line: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::SizeStart,
            size: 0,
            digits: 0,
            line: 0,
        }
    }

    /// Has the whole body, trailers included, been read?
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from the start of `input` (the bytes not consumed so far).
    pub fn decode(&mut self, input: &[u8]) -> Result<Step, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            if let Some(step) = self.run_at(input, i) {
                return step;
            }
            self.line += 1;
            if self.line > MAX_CHUNK_LINE {
                return Err(ChunkError("chunk-size line too long"));
            }
            if self.line_byte(input[i])? {
                i += 1;
            }
        }
        Ok(Step::Need { consumed: i })
    }

    /// The states that take a run of bytes at once (data, trailers) or
    /// none (done), from `input[i..]`; `None` in a line's states.
    #[inline]
    fn run_at(&mut self, input: &[u8], i: usize) -> Option<Result<Step, ChunkError>> {
        match self.state {
            State::Data => {
                let len = (input.len() - i).min(self.size.min(usize::MAX as u64) as usize);
                self.size -= len as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                Some(Ok(Step::Data { start: i, len }))
            }
            State::Trailers => Some(match trailer_end(&input[i..]) {
                Ok(Some(len)) => {
                    self.state = State::Done;
                    Ok(Step::End { start: i, len })
                }
                Ok(None) => Ok(Step::Need { consumed: i }),
                Err(e) => Err(e),
            }),
            State::Done => Some(Err(ChunkError("bytes after the end of the body"))),
            _ => None,
        }
    }

    /// One byte of a chunk-size line or of the CRLF after a chunk's data:
    /// whether it was consumed (the end of the size's digits is looked at
    /// again as the next state's first byte).
    #[inline]
    fn line_byte(&mut self, b: u8) -> Result<bool, ChunkError> {
        match self.state {
            State::SizeStart | State::Size => return self.size_digit(b),
            State::SizeEnd => match b {
                b' ' | b'\t' => {}
                b';' => self.state = State::Ext,
                b'\r' => self.state = State::SizeLf,
                _ => return Err(ChunkError("invalid byte after chunk size")),
            },
            State::Ext => match b {
                b'\r' => self.state = State::SizeLf,
                b'\t' => {}
                0..=0x1f | 0x7f => {
                    return Err(ChunkError("control character in a chunk extension"))
                }
                _ => {}
            },
            State::SizeLf => {
                if b != b'\n' {
                    return Err(ChunkError("CR without LF in a chunk-size line"));
                }
                self.line = 0;
                self.digits = 0;
                self.state = if self.size == 0 {
                    State::Trailers
                } else {
                    State::Data
                };
            }
            State::DataCr => {
                if b != b'\r' {
                    return Err(ChunkError("chunk data not followed by CRLF"));
                }
                self.state = State::DataLf;
            }
            State::DataLf => {
                if b != b'\n' {
                    return Err(ChunkError("chunk data not followed by CRLF"));
                }
                self.line = 0;
                self.state = State::SizeStart;
            }
            State::Data | State::Trailers | State::Done => unreachable_state()?,
        }
        Ok(true)
    }

    /// A byte where a chunk size's hex digit may be: a digit is taken; the
    /// first other byte ends the size (not consumed) unless no digit came.
    #[inline]
    fn size_digit(&mut self, b: u8) -> Result<bool, ChunkError> {
        match hex(b) {
            Some(d) => {
                if self.size >> 60 != 0 {
                    return Err(ChunkError("chunk size overflows"));
                }
                self.size = (self.size << 4) | u64::from(d);
                self.digits = self.digits.saturating_add(1);
                self.state = State::Size;
                Ok(true)
            }
            None if self.state == State::SizeStart => Err(ChunkError("chunk size expected")),
            None => {
                self.state = State::SizeEnd;
                Ok(false)
            }
        }
    }
}

/// The states handled before the byte loop never reach it.
fn unreachable_state() -> Result<(), ChunkError> {
    Err(ChunkError("decoder state"))
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The length of a complete trailer section at the start of `buf` (its
/// final empty line included), after checking it parses.
fn trailer_end(buf: &[u8]) -> Result<Option<usize>, ChunkError> {
    if buf.starts_with(b"\r\n") {
        return Ok(Some(2));
    }
    if buf == b"\r" {
        return Ok(None);
    }
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n");
    match end {
        Some(at) if at + 4 > MAX_HEAD_BYTES => Err(ChunkError("trailer section too large")),
        Some(at) => {
            let len = at + 4;
            parse_trailers(&buf[..len]).map_err(|_| ChunkError("invalid trailer section"))?;
            Ok(Some(len))
        }
        None if buf.len() > MAX_HEAD_BYTES => Err(ChunkError("trailer section too large")),
        None => {
            // A bare LF shows up at once rather than after the limit.
            if buf.contains(&b'\n') && parse_trailers_prefix_bad(buf) {
                return Err(ChunkError("invalid trailer section"));
            }
            Ok(None)
        }
    }
}

/// Is what has arrived of a trailer section already invalid?
fn parse_trailers_prefix_bad(buf: &[u8]) -> bool {
    let mut prev = 0u8;
    for &b in buf {
        if b == b'\n' && prev != b'\r' {
            return true;
        }
        prev = b;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes, as a reader with a
    /// buffer would: unconsumed bytes stay for the next call.
    fn decode_all(input: &[u8], step: usize) -> Result<(Vec<u8>, Vec<u8>), ChunkError> {
        let mut dec = ChunkedDecoder::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match dec.decode(&buf)? {
                Step::Data { start, len } => {
                    body.extend_from_slice(&buf[start..start + len]);
                    buf.drain(..start + len);
                }
                Step::End { start, len } => {
                    let trailers = buf[start..start + len].to_vec();
                    buf.drain(..start + len);
                    return Ok((body, trailers));
                }
                Step::Need { consumed } => {
                    buf.drain(..consumed);
                    if fed == input.len() {
                        return Err(ChunkError("ended early"));
                    }
                    let n = step.min(input.len() - fed);
                    buf.extend_from_slice(&input[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn decodes_in_any_pieces() {
        let input = b"5\r\nhello\r\n1;name=value;x\r\n \r\nA \t; ext\r\n0123456789\r\n0\r\nX-Sum: 1\r\n\r\n";
        for step in [1, 2, 3, 7, 64, 1024] {
            let (body, trailers) = decode_all(input, step).unwrap();
            assert_eq!(body, b"hello 0123456789", "step {step}");
            assert_eq!(trailers, b"X-Sum: 1\r\n\r\n", "step {step}");
        }
        let (body, trailers) = decode_all(b"0\r\n\r\n", 1).unwrap();
        assert!(body.is_empty());
        assert_eq!(trailers, b"\r\n");
    }

    #[test]
    fn refuses_bad_framing() {
        for bad in [
            &b"Z\r\nhello\r\n0\r\n\r\n"[..],
            b"\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"5 x\r\nhello\r\n0\r\n\r\n",
            b"5;a\0b\r\nhello\r\n0\r\n\r\n",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"5\rhello\r\n0\r\n\r\n",
            b"10000000000000000\r\n",
            b"0\r\nX-Sum: 1\n\r\n",
            b"0\r\nX Sum: 1\r\n\r\n",
            b"-1\r\n",
        ] {
            for step in [1, 4, 100] {
                assert!(
                    decode_all(bad, step).is_err(),
                    "{:?} step {step}",
                    String::from_utf8_lossy(bad)
                );
            }
        }
    }

    #[test]
    fn largest_size_fits_and_overflow_is_caught() {
        let mut dec = ChunkedDecoder::new();
        assert_eq!(
            dec.decode(b"ffffffffffffffff\r\n"),
            Ok(Step::Need { consumed: 18 })
        );
        let mut dec = ChunkedDecoder::new();
        assert!(dec.decode(b"1ffffffffffffffff\r\n").is_err());
        // Leading zeros are fine.
        let mut dec = ChunkedDecoder::new();
        assert_eq!(
            dec.decode(b"0000000000000000000005\r\nhello"),
            Ok(Step::Data { start: 24, len: 5 })
        );
    }

    #[test]
    fn long_lines_are_refused() {
        let mut line = b"5;".to_vec();
        line.resize(MAX_CHUNK_LINE + 10, b'a');
        assert!(ChunkedDecoder::new().decode(&line).is_err());
    }

    #[test]
    fn nothing_after_the_end() {
        let mut dec = ChunkedDecoder::new();
        assert_eq!(dec.decode(b"0\r\n\r\n"), Ok(Step::End { start: 3, len: 2 }));
        assert!(dec.is_done());
        assert!(dec.decode(b"x").is_err());
    }
}
