//! What the new process takes over besides the sockets: session
//! bindings, listeners added, moved and removed, node health, and the
//! admin-applied config with its history and drains; and the other ways an
//! upgrade starts (systemd socket activation, SIGUSR2).

use super::*;

#[tokio::test]
async fn session_bindings_move_to_the_new_process() {
    let backends = [
        Backend::start("n1").await,
        Backend::start("n2").await,
        Backend::start("n3").await,
    ];
    let socket = temp_path("sock");
    let store = temp_path("sessions");
    let config = temp_path("yaml");
    let nodes: String = backends
        .iter()
        .map(|b| format!("{{ id: {}, address: \"{}\" }}, ", b.id, b.addr))
        .collect();
    // persist_interval far beyond the test: only the handover saves.
    std::fs::write(
        &config,
        format!(
            "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
             timeouts: {{ shutdown: 2s }}\nupgrade: {{ socket: {} }}\n\
             sessions: {{ secret_env: HG_SECRET, ttl: 1h }}\nstore: {{ path: {}, persist_interval: 1h }}\n\
             services:\n  - {{ name: app, nodes: [ {nodes} ] }}\n\
             routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
            socket.display(),
            store.display()
        ),
    )
    .unwrap();
    let env = [("HG_SECRET", "upgrade-test-secret-0123456789abcdef")];
    let mut old = Proc::start(&config, false, &env).await.expect("starts");
    let c = client();
    let get = |addr: SocketAddr, token: Option<String>| {
        let c = c.clone();
        async move {
            let mut req = c.get(format!("http://{addr}/"));
            if let Some(t) = token {
                req = req.header("hop-session", t);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200);
            let token = r
                .headers()
                .get("hop-session")
                .map(|v| v.to_str().unwrap().to_owned());
            let v: serde_json::Value = r.json().await.unwrap();
            (v["node"].as_str().unwrap().to_owned(), token)
        }
    };
    let mut sessions = Vec::new();
    for _ in 0..6 {
        let (node, token) = get(old.addr, None).await;
        let token = token.expect("a session is issued");
        // Bound when the client comes back with its token.
        assert_eq!(get(old.addr, Some(token.clone())).await.0, node);
        sessions.push((node, token));
    }
    let next = Proc::start(&config, true, &env).await.expect("upgrade");
    assert!(
        next.logs().contains("loaded 6 sessions"),
        "the new process loads what the old one saved at the handover:\n{}\nold:\n{}",
        next.logs(),
        old.logs()
    );
    assert_eq!(old.exit_code().await, Some(0));
    for (node, token) in &sessions {
        let (served, _) = get(next.addr, Some(token.clone())).await;
        assert_eq!(&served, node, "the binding moved with the handover");
    }
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_file(&store);
}

#[tokio::test]
async fn systemd_socket_activation_readiness_and_an_upgrade() {
    let b = Backend::start("n1").await;
    let config = temp_config(&yaml(b.addr, &temp_path("sock"), None));
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/it/py/systemd_activate.py"
            ))
            .arg(BIN)
            .arg(&config)
            .output(),
    )
    .await
    .expect("the systemd stand-in finishes")
    .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = |key: &str| {
        text.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let port = value("port").first().cloned().unwrap_or_default();
    assert!(!port.is_empty(), "{text}");
    let listening = value("listening").first().cloned().unwrap_or_default();
    assert!(
        listening.ends_with(&format!("addr=127.0.0.1:{port}")),
        "the listener serves the socket systemd passed: {text}"
    );
    assert_eq!(
        value("notify"),
        ["READY=1", "MAINPID=<new>,READY=1", "STOPPING=1"],
        "{text}"
    );
    let upgraded = value("upgraded").first().cloned().unwrap_or_default();
    assert!(
        upgraded.ends_with(&format!("addr=127.0.0.1:{port}")),
        "the new process serves the socket systemd passed: {text}"
    );
    assert_eq!(value("old_exit"), ["0"], "{text}");
    assert_eq!(value("status"), ["200", "200"], "{text}");
    assert_eq!(value("exit"), ["0"], "{text}");
    let _ = std::fs::remove_file(&config);
}

#[tokio::test]
async fn sigusr2_starts_the_new_process_itself() {
    let b = Backend::start("n1").await;
    let socket = temp_path("sock");
    let config = temp_config(&yaml(b.addr, &socket, None));
    let mut old = Proc::start(&config, false, &[]).await.expect("starts");
    old.signal("USR2");
    // The new process is the old one's child: its pid is in the old log.
    assert_eq!(old.exit_code().await, Some(0), "{}", old.logs());
    let logs = old.logs();
    let pid: u32 = logs
        .lines()
        .find(|l| l.contains("SIGUSR2: started the new process"))
        .and_then(|l| l.split("pid=").nth(1))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no new pid in {logs}"));
    assert!(logs.contains("handed over to the new process"), "{logs}");
    // It serves on the same socket, and the old one is gone.
    let r = client().get(format!("http://{}/", old.addr)).send().await;
    let kill = |sig: &str| {
        std::process::Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    let status = r.map(|r| r.status().as_u16());
    assert!(kill("TERM"), "the new process runs");
    assert_eq!(status.ok(), Some(200));
    within(Duration::from_secs(10), || async { !kill("0") }).await;
    assert!(!kill("0"), "the new process exits on SIGTERM");
    let _ = std::fs::remove_file(&config);
}

#[tokio::test]
async fn listeners_added_moved_and_removed_across_an_upgrade() {
    let b = Backend::start("n1").await;
    let socket = temp_path("sock");
    let doc = |listeners: &str| {
        format!(
            "listeners:\n{listeners}admin: {{ address: 127.0.0.1:0 }}\n\
             timeouts: {{ shutdown: 2s }}\nlimits: {{ max_connections: 1000 }}\nupgrade: {{ socket: {} }}\n\
             services:\n  - {{ name: app, nodes: [ {{ id: n1, address: \"{}\" }} ] }}\n\
             routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
            socket.display(),
            b.addr
        )
    };
    let old_config = temp_config(&doc(
        "  - { name: public, address: 127.0.0.1:0 }\n  - { name: moved, address: 127.0.0.1:0 }\n  - { name: gone, address: 127.0.0.1:0 }\n",
    ));
    // No process listens on the socket yet: --upgrade says so and stops.
    let e = Proc::start(&old_config, true, &[])
        .await
        .err()
        .expect("nothing to upgrade");
    assert!(e.contains("no running hopgate answers on"), "{e}");
    let mut old = Proc::start(&old_config, false, &[]).await.expect("starts");
    // The new process may run another config file with the same socket.
    let new_config = temp_config(&doc(
        "  - { name: public, address: 127.0.0.1:0 }\n  - { name: moved, address: 127.0.0.2:0 }\n  - { name: added, address: 127.0.0.1:0 }\n",
    ));
    let next = Proc::start(&new_config, true, &[]).await.expect("upgrade");
    assert_eq!(
        next.listener("public"),
        old.listener("public"),
        "public keeps its socket"
    );
    assert_ne!(
        next.listener("moved"),
        old.listener("moved"),
        "moved is bound afresh"
    );
    assert_eq!(next.listener("moved").ip().to_string(), "127.0.0.2");
    assert_eq!(old.exit_code().await, Some(0));
    let logs = next.logs();
    assert!(
        logs.contains("inherited socket not in the config; closed") && logs.contains("name=gone"),
        "{logs}"
    );
    let c = client();
    for name in ["public", "moved", "added"] {
        let r = c
            .get(format!("http://{}/", next.listener(name)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}");
    }
    // The sockets no listener claimed are closed with the old process.
    for name in ["moved", "gone"] {
        assert!(
            tokio::net::TcpStream::connect(old.listener(name))
                .await
                .is_err(),
            "the old {name} socket still accepts"
        );
    }
    let _ = std::fs::remove_file(&old_config);
    let _ = std::fs::remove_file(&new_config);
}

#[tokio::test]
async fn node_health_moves_to_the_new_process() {
    let b1 = Backend::start("n1").await;
    let mut b2 = Backend::start("n2").await;
    let socket = temp_path("sock");
    let (a1, a2) = (b1.addr, b2.addr);
    let doc = |interval: &str| {
        format!(
            "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
             timeouts: {{ shutdown: 2s }}\nupgrade: {{ socket: {} }}\n\
             services:\n  - name: app\n    health: {{ interval: {interval}, timeout: 100ms, rise: 1, fall: 1, initial: healthy }}\n    \
             nodes: [ {{ id: n1, address: \"{}\" }}, {{ id: n2, address: \"{}\" }} ]\n\
             routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
            socket.display(),
            a1,
            a2
        )
    };
    let old_config = temp_config(&doc("200ms"));
    let mut old = Proc::start(&old_config, false, &[]).await.expect("starts");
    b2.kill().await;
    let health_of = |admin: SocketAddr, id: &'static str| async move {
        let v: serde_json::Value = client()
            .get(format!("http://{admin}/admin/v1/nodes"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .map(|n| n["health"].as_str().unwrap().to_owned())
            .unwrap()
    };
    within(Duration::from_secs(10), || async {
        health_of(old.admin, "n2").await == "unhealthy"
    })
    .await;
    assert_eq!(health_of(old.admin, "n2").await, "unhealthy");
    // The new process checks every hour (its first check in about 15
    // minutes) and says `initial: healthy`: what it knows at once came
    // from the old process.
    let new_config = temp_config(&doc("1h"));
    let next = Proc::start(&new_config, true, &[]).await.expect("upgrade");
    assert_eq!(health_of(next.admin, "n2").await, "unhealthy");
    assert_eq!(health_of(next.admin, "n1").await, "healthy");
    assert!(
        next.logs().contains("node health carried over"),
        "{}",
        next.logs()
    );
    assert_eq!(old.exit_code().await, Some(0));
    let _ = std::fs::remove_file(&old_config);
    let _ = std::fs::remove_file(&new_config);
}

/// An upgrade keeps what the operator did to the running process: a config
/// applied through the admin API (the new process serves that version,
/// with the history before it) and a drain. A config file edited since it
/// was last applied is what the next upgrade starts from, as a new version
/// after the carried ones.
#[tokio::test]
async fn an_upgrade_keeps_the_admin_applied_config_its_history_and_drains() {
    let (b1, b2) = (Backend::start("n1").await, Backend::start("n2").await);
    let socket = temp_path("sock");
    let doc = |extra_route: &str| {
        format!(
            "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
             timeouts: {{ shutdown: 2s }}\nupgrade: {{ socket: {} }}\n\
             services:\n  - {{ name: app, nodes: [ {{ id: n1, address: \"{}\" }}, {{ id: n2, address: \"{}\" }} ] }}\n  \
             - {{ name: two, nodes: [ {{ id: t2, address: \"{}\" }} ] }}\n\
             routes:\n{extra_route}  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
            socket.display(),
            b1.addr,
            b2.addr,
            b2.addr
        )
    };
    let file = temp_config(&doc(""));
    let mut old = Proc::start(&file, false, &[]).await.expect("starts");
    let c = client();
    let admin_json = |admin: SocketAddr, path: &'static str| {
        let c = c.clone();
        async move {
            c.get(format!("http://{admin}{path}"))
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    let node_of = |addr: SocketAddr, path: &'static str| {
        let c = c.clone();
        async move {
            let r = c.get(format!("http://{addr}{path}")).send().await.unwrap();
            let status = r.status().as_u16();
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            (status, v["node"].as_str().unwrap_or_default().to_owned())
        }
    };

    // Version 2 through the admin API: /two goes to the service `two`.
    let r = c
        .put(format!("http://{}/admin/v1/config", old.admin))
        .body(doc(
            "  - { id: two, priority: 10, match: { path_prefix: /two }, service: two }\n",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(format!("http://{}/admin/v1/nodes/app/n2/drain", old.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // The file is unchanged: the new process runs version 2 and drains n2.
    let mut next = Proc::start(&file, true, &[]).await.expect("upgrade");
    assert_eq!(old.exit_code().await, Some(0));
    let config = admin_json(next.admin, "/admin/v1/config").await;
    assert_eq!(config["version"], 2, "{config}");
    let history = admin_json(next.admin, "/admin/v1/config/versions").await;
    let sources: Vec<(u64, String)> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["source"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(sources.len(), 2, "{history}");
    assert_eq!(sources[0].0, 1);
    assert!(sources[0].1.starts_with("file:"), "{history}");
    assert_eq!(sources[1], (2, "admin".to_owned()), "{history}");
    assert_eq!(node_of(next.addr, "/two/x").await, (200, "n2".to_owned()));
    for _ in 0..4 {
        assert_eq!(
            node_of(next.addr, "/").await,
            (200, "n1".to_owned()),
            "n2 drains"
        );
    }
    let nodes = admin_json(next.admin, "/admin/v1/nodes").await;
    let n2 = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "n2" && n["service"] == "app")
        .cloned()
        .unwrap_or_default();
    assert_eq!(n2["draining"], true, "{nodes}");
    assert!(
        next.logs()
            .contains("starting from the previous process's running config"),
        "{}",
        next.logs()
    );

    // The file edited (no /two, a /file route): the next upgrade starts
    // from it, as version 3.
    std::fs::write(
        &file,
        doc("  - { id: file, priority: 10, match: { path_prefix: /file }, service: two }\n"),
    )
    .unwrap();
    // The running process's file watch applies it as well; either way the
    // edited file is what runs after the upgrade.
    let last = Proc::start(&file, true, &[]).await.expect("upgrade");
    assert_eq!(next.exit_code().await, Some(0));
    let config = admin_json(last.admin, "/admin/v1/config").await;
    assert!(config["version"].as_u64().unwrap() >= 3, "{config}");
    assert_eq!(node_of(last.addr, "/file/x").await, (200, "n2".to_owned()));
    let history = admin_json(last.admin, "/admin/v1/config/versions").await;
    let versions: Vec<u64> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(&versions[..2], &[1, 2], "{history}");
    let _ = std::fs::remove_file(&file);
}
