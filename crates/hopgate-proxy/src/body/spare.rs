//! Per-thread spares of the boxes every request fills and drops: the
//! request's box with its header map's two blocks (taken by the HTTP/1.1
//! server's parse, given back once the request's head went upstream), the
//! answer's box (taken when a backend's head is read, given back once the
//! head went to the client) and the box an answer's raw head rides in with
//! its body ([`Headed`]). They are what `ProxyBody`'s
//! [`crate::h1::Payload`] spares are. Each is handed back here, emptied
//! part by part, when its user is done with it and taken by the next one
//! on the thread: a box freed and asked for again at once took the
//! allocator's slow path on every request.
//!
//! Owns: the spares and the cap on what is kept (a map that grew for a
//! rare large head is let go). Must not touch: what the boxes hold (a
//! request or an answer comes back as `Request::new(ProxyBody::Empty)` /
//! `Response::new(ProxyBody::Empty)` would make it, only with room).

use std::cell::Cell;

use http::{Method, Request, Response, StatusCode, Uri, Version};

use super::{Headed, ProxyBody};

/// Maps with room for more than this are not kept.
const MOST_LINES: usize = 64;

thread_local! {
    static HEADED: Cell<Option<Box<Headed>>> = const { Cell::new(None) };
    static REQUEST: Cell<Option<Box<Request<ProxyBody>>>> = const { Cell::new(None) };
    static RESPONSE: Cell<Option<Box<Response<ProxyBody>>>> = const { Cell::new(None) };
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
    empty(req.body_mut());
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
    empty(resp.body_mut());
    let _ = RESPONSE.try_with(|s| s.set(Some(resp)));
}

/// Empties a kept box's body. Nearly always it is empty already (its body
/// was taken): one compare instead of a call to the body's drop glue.
#[inline]
fn empty(body: &mut ProxyBody) {
    if !matches!(body, ProxyBody::Empty) {
        *body = ProxyBody::Empty;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The headed box is reused, not reallocated: the same block comes back.
    #[test]
    fn an_empty_headed_box_comes_back() {
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
}
