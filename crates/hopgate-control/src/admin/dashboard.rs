//! `GET /` on the admin listener: the dashboard.
//!
//! Owns the page: one HTML file (`dashboard.html`, plain JS, nothing
//! fetched from elsewhere) built into the binary, with the current state
//! rendered into it on the server (config version and source, every
//! service's nodes, recent hops, the traffic figures — rates since the
//! page was last served — and the fleet's replica, Redis and etcd state)
//! so it reads right before its script runs and without JS; a `<noscript>`
//! meta refresh reloads it every 5 s. With JS the page follows
//! `GET /admin/v1/events`. When the admin API has a token, the page itself
//! is served to anyone but holds no state unless the request carries the
//! token: the script asks for it and keeps it in the tab's sessionStorage.
//!
//! Must not touch: the snapshot (read only), the request path.

use std::fmt::Write as _;

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::Response;
use http_body_util::Full;

use hopgate_proxy::telemetry;

use crate::admin::Admin;

const PAGE: &str = include_str!("dashboard.html");
/// Where the server-rendered state goes in the page.
const STATE_MARK: &str = "<!--state-->";
/// How many recent hops the page shows.
const HOPS_SHOWN: usize = 30;

/// The page; `auth_required` tells the script to ask for the token,
/// `show` whether this request may see the state.
pub(crate) fn page(admin: &Admin, auth_required: bool, show: bool) -> Response<Full<Bytes>> {
    let mut page = PAGE.to_owned();
    let state = if show {
        page = render_stats(page, &admin.page_window.lock().next(admin));
        render_state(admin)
    } else {
        "<p class=\"note\" id=\"locked\">This admin API needs its token. With JS on, \
         enter it above; without JS, use the JSON API with \
         <code>Authorization: Bearer</code>.</p>"
            .to_owned()
    };
    let html = page.replacen(STATE_MARK, &state, 1).replacen(
        "data-auth=\"none\"",
        if auth_required {
            "data-auth=\"required\""
        } else {
            "data-auth=\"none\""
        },
        1,
    );
    let mut r = Response::new(Full::new(Bytes::from(html)));
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'",
        ),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// The traffic figures and the fleet box of a `stats` value, in place of
/// the page's placeholders (formatted as the script formats them).
fn render_stats(page: String, s: &serde_json::Value) -> String {
    let ms = |v: &serde_json::Value| match v.as_f64() {
        None => "–".to_owned(),
        Some(v) if v < 10.0 => format!("{v:.2} ms"),
        Some(v) if v < 1000.0 => format!("{v:.0} ms"),
        Some(v) => format!("{:.2} s", v / 1000.0),
    };
    let rate = |v: &serde_json::Value| {
        let v = v.as_f64().unwrap_or(0.0);
        if v < 10.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.0}")
        }
    };
    let figures = [
        ("rps", rate(&s["rps"])),
        ("eps", rate(&s["errors_per_s"])),
        ("p50", ms(&s["p50_ms"])),
        ("p99", ms(&s["p99_ms"])),
        ("inflight", s["in_flight"].as_u64().unwrap_or(0).to_string()),
        (
            "total",
            s["requests_total"].as_u64().unwrap_or(0).to_string(),
        ),
    ];
    let mut page = figures.iter().fold(page, |p, (id, v)| {
        p.replacen(
            &format!("<b id=\"{id}\">–</b>"),
            &format!("<b id=\"{id}\">{}</b>", esc(v)),
            1,
        )
    });
    let f = &s["fleet"];
    if let Some(replica) = f["replica_id"].as_str() {
        let state = |engine: &str| esc(f[engine]["state"].as_str().unwrap_or("off"));
        page = page.replacen(
            "<div id=\"fleet\" class=\"note\">single replica</div>",
            &format!(
                "<div id=\"fleet\" class=\"note\"><div>replica <b>{}</b></div>\
                 <div>redis <span class=\"pill \">{}</span></div>\
                 <div>etcd <span class=\"pill \">{}</span></div></div>",
                esc(replica),
                state("redis"),
                state("etcd")
            ),
            1,
        );
    }
    page
}

/// Text safe inside HTML elements and attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// One node's row of its service's table.
fn node_row(
    o: &mut String,
    admin: &Admin,
    svc: &hopgate_proxy::CompiledService,
    i: usize,
    now_ms: u64,
) {
    let n = &svc.nodes[i];
    let s = &n.state;
    let warming = match svc.all.balancer.ramp_of(i, now_ms) / 100 * 10 {
        100 => String::new(),
        p => format!(" warming {p}%"),
    };
    let bound = admin
        .sessions()
        .map_or(0, |x| x.store.bindings_to(&svc.name, &n.id));
    let maint = if s.is_unreachable() {
        "unreachable".to_owned()
    } else if let Some(to) = s.moved_to() {
        format!("moved to {to}")
    } else if s.is_relaxed(now_ms) {
        format!(
            "relaxed, {} s left",
            s.relaxed_until().saturating_sub(now_ms) / 1000
        )
    } else {
        "-".to_owned()
    };
    let _ = write!(
        o,
        "<tr data-node=\"{}/{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
         <td>{}</td><td>{}</td><td>{}</td></tr>",
        esc(&svc.name),
        esc(&n.id),
        esc(&n.id),
        esc(&n.address.to_string()),
        esc(&format!(
            "{}{warming}",
            serde_json::to_value(s.health())
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        )),
        if s.is_draining() { "draining" } else { "-" },
        esc(&serde_json::to_value(s.circuit())
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()),
        esc(&maint),
        s.in_flight(),
        bound,
    );
}

/// The state as HTML: the config line, one table per service, recent hops.
fn render_state(admin: &Admin) -> String {
    let config = super::events::config_json(admin);
    let mut o = String::new();
    let _ = write!(
        o,
        "<p id=\"config\">config <b id=\"version\">v{}</b> from <span id=\"source\">{}</span></p>",
        config["version"].as_u64().unwrap_or(0),
        esc(config["source"].as_str().unwrap_or("-")),
    );
    let snap = admin.control().snapshot().load();
    let now_ms = hopgate_core::node::now_ms();
    o.push_str("<div id=\"services\">");
    for svc in &snap.services {
        let _ = write!(
            o,
            "<table class=\"svc\" data-service=\"{0}\"><caption>{0}</caption>\
             <thead><tr><th>node</th><th>address</th><th>health</th><th>drain</th>\
             <th>circuit</th><th>maintenance</th><th>in flight</th><th>sessions</th></tr></thead><tbody>",
            esc(&svc.name)
        );
        for i in 0..svc.nodes.len() {
            node_row(&mut o, admin, svc, i, now_ms);
        }
        o.push_str("</tbody></table>");
    }
    o.push_str("</div><h2>Recent hops</h2><ol id=\"hops\">");
    for h in telemetry::recent_hops(HOPS_SHOWN) {
        let _ = write!(
            o,
            "<li data-session=\"{}\">session {}… hopped {} → {} ({}){}</li>",
            esc(&h.session),
            esc(h.session.get(..4).unwrap_or(&h.session)),
            esc(&h.from),
            esc(&h.to),
            esc(h.reason),
            if h.context_bytes > 0 {
                ", context kept"
            } else {
                ""
            },
        );
    }
    o.push_str("</ol>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert!(PAGE.contains(STATE_MARK));
        assert!(PAGE.contains("data-auth=\"none\""));
        assert!(PAGE.contains("<noscript><meta http-equiv=\"refresh\" content=\"5\"></noscript>"));
    }
}
