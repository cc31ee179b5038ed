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
