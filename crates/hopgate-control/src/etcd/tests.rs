use super::*;

const P: &str = "/hg/";

#[test]
fn keys_are_classified_under_the_prefix() {
    assert_eq!(classify(P, "/hg/config"), KeyKind::Config);
    assert_eq!(classify(P, "/hg/nodes/api/n1"), KeyKind::Node("api/n1"));
    assert_eq!(
        classify(P, "/hg/actions/drain/api/n1"),
        KeyKind::Drain("api/n1")
    );
    assert_eq!(
        classify(P, "/hg/actions/maintenance/api/n1/7"),
        KeyKind::Maintenance("api/n1/7")
    );
    for other in ["/hg/status/gw-1", "/other/config", "/hg/configx", "/hg/"] {
        assert_eq!(classify(P, other), KeyKind::Other, "{other}");
    }
}

#[test]
fn the_view_follows_puts_and_deletes() {
    let mut v = View::default();
    let d = v.update(P, "/hg/config", Some("services: []"), 5);
    assert!(d.config && !d.nodes);
    assert_eq!(v.config.as_ref().unwrap().revision, 5);
    assert!(v.update(P, "/hg/nodes/api/n1", Some("{}"), 6).nodes);
    assert!(
        v.update(P, "/hg/actions/drain/api/n1", Some("{}"), 7)
            .drains
    );
    assert_eq!(v.nodes.len(), 1);
    assert_eq!(v.drains.len(), 1);
    v.update(P, "/hg/nodes/api/n1", None, 8);
    v.update(P, "/hg/actions/drain/api/n1", None, 9);
    v.update(P, "/hg/config", None, 10);
    assert_eq!(v, View::default());
    let d = v.update(P, "/hg/status/gw-1", Some("{}"), 11);
    assert!(!d.config && !d.nodes && !d.drains);
}

#[test]
fn the_cache_round_trips_and_replaces_atomically() {
    let dir = std::env::temp_dir().join(format!("hopgate-etcd-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cache.json");
    let mut c = cache::Cached {
        revision: 3,
        config: Doc {
            text: "services: []".into(),
            revision: 2,
        },
        nodes: [("api/n1".to_owned(), "{}".to_owned())].into(),
        drains: BTreeSet::new(),
    };
    cache::save(&path, &c).unwrap();
    c.revision = 4;
    cache::save(&path, &c).unwrap();
    assert_eq!(cache::load(&path).unwrap(), c);
    let leftovers = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(leftovers, 1, "no temp file is left behind");
    std::fs::write(&path, "{").unwrap();
    assert!(cache::load(&path).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_read_range_ends_right_after_the_prefix() {
    use super::source::range_end;
    assert_eq!(range_end("/hg/"), b"/hg0".to_vec());
    assert_eq!(range_end("a\u{7f}"), b"a\x80".to_vec());
    assert_eq!(range_end(""), vec![0]);
}
