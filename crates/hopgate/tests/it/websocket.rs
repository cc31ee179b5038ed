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
    let v: serde_json::Value = c
        .get(gw.admin_url("/admin/v1/config"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["version"], 101);
}
