//! Slow start: a node back from a restart ramps from ~10 % of its share to
//! all of it over `services[].slow_start`, measured from which backend
//! answered each request.

use std::time::{Duration, Instant};

use crate::harness::{client, config, node_of, within, Backend, Gateway};

const WINDOW_S: u64 = 4;

/// `n2`'s health in `GET /admin/v1/nodes`.
async fn health_of(gw: &Gateway, id: &str) -> String {
    let nodes = gw.admin_json("/admin/v1/nodes").await;
    nodes["nodes"]
        .as_array()
        .and_then(|a| a.iter().find(|n| n["id"] == id))
        .map(|n| n["health"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

async fn wait_health(gw: &Gateway, id: &str, want: &str) {
    let became = within(Duration::from_secs(30), || async {
        health_of(gw, id).await == want
    })
    .await;
    assert!(became, "{id} never became {want}");
}

/// Requests one at a time until `until`, at least `min` of them; how many
/// each of `n1`/`n2`/`n3` answered.
async fn counts_until(gw: &Gateway, until: Instant, min: usize) -> [usize; 3] {
    let c = client();
    let mut n = [0; 3];
    while Instant::now() < until || n.iter().sum::<usize>() < min {
        let r = c.get(gw.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        match node_of(r).await.as_str() {
            "n1" => n[0] += 1,
            "n2" => n[1] += 1,
            "n3" => n[2] += 1,
            other => panic!("answered by {other}"),
        }
    }
    n
}

async fn shares_until(gw: &Gateway, until: Instant, min: usize) -> (usize, usize) {
    let [n1, n2, _] = counts_until(gw, until, min).await;
    (n1, n2)
}

#[tokio::test]
async fn a_restarted_node_ramps_up_over_the_window() {
    let b1 = Backend::start("n1").await;
    let mut b2 = Backend::start("n2").await;
    let b3 = Backend::start("n3").await;
    let (a1, a2) = (b1.addr, b2.addr);
    let services = |extra: &str| {
        format!(
            "  - name: app\n    lb: smooth_wrr\n    slow_start: {WINDOW_S}s\n    health: {{ path: /health, interval: 200ms, timeout: 200ms, rise: 1, fall: 2 }}\n    nodes:\n      - {{ id: n1, address: \"{}\" }}\n      - {{ id: n2, address: \"{}\" }}\n{extra}",
            a1, a2
        )
    };
    let route = "  - { id: all, match: { path_prefix: / }, service: app }\n";
    let gw = Gateway::start(&config(&services(""), route)).await;
    // The first nodes of a service start warm: an even split at once.
    let (n1, n2) = shares_until(&gw, Instant::now(), 200).await;
    assert_eq!((n1, n2), (100, 100), "the first nodes are not throttled");

    b2.kill().await;
    wait_health(&gw, "n2", "unhealthy").await;
    b2.restart().await;
    wait_health(&gw, "n2", "healthy").await;
    let back = Instant::now();
    let nodes = gw.admin_json("/admin/v1/nodes").await;
    let percent = |id: &str| {
        nodes["nodes"]
            .as_array()
            .and_then(|a| a.iter().find(|n| n["id"] == id))
            .and_then(|n| n["slow_start_percent"].as_u64())
            .unwrap_or_else(|| panic!("no slow_start_percent for {id}: {nodes}"))
    };
    assert!(percent("n2") < 50, "n2 is not ramping: {nodes}");
    assert_eq!(percent("n1"), 100, "n1 is warm");
    // The first quarter of the window: n2's ramp goes from 10 % to ~33 %
    // of its half, so it answers about a tenth of the requests.
    let (e1, e2) = shares_until(&gw, back + Duration::from_secs(WINDOW_S) / 4, 200).await;
    let early = e2 as f64 / (e1 + e2) as f64;
    println!("restarted node, first quarter of the window: n1 {e1}, n2 {e2} ({early:.3})");
    assert!(
        early < 0.3,
        "n2 answered {e2} of {} right after its restart",
        e1 + e2
    );
    assert!(e2 > 0, "n2 got nothing at all while ramping");
    // After the window: an even split again.
    tokio::time::sleep_until((back + Duration::from_secs(WINDOW_S + 1)).into()).await;
    let (l1, l2) = shares_until(&gw, Instant::now(), 400).await;
    let late = l2 as f64 / (l1 + l2) as f64;
    println!("restarted node, after the window: n1 {l1}, n2 {l2} ({late:.3})");
    assert!(
        (0.4..=0.6).contains(&late),
        "n2 answered {l2} of {} after the window",
        l1 + l2
    );

    // A node a reload adds to the running service starts cold too.
    let n3 = format!("      - {{ id: n3, address: \"{}\" }}\n", b3.addr);
    gw.rewrite_config(&config(&services(&n3), route));
    let applied = within(Duration::from_secs(30), || async {
        !health_of(&gw, "n3").await.is_empty()
    })
    .await;
    assert!(applied, "the reload adding n3 never applied");
    let added = Instant::now();
    let n = counts_until(&gw, added + Duration::from_secs(WINDOW_S) / 4, 300).await;
    let share = n[2] as f64 / n.iter().sum::<usize>() as f64;
    println!("added node, first quarter of the window: {n:?} ({share:.3})");
    assert!(share < 0.2, "n3 answered {n:?} right after it was added");
    tokio::time::sleep_until((added + Duration::from_secs(WINDOW_S + 1)).into()).await;
    let n = counts_until(&gw, Instant::now(), 600).await;
    println!("added node, after the window: {n:?}");
    for (i, c) in n.iter().enumerate() {
        assert!(
            (150..=250).contains(c),
            "node {i} answered {c} of 600: {n:?}"
        );
    }
}
