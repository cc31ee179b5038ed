//! The rest of the running state across an upgrade and, with `state_dir`,
//! across a plain restart: a baking config canary (same version, share and
//! bake), a node moved by a MOVING notice (and the notice's sequence
//! number, so a repeat stays a duplicate), a config applied through the
//! admin API with its history, and a drain.

use std::net::SocketAddr;
use std::path::Path;

use crate::harness::{client, temp_path, Backend};

use super::{temp_config, Proc};

fn doc(socket: &Path, b1: SocketAddr, b2: SocketAddr, extra: &str) -> String {
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
         timeouts: {{ shutdown: 2s }}\nupgrade: {{ socket: {} }}\n{extra}\
         services:\n  - {{ name: app, nodes: [ {{ id: n1, address: \"{b1}\" }}, {{ id: n2, address: \"{b2}\" }} ] }}\n\
         routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        socket.display(),
    )
}

async fn get_json(admin: SocketAddr, path: &str) -> serde_json::Value {
    client()
        .get(format!("http://{admin}{path}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn node<'a>(nodes: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .unwrap()
}

#[tokio::test]
async fn an_upgrade_keeps_a_baking_canary_and_a_moved_node() {
    let (b1, b2, b3) = (
        Backend::start("n1").await,
        Backend::start("n2").await,
        Backend::start("n1-moved").await,
    );
    let socket = temp_path("sock");
    // Relaxed long enough to outlast the upgrade on a slow machine.
    let extra = "maintenance: { post_handoff_relaxed: 10m }\n";
    let file = temp_config(&doc(&socket, b1.addr, b2.addr, extra));
    let mut old = Proc::start(&file, false, &[]).await.expect("starts");
    let c = client();

    let canary_doc = doc(&socket, b1.addr, b2.addr, extra).replace("id: all", "id: all-canary");
    let r = c
        .put(format!(
            "http://{}/admin/v1/config?canary=30&bake=1h",
            old.admin
        ))
        .body(canary_doc)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let before = get_json(old.admin, "/admin/v1/config/canary").await;
    assert_eq!(before["state"], "baking", "{before}");
    let note = serde_json::json!({
        "service": "app", "node": "n1", "kind": "MOVING", "seq": 7,
        "to": b3.addr.to_string(), "in": 600,
    });
    let r = c
        .post(format!("http://{}/admin/v1/maintenance", old.admin))
        .json(&note)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    let next = Proc::start(&file, true, &[]).await.expect("upgrade");
    assert_eq!(old.exit_code().await, Some(0));
    let after = get_json(next.admin, "/admin/v1/config/canary").await;
    assert_eq!(after["state"], "baking", "{after}");
    assert_eq!(after["version"], before["version"], "{after}");
    assert_eq!(after["percent"], 30.0, "{after}");
    let nodes = get_json(next.admin, "/admin/v1/nodes").await;
    let n1 = node(&nodes, "n1");
    assert_eq!(
        n1["maintenance"]["moved_to"],
        b3.addr.to_string(),
        "{nodes}"
    );
    assert_eq!(n1["maintenance"]["relaxed"], true, "{nodes}");
    // The same notice again is a duplicate in the new process too.
    let r = c
        .post(format!("http://{}/admin/v1/maintenance", next.admin))
        .json(&note)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "{}", r.text().await.unwrap());
    assert!(
        next.logs()
            .contains("the canary baking in the previous process goes on"),
        "{}",
        next.logs()
    );
    let _ = std::fs::remove_file(&file);
}

#[tokio::test]
async fn a_restart_with_state_dir_keeps_the_admin_applied_config_and_drains() {
    let (b1, b2) = (Backend::start("n1").await, Backend::start("n2").await);
    let socket = temp_path("sock");
    let dir = temp_path("state");
    let state = format!("state_dir: {}\n", dir.display());
    let file = temp_config(&doc(&socket, b1.addr, b2.addr, &state));
    let mut first = Proc::start(&file, false, &[]).await.expect("starts");
    let c = client();
    let admin_doc = doc(&socket, b1.addr, b2.addr, &state).replace("id: all", "id: from-admin");
    let r = c
        .put(format!("http://{}/admin/v1/config", first.admin))
        .body(admin_doc)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = c
        .post(format!(
            "http://{}/admin/v1/nodes/app/n2/drain",
            first.admin
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    first.signal("TERM");
    assert_eq!(first.exit_code().await, Some(0));
    assert!(dir.join("state.json").exists());

    // A plain restart (no upgrade): version 2, its history, n2 drained.
    let mut second = Proc::start(&file, false, &[]).await.expect("restarts");
    let config = get_json(second.admin, "/admin/v1/config").await;
    assert_eq!(config["version"], 2, "{config}");
    assert_eq!(
        config["config"]["routes"][0]["id"], "from-admin",
        "{config}"
    );
    let history = get_json(second.admin, "/admin/v1/config/versions").await;
    let sources: Vec<String> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["source"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sources.len(), 2, "{history}");
    assert_eq!(sources[1], "admin", "{history}");
    let nodes = get_json(second.admin, "/admin/v1/nodes").await;
    assert_eq!(node(&nodes, "n2")["draining"], true, "{nodes}");
    second.signal("TERM");
    assert_eq!(second.exit_code().await, Some(0));

    // The file edited meanwhile: the restart runs it, as version 3.
    std::fs::write(
        &file,
        doc(&socket, b1.addr, b2.addr, &state).replace("id: all", "id: edited"),
    )
    .unwrap();
    let third = Proc::start(&file, false, &[]).await.expect("restarts");
    let config = get_json(third.admin, "/admin/v1/config").await;
    assert_eq!(config["version"], 3, "{config}");
    assert_eq!(config["config"]["routes"][0]["id"], "edited", "{config}");
    drop(third);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The stand-in's next line.
async fn next(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
        .await
        .expect("the stand-in answers")
        .unwrap()
        .unwrap_or_default()
}

/// A running process of an older release (protocol 1, played by
/// `py/upgrade_protocol1.py`) refuses `HELLO 2`: the new process asks
/// again with `HELLO 1`, takes the sockets without a state and starts from
/// its config file, serving on the handed-over listener.
#[tokio::test]
async fn a_protocol_1_process_hands_over_sockets_and_the_new_one_starts_from_its_file() {
    use tokio::io::AsyncBufReadExt;
    let b = Backend::start("n1").await;
    let socket = temp_path("sock");
    let mut old = tokio::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/py/upgrade_protocol1.py"
        ))
        .arg(&socket)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    let mut lines = tokio::io::BufReader::new(old.stdout.take().unwrap()).lines();
    let port = next(&mut lines).await;
    assert!(port.starts_with("port="), "{port}");
    let admin = next(&mut lines).await;
    assert!(admin.starts_with("admin="), "{admin}");
    let file = temp_config(&doc(&socket, b.addr, b.addr, ""));
    let new = Proc::start(&file, true, &[]).await.expect("upgrade");
    assert_eq!(
        next(&mut lines).await.split(' ').next(),
        Some("hello=HELLO")
    );
    assert!(next(&mut lines).await.starts_with("hello=HELLO 1 "));
    assert_eq!(next(&mut lines).await, "drain=ok");
    assert_eq!(
        new.addr.port().to_string(),
        port.trim_start_matches("port="),
        "the new process serves the handed-over socket"
    );
    assert_eq!(
        new.admin.port().to_string(),
        admin.trim_start_matches("admin=")
    );
    let r = client()
        .get(format!("http://{}/x", new.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let config = get_json(new.admin, "/admin/v1/config").await;
    assert_eq!(config["version"], 1, "{config}");
    assert!(
        new.logs()
            .contains("the running process speaks protocol 1; its state is not carried"),
        "{}",
        new.logs()
    );
    let _ = old.wait().await;
    let _ = std::fs::remove_file(&file);
}
