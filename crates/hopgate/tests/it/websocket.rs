//! WebSocket through the gateway: the upgrade is forwarded, the tunnel
//! carries messages intact and in order, and reloads that do not concern
//! its route never cut it.

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::harness::{client, config, service, Backend, Gateway};

async fn connect(
    gw: &Gateway,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let (ws, resp) = tokio_tungstenite::connect_async(format!("ws://{}/ws", gw.addr))
        .await
        .expect("websocket through the gateway");
    assert_eq!(resp.status(), 101);
    ws
}

#[tokio::test]
async fn ten_thousand_messages_each_way_in_order() {
    let b = Backend::start("ws1").await;
    let gw = Gateway::start(&config(
        &service("s", &[("ws1", b.addr, "")]),
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ))
    .await;
    let ws = connect(&gw).await;
    let (mut tx, mut rx) = ws.split();
    let n = 10_000;
    let sender = async {
        for i in 0..n {
            let msg = if i % 2 == 0 {
                Message::text(format!("message {i}"))
            } else {
                Message::binary(vec![(i % 251) as u8; 1 + i % 300])
            };
            tx.send(msg).await.unwrap();
        }
    };
    let receiver = async {
        for i in 0..n {
            let got = rx.next().await.expect("an echo").unwrap();
            if i % 2 == 0 {
                assert_eq!(got, Message::text(format!("message {i}")));
            } else {
                assert_eq!(got, Message::binary(vec![(i % 251) as u8; 1 + i % 300]));
            }
        }
    };
    tokio::join!(sender, receiver);
    tx.send(Message::Close(None)).await.unwrap();
}

#[tokio::test]
async fn a_websocket_survives_a_hundred_reloads_of_other_routes() {
    let b = Backend::start("ws1").await;
    let other = Backend::start("other").await;
    let services = format!(
        "{}{}",
        service("s", &[("ws1", b.addr, "")]),
        service("o", &[("other", other.addr, "")])
    );
    let cfg = |prefix: &str| {
        config(&services, &format!("  - {{ id: ws, match: {{ path_prefix: /ws }}, service: s }}\n  - {{ id: other, match: {{ path_prefix: {prefix} }}, service: o }}"))
    };
    let gw = Gateway::start(&cfg("/a")).await;
    let mut ws = connect(&gw).await;
    let c = client();
    for i in 0..100 {
        let r = c
            .put(gw.admin_url("/admin/v1/config"))
            .body(cfg(if i % 2 == 0 { "/b" } else { "/a" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "reload {i}");
        ws.send(Message::text(format!("after reload {i}")))
            .await
            .unwrap();
        let got = ws.next().await.expect("the tunnel is still open").unwrap();
        assert_eq!(got, Message::text(format!("after reload {i}")));
    }
    let v: serde_json::Value = gw.admin_json("/admin/v1/config").await;
    assert_eq!(v["version"], 101);
}

/// Reads until the server's close frame; returns its code.
async fn close_code<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Option<u16>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let read = async {
        while let Some(m) = ws.next().await {
            match m {
                Ok(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
        None
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), read)
        .await
        .expect("the tunnel ends")
}

async fn connect_with_session(
    gw: &Gateway,
    token: Option<&str>,
) -> (
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    Option<String>,
) {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{}/ws", gw.addr)
        .into_client_request()
        .unwrap();
    if let Some(t) = token {
        req.headers_mut().insert("hop-session", t.parse().unwrap());
    }
    let (ws, resp) = tokio_tungstenite::connect_async(req)
        .await
        .expect("websocket through the gateway");
    let issued = resp
        .headers()
        .get("hop-session")
        .map(|v| v.to_str().unwrap().to_owned());
    (ws, issued)
}

async fn which_node(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    gw: &Gateway,
) -> String {
    // The echo does not say which node it is; the admin API does (the
    // tunnel counts as in flight on its node).
    let _ = ws;
    let v: serde_json::Value = gw.admin_json("/admin/v1/nodes").await;
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["in_flight"].as_u64().unwrap_or(0) > 0)
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .expect("a node carries the tunnel")
}

fn ws_config(a: &Backend, b: &Backend, drain: &str) -> String {
    let svc = service("s", &[("a", a.addr, ""), ("b", b.addr, "")]).replacen(
        "  - name: s\n",
        &format!("  - name: s\n{drain}"),
        1,
    );
    config(&svc, "  - { id: r, match: { path_prefix: / }, service: s }") + "sessions: { ttl: 1h }\n"
}

#[tokio::test]
async fn drain_closes_with_1012_at_the_deadline_and_the_session_reconnects_elsewhere() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let gw = Gateway::start(&ws_config(
        &a,
        &b,
        "    drain: { mode: finish, deadline: 1s }\n",
    ))
    .await;
    let (mut ws, token) = connect_with_session(&gw, None).await;
    let token = token.expect("the handshake issues a session");
    let node = which_node(&mut ws, &gw).await;
    client()
        .post(gw.admin_url(&format!("/admin/v1/nodes/s/{node}/drain")))
        .send()
        .await
        .unwrap();
    // Before the deadline the tunnel still works.
    for i in 0..3 {
        ws.send(Message::text(format!("still here {i}")))
            .await
            .unwrap();
        assert_eq!(
            ws.next().await.unwrap().unwrap(),
            Message::text(format!("still here {i}"))
        );
    }
    assert_eq!(
        close_code(&mut ws).await,
        Some(1012),
        "closed with Service Restart at the deadline"
    );
    // Reconnecting with the same session lands on the other node.
    let (mut ws2, _) = connect_with_session(&gw, Some(&token)).await;
    let again = which_node(&mut ws2, &gw).await;
    assert_ne!(again, node);
    ws2.send(Message::text("hello")).await.unwrap();
    assert_eq!(ws2.next().await.unwrap().unwrap(), Message::text("hello"));
}

#[tokio::test]
async fn a_dying_node_gives_1012_not_a_reset() {
    let mut a = Backend::start("a").await;
    let mut b = Backend::start("b").await;
    let gw = Gateway::start(&ws_config(&a, &b, "")).await;
    let (mut ws, _) = connect_with_session(&gw, None).await;
    ws.send(Message::text("ping")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("ping"));
    let node = which_node(&mut ws, &gw).await;
    if node == "a" {
        a.kill().await
    } else {
        b.kill().await
    }
    assert_eq!(close_code(&mut ws).await, Some(1012));
}

#[tokio::test]
async fn gateway_shutdown_closes_websockets_with_1012() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let mut gw = Gateway::start(&ws_config(&a, &b, "")).await;
    let (mut ws, _) = connect_with_session(&gw, None).await;
    ws.send(Message::text("ping")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("ping"));
    gw.sigterm();
    assert_eq!(
        close_code(&mut ws).await,
        Some(1012),
        "clients are told to reconnect"
    );
    assert_eq!(gw.wait().await, Some(0));
}
