use crate::config::{load, Format};
use crate::filter::{Local, RequestStep};

/// The listener and services every corpus document is checked with.
const BASE: &str = "listeners:
  - { name: public, address: 127.0.0.1:8080 }
services:
  - name: api
    nodes:
      - { id: api-1, address: 127.0.0.1:8081, version: v1 }
";

/// Broken filter configs, one per document: the first line names the field
/// path of the error and a part of its message (`# PATH :: NEEDLE`). The
/// `hopgate validate` test reads the same file.
const CORPUS: &str = include_str!("corpus.yaml");

/// Each corpus document, as `(path, needle, whole document)`.
fn corpus() -> Vec<(String, String, String)> {
    CORPUS
        .split("\n---\n")
        .map(|doc| {
            let head = doc.lines().next().unwrap_or_default();
            let head = head.trim_start_matches("# ");
            let (path, needle) = head.split_once(" :: ").expect("# PATH :: NEEDLE");
            (path.to_owned(), needle.to_owned(), format!("{BASE}{doc}"))
        })
        .collect()
}

#[test]
fn every_broken_filter_config_is_refused_with_its_path() {
    let docs = corpus();
    assert!(docs.len() >= 20, "the corpus has {} documents", docs.len());
    for (path, needle, doc) in docs {
        let errors = match load(&doc, Format::Yaml) {
            Ok(_) => panic!("validated, expected {path}: {needle}\n{doc}"),
            Err(e) => e,
        };
        assert!(
            errors
                .iter()
                .any(|e| e.path == path && e.message.contains(&needle)),
            "expected {path}: ...{needle}..., got:\n{}\n{doc}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn a_full_filter_list_compiles_in_order() {
    let doc = format!(
        "{BASE}routes:
  - id: app
    match: {{ path_prefix: /app }}
    service: api
    filters:
      - request_headers: {{ add: {{ X-A: '1' }}, set: {{ X-Client: '${{client_ip}} $$' }}, remove: [X-C] }}
      - url_rewrite: {{ path: {{ replace_prefix: /v2 }}, host: app.internal }}
      - response_headers: {{ set: {{ Strict-Transport-Security: max-age=63072000, X-Route: '${{route_id}}' }}, remove: [Server] }}
      - url_rewrite: {{ path: {{ regex: '^/v2/(?P<rest>.*)$', replace: '/v3/${{rest}}' }} }}
  - id: down
    match: {{ path_prefix: /down }}
    filters:
      - response_headers: {{ set: {{ Retry-After: '60' }} }}
      - direct_response: {{ status: 503, content_type: text/html, body: '<h1>maintenance</h1>' }}
  - id: https
    match: {{ path_prefix: / }}
    filters:
      - redirect: {{ scheme: https, status: 301 }}
"
    );
    let c = load(&doc, Format::Yaml).unwrap_or_else(|e| panic!("{e:?}"));
    let app = c.routes[0].filters.as_deref().expect("filters");
    assert_eq!(app.request.len(), 3);
    assert!(matches!(app.request[0], RequestStep::Headers(_)));
    assert!(matches!(app.request[1], RequestStep::Rewrite(_)));
    assert_eq!(app.response.len(), 1);
    assert!(app.rewrites_path() && !app.is_local());
    let down = c.routes[1].filters.as_deref().expect("filters");
    assert!(matches!(&down.local, Some(Local::Direct(d)) if d.status == 503));
    assert_eq!(c.routes[1].service, usize::MAX);
    let https = c.routes[2].filters.as_deref().expect("filters");
    assert!(matches!(&https.local, Some(Local::Redirect(r)) if r.status == 301));
    // A route without filters has no program.
    let plain = load(
        &format!("{BASE}routes:\n  - {{ id: p, match: {{ path_prefix: / }}, service: api }}\n"),
        Format::Yaml,
    )
    .unwrap();
    assert!(plain.routes[0].filters.is_none());
}

/// A config whose only route answers itself needs no service at all, and
/// compiles to a snapshot.
#[test]
fn a_config_without_services_compiles() {
    let doc = "listeners:
  - { name: public, address: 127.0.0.1:8080 }
routes:
  - id: https
    match: { path_prefix: / }
    filters:
      - redirect: { scheme: https }
";
    let c = load(doc, Format::Yaml).unwrap_or_else(|e| panic!("{e:?}"));
    let registry = crate::node::NodeRegistry::default();
    let snap = crate::snapshot::Snapshot::<()>::compile(std::sync::Arc::new(c), 1, &registry, None);
    assert!(snap.routes[0]
        .filters
        .as_ref()
        .is_some_and(|f| f.is_local()));
}

/// A mirror compiles to its service's index, its share in millionths and
/// its in-flight bound (defaults: 100 %, 64); the route's own service may
/// be its mirror; a copy of an HTTP/2 (gRPC) service's request cannot go
/// to an HTTP/1.1 one.
#[test]
fn a_mirror_names_a_service_a_share_and_a_bound() {
    let doc = "listeners:
  - { name: public, address: 127.0.0.1:8080 }
services:
  - name: api
    nodes: [ { id: a, address: 127.0.0.1:8081 } ]
  - name: shadow
    nodes: [ { id: s, address: 127.0.0.1:8082 } ]
routes:
  - id: some
    match: { path_prefix: /some }
    service: api
    filters:
      - request_headers: { set: { X-A: '1' } }
      - mirror: { service: shadow, percent: 12.5, max_in_flight: 8 }
  - id: own
    match: { path_prefix: / }
    service: api
    filters:
      - mirror: { service: api }
";
    let c = load(doc, Format::Yaml).unwrap_or_else(|e| panic!("{e:?}"));
    let f = c.routes[0].filters.as_deref().expect("filters");
    let m = f.mirror.as_ref().expect("a mirror");
    assert_eq!((m.service, m.per_million, m.max_in_flight), (1, 125_000, 8));
    assert_eq!(f.kinds, ["request_headers", "mirror"]);
    let own = c.routes[1].filters.as_deref().expect("filters");
    let m = own.mirror.as_ref().expect("a mirror");
    assert_eq!(
        (m.service, m.per_million, m.max_in_flight),
        (0, 1_000_000, 64)
    );

    let grpc = doc.replace("  - name: api\n", "  - name: api\n    protocol: http2\n");
    let errors = load(&grpc, Format::Yaml).expect_err("an HTTP/1.1 mirror of an HTTP/2 route");
    assert!(
        errors
            .iter()
            .any(|e| e.path == "routes[0].filters[1].mirror.service"
                && e.message.contains("speaks HTTP/1.1")),
        "{errors:?}"
    );
}
