//! Per-thread spares of the buffers every request fills and drops: the
//! header-line list of a parsed head ([`super::head::Lines`]), the
//! slice list a response head is written from
//! ([`super::write::HeadWriter`]), the box an answer's raw head rides
//! in with its body ([`crate::body::Headed`]), the request's box with
//! its header map's two blocks (taken by the parse, given back once the
//! request's head went upstream) and the answer's box (taken when a
//! backend's head is read, given back once the head went to the client). Each is handed back here, cleared, when its
//! user is done with it and taken by the next one on the thread. A
//! request's buffers are made and dropped one after the other, so one
//! spare of each spares an allocation and a free per request — and the
//! allocator's slow path, which a block freed and asked for again at once
//! takes every time.
//!
//! Owns: the spares and the caps on what is kept (a list or map that grew
//! for a rare large head is let go). Must not touch: what the buffers hold
//! (every list comes back empty; a request or an answer comes back as
//! `Request::new(ProxyBody::Empty)` / `Response::new(ProxyBody::Empty)`
//! would make it, only with room).

use std::cell::Cell;
use std::io::IoSlice;

use http::{Method, Request, Response, StatusCode, Uri, Version};

use super::head::HeaderRange;
use crate::body::{Headed, ProxyBody};

/// Lists with room for more than this are not kept.
const MOST_LINES: usize = 64;
const MOST_SLICES: usize = 4 * MOST_LINES + 16;

thread_local! {
    static LINES: Cell<Vec<HeaderRange>> = const { Cell::new(Vec::new()) };
    static SLICES: Cell<Vec<IoSlice<'static>>> = const { Cell::new(Vec::new()) };
    static HEADED: Cell<Option<Box<Headed>>> = const { Cell::new(None) };
    static REQUEST: Cell<Option<Box<Request<ProxyBody>>>> = const { Cell::new(None) };
    static RESPONSE: Cell<Option<Box<Response<ProxyBody>>>> = const { Cell::new(None) };
}

/// Keeps whichever of the spare and `v` has more room. A thread being torn
/// down keeps nothing.
fn keep<T>(slot: &'static std::thread::LocalKey<Cell<Vec<T>>>, v: Vec<T>, most: usize) {
    if v.capacity() == 0 || v.capacity() > most {
        return;
    }
    let _ = slot.try_with(|s| {
        let old = s.take();
        s.set(if old.capacity() > v.capacity() {
            old
        } else {
            v
        });
    });
}

/// An empty line list with room for `n` lines.
pub(crate) fn lines(n: usize) -> Vec<HeaderRange> {
    let mut v = LINES.try_with(Cell::take).unwrap_or_default();
    v.reserve(n);
    v
}

pub(crate) fn give_lines(mut v: Vec<HeaderRange>) {
    v.clear();
    keep(&LINES, v, MOST_LINES);
}

/// An empty slice list with room for `n` slices.
pub(crate) fn slices<'a>(n: usize) -> Vec<IoSlice<'a>> {
    let mut v = relabel(SLICES.try_with(Cell::take).unwrap_or_default());
    v.reserve(n);
    v
}

pub(crate) fn give_slices(v: Vec<IoSlice<'_>>) {
    keep(&SLICES, relabel(v), MOST_SLICES);
}

/// A box for an answer's raw head and its body, empty (no head, an empty
/// body).
pub(crate) fn headed() -> Box<Headed> {
    HEADED
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            Box::new(Headed {
                raw: None,
                body: ProxyBody::Empty,
            })
        })
}

/// Keeps `h` for the thread's next answer once its head was taken off.
/// One whose body is still there (a head taken off an answer whose body
/// was not moved out first) is let go.
pub(crate) fn give_headed(h: Box<Headed>) {
    if h.raw.is_some() || !matches!(h.body, ProxyBody::Empty) {
        return;
    }
    let _ = HEADED.try_with(|s| s.set(Some(h)));
}

/// A request box as `Request::new(ProxyBody::Empty)` makes it (`GET /`,
/// HTTP/1.1, no headers, no extensions, an empty body), its header map
/// keeping the room an earlier request on this thread gave it.
pub(crate) fn request() -> Box<Request<ProxyBody>> {
    REQUEST
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_else(|| Box::new(Request::new(ProxyBody::Empty)))
}

/// Keeps `req` for the thread's next request, emptied: every part is
/// reset, so nothing of this request (a header, an extension, its body)
/// reaches the next one. The parts are dropped here, where dropping the
/// request would have dropped them. A map that grew past [`MOST_LINES`]
/// is let go.
pub(crate) fn give_request(mut req: Box<Request<ProxyBody>>) {
    if req.headers().capacity() > MOST_LINES {
        return;
    }
    *req.method_mut() = Method::GET;
    *req.uri_mut() = Uri::default();
    *req.version_mut() = Version::HTTP_11;
    req.headers_mut().clear();
    req.extensions_mut().clear();
    *req.body_mut() = ProxyBody::Empty;
    let _ = REQUEST.try_with(|s| s.set(Some(req)));
}

/// An answer box as `Response::new(ProxyBody::Empty)` makes it (200,
/// HTTP/1.1, no headers, no extensions, an empty body), its header map
/// keeping the room an earlier answer on this thread gave it.
pub(crate) fn response() -> Box<Response<ProxyBody>> {
    RESPONSE
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_else(|| Box::new(Response::new(ProxyBody::Empty)))
}

/// Keeps `resp` for the thread's next answer, emptied as
/// [`give_request`] empties a request.
pub(crate) fn give_response(mut resp: Box<Response<ProxyBody>>) {
    if resp.headers().capacity() > MOST_LINES {
        return;
    }
    *resp.status_mut() = StatusCode::OK;
    *resp.version_mut() = Version::HTTP_11;
    resp.headers_mut().clear();
    resp.extensions_mut().clear();
    *resp.body_mut() = ProxyBody::Empty;
    let _ = RESPONSE.try_with(|s| s.set(Some(resp)));
}

/// An empty list of slices of another lifetime, in the same allocation:
/// collecting a vector's `IntoIter` into a vector of an element of the
/// same size and alignment reuses its buffer (the closure never runs: the
/// list is emptied first).
fn relabel<'b>(mut v: Vec<IoSlice<'_>>) -> Vec<IoSlice<'b>> {
    v.clear();
    v.into_iter().map(|_| IoSlice::new(&[])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spares are reused, not reallocated: the same block comes back.
    #[test]
    fn spares_come_back() {
        let v = lines(8);
        let at = v.as_ptr() as usize;
        give_lines(v);
        let again = lines(4);
        assert_eq!(again.as_ptr() as usize, at);
        assert!(again.is_empty());

        let s = slices(20);
        let at = s.as_ptr() as usize;
        give_slices(s);
        let again = slices(10);
        assert_eq!(
            again.as_ptr() as usize,
            at,
            "the slice list is relabelled in place"
        );
        assert!(again.is_empty());

        let h = headed();
        let at = &*h as *const Headed as usize;
        give_headed(h);
        let h = headed();
        assert_eq!(&*h as *const Headed as usize, at, "an empty box comes back");
        assert!(h.raw.is_none() && matches!(h.body, ProxyBody::Empty));
        let mut full = h;
        full.body = ProxyBody::full("rest");
        give_headed(full);
        let kept = HEADED.with(|s| {
            let v = s.take();
            let kept = v.is_some();
            s.set(v);
            kept
        });
        assert!(!kept, "a box with a body in it is not kept");
    }

    /// A request given back comes back in the same box, with its header
    /// map's room, and with nothing of what it carried.
    #[test]
    fn a_request_comes_back_empty() {
        let mut req = request();
        let at = &*req as *const Request<ProxyBody> as usize;
        *req.method_mut() = Method::POST;
        *req.uri_mut() = "http://a.example/x?y=1".parse().unwrap();
        *req.version_mut() = Version::HTTP_10;
        let h = req.headers_mut();
        h.reserve(8);
        h.insert(http::header::HOST, "a.example".parse().unwrap());
        h.append("x-a", "1".parse().unwrap());
        h.append("x-a", "2".parse().unwrap());
        req.extensions_mut().insert(7u32);
        *req.body_mut() = ProxyBody::full("body");
        let room = req.headers().capacity();
        give_request(req);

        let again = request();
        assert_eq!(
            &*again as *const Request<ProxyBody> as usize, at,
            "the same box"
        );
        let fresh = Request::new(ProxyBody::Empty);
        assert_eq!(again.method(), fresh.method());
        assert_eq!(again.uri(), fresh.uri());
        assert_eq!(again.version(), fresh.version());
        assert!(again.headers().is_empty());
        assert!(again.headers().get("x-a").is_none());
        assert!(again.extensions().is_empty());
        assert!(again.extensions().get::<u32>().is_none());
        assert!(matches!(again.body(), ProxyBody::Empty));
        assert_eq!(again.headers().capacity(), room, "the map keeps its room");

        let mut big = again;
        big.headers_mut().reserve(4 * MOST_LINES);
        give_request(big);
        assert!(
            request().headers().capacity() <= MOST_LINES,
            "a map grown for a large head is let go"
        );
    }

    /// An answer given back comes back in the same box, empty.
    #[test]
    fn an_answer_comes_back_empty() {
        let mut resp = response();
        let at = &*resp as *const Response<ProxyBody> as usize;
        *resp.status_mut() = StatusCode::NOT_FOUND;
        *resp.version_mut() = Version::HTTP_10;
        resp.headers_mut()
            .append("set-cookie", "a=1".parse().unwrap());
        resp.extensions_mut().insert(7u32);
        *resp.body_mut() = ProxyBody::full("body");
        give_response(resp);

        let again = response();
        assert_eq!(&*again as *const Response<ProxyBody> as usize, at);
        let fresh = Response::new(ProxyBody::Empty);
        assert_eq!(again.status(), fresh.status());
        assert_eq!(again.version(), fresh.version());
        assert!(again.headers().is_empty());
        assert!(again.extensions().is_empty());
        assert!(matches!(again.body(), ProxyBody::Empty));
    }

    /// What grew for a rare large head is let go.
    #[test]
    fn large_ones_are_not_kept() {
        give_lines(Vec::with_capacity(MOST_LINES + 1));
        assert!(lines(0).capacity() <= MOST_LINES);
    }
}
