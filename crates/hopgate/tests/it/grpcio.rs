//! gRPC interop with a stack nobody here wrote: grpcio (gRPC C-core, from
//! PyPI) on both ends — a Python server behind the gateway, a Python client
//! in front of it (`tests/it/py/grpcio_peer.py`). The client's view through
//! the gateway must equal its view of the server directly: unary, server
//! streaming, error statuses with their message and trailing metadata
//! (including trailers-only answers), a deadline, and an unknown method.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::Gateway;

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/py/grpcio_peer.py");

/// A grpcio server child; killed on drop.
struct PyServer {
    _child: Child,
    port: u16,
}

async fn py_server() -> PyServer {
    let mut child = Command::new("python3")
        .args([PEER, "server"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 (with grpcio: pip install grpcio) runs the interop peer");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("grpcio server did not start")
        .unwrap()
        .expect("grpcio server printed nothing (is grpcio installed?)");
    let port = line.strip_prefix("port ").unwrap().trim().parse().unwrap();
    PyServer {
        _child: child,
        port,
    }
}

async fn py_client(addr: &str) -> Value {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new("python3")
            .args([PEER, "client", addr])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("grpcio client hung")
    .unwrap();
    assert!(
        out.status.success(),
        "grpcio client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// hyper adds `date` to every response head; in a trailers-only answer the
/// head is the trailers, so grpcio shows it as trailing metadata.
fn without_date(mut v: Value) -> Value {
    if let Some(t) = v
        .pointer_mut("/unary_fail/trailers")
        .and_then(Value::as_object_mut)
    {
        t.remove("date");
    }
    v
}

#[tokio::test]
async fn grpcio_client_and_server_see_the_same_through_the_gateway() {
    let server = py_server().await;
    let yaml = format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\nservices:\n  - name: g\n    protocol: http2\n    nodes: [ {{ id: n1, address: \"127.0.0.1:{}\" }} ]\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: g }}\n",
        server.port
    );
    let gw = Gateway::start(&yaml).await;
    let direct = py_client(&format!("127.0.0.1:{}", server.port)).await;
    let through = without_date(py_client(&gw.addr.to_string()).await);
    // What the server sent, seen directly (a check of the peer itself).
    assert_eq!(direct["unary_fail"]["code"], "FAILED_PRECONDITION");
    assert_eq!(direct["unary_fail"]["trailers"]["x-detail"], "kept");
    assert_eq!(direct["unimplemented"], "UNIMPLEMENTED");
    assert_eq!(
        through, direct,
        "a grpcio client sees something else through the gateway"
    );
}

/// Header edits are legal on a gRPC route: a grpcio server sees the
/// request metadata the route's filters set and not the one they remove;
/// a grpcio client sees the response edits on the initial metadata, and
/// the trailers (trailing metadata, the status and its message) of an ok
/// and of a failing call arrive intact.
#[tokio::test]
async fn grpc_header_edits_keep_the_trailers() {
    let server = py_server().await;
    let yaml = format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
         services:\n  - name: g\n    protocol: http2\n    nodes: [ {{ id: n1, address: \"127.0.0.1:{}\" }} ]\n\
         routes:\n  - id: grpc\n    match: {{ path_prefix: /, headers: {{ content-type: application/grpc }} }}\n    service: g\n    filters:\n\
         \x20     - request_headers: {{ set: {{ X-Probe: from-gateway, X-Route: '${{route_id}}' }}, remove: [X-Drop] }}\n\
         \x20     - response_headers: {{ set: {{ X-Added: 'yes' }}, remove: [X-Server-Initial] }}\n",
        server.port
    );
    let gw = Gateway::start(&yaml).await;
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new("python3")
            .args([PEER, "headers", &gw.addr.to_string()])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("grpcio client hung")
    .unwrap();
    assert!(
        out.status.success(),
        "grpcio client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ok = &v["ok"];
    assert_eq!(ok["code"], "OK", "{v}");
    assert_eq!(
        ok["seen"],
        serde_json::json!({"x-probe": "from-gateway", "x-route": "grpc", "x-drop": null, "x-keep": "2"}),
        "{v}"
    );
    assert_eq!(ok["initial"]["x-added"], "yes", "{v}");
    assert_eq!(ok["initial"]["x-keep-initial"], "b", "{v}");
    assert!(ok["initial"].get("x-server-initial").is_none(), "{v}");
    assert_eq!(ok["trailers"]["x-trailer"], "t", "{v}");
    let fail = &v["fail"];
    assert_eq!(fail["code"], "FAILED_PRECONDITION", "{v}");
    assert_eq!(fail["details"], "asked to fail", "{v}");
    assert_eq!(fail["trailers"]["x-trailer"], "t", "{v}");
    assert_eq!(fail["initial"]["x-added"], "yes", "{v}");
}
