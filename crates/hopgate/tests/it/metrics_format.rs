//! `/metrics` formats: OpenMetrics 1.0.0 when the scraper's `Accept` asks
//! for it (as Prometheus does), Prometheus text 0.0.4 otherwise, with the
//! same series in both.

use std::collections::BTreeSet;

use crate::harness::{client, config, service, Backend, Gateway};

/// What Prometheus sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

async fn scrape(gw: &Gateway, accept: Option<&str>) -> (String, String) {
    let mut req = client().get(gw.admin_url("/metrics"));
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
    (ct, r.text().await.unwrap())
}

/// Every sample's name and labels (sorted; `le` read as a number, since
/// the formats spell the bounds differently: `1` and `1.0`).
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let key = l.rsplit_once(' ').unwrap().0;
            let (name, labels) = match key.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}').unwrap()),
                None => (key, ""),
            };
            let mut pairs: Vec<String> = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once("=\"").unwrap();
                    let v = v.trim_end_matches('"');
                    match (k, v.parse::<f64>()) {
                        ("le", Ok(f)) => format!("le={f}"),
                        _ => format!("{k}={v}"),
                    }
                })
                .collect();
            pairs.sort();
            format!("{name}{{{}}}", pairs.join(","))
        })
        .collect()
}

#[tokio::test]
async fn openmetrics_when_asked_for_with_the_same_series_as_prometheus_text() {
    let b = Backend::start("n1").await;
    let gw = Gateway::start(&config(
        &service("svc", &[("n1", b.addr, "")]),
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    ))
    .await;
    for _ in 0..3 {
        let r = client().get(gw.url("/x")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }

    // No Accept beyond curl's and reqwest's `*/*`: Prometheus text.
    let (ct, text) = scrape(&gw, None).await;
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
    assert!(!text.contains("# EOF"), "{text}");
    assert!(text.contains("# TYPE hopgate_requests_total counter\n"));
    assert!(text.contains("# TYPE hopgate_build_info gauge\n"));
    let (ct, _) = scrape(&gw, Some("text/plain; version=0.0.4")).await;
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");

    let (ct, om) = scrape(&gw, Some(PROMETHEUS_ACCEPT)).await;
    assert_eq!(
        ct,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.ends_with("\n# EOF\n"), "{om}");
    assert_eq!(om.matches("# EOF").count(), 1);
    for line in [
        "# TYPE hopgate_requests counter",
        "# TYPE hopgate_build info",
        "# TYPE hopgate_request_duration_seconds histogram",
        "# UNIT hopgate_request_duration_seconds seconds",
        "hopgate_route_responses_total{route=\"all\",service=\"svc\",class=\"2xx\"} 3",
        "hopgate_request_duration_seconds_count{route=\"all\",service=\"svc\"} 3",
    ] {
        assert!(om.lines().any(|l| l == line), "{line:?} not in\n{om}");
    }
    // Every sample name ends as users scrape it: no `_total_total`, no
    // bare counter family.
    assert!(!om.contains("_total_total"), "{om}");

    let (text_series, om_series) = (series(&text), series(&om));
    assert!(text_series.len() > 100, "{}", text_series.len());
    assert_eq!(
        text_series
            .symmetric_difference(&om_series)
            .collect::<Vec<_>>(),
        Vec::<&String>::new()
    );
}
