//! The WSE profile: JWT checked after the upgrade, the greeting, ping/PONG in every format,
//! malformed frames counted.

mod common;
use common::*;
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use wsload_proto::frame;

fn wse_server() -> Server {
    Server::start(&[
        "--profile",
        "wse",
        "--jwt-secret",
        SECRET,
        "--jwt-issuer",
        "wse-bench",
        "--jwt-audience",
        "wse-bench",
    ])
}

fn json_of(msg: &Message) -> Value {
    match msg {
        Message::Text(t) => serde_json::from_str(t).expect("JSON text"),
        Message::Binary(b) => rmp_serde_decode(b),
        other => panic!("not data: {other:?}"),
    }
}

fn rmp_serde_decode(b: &[u8]) -> Value {
    let body = b.strip_prefix(b"M:").expect("M: prefix");
    rmp_serde::from_slice(body).expect("valid MsgPack")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_token_gets_ready_hello_and_pong() {
    let server = wse_server();
    let url = server.url("/wse?compression=false&protocol_version=1");
    let mut ws = connect_with(
        &url,
        &[(
            "cookie",
            format!("theme=dark; access_token={}", token(3600, SECRET)),
        )],
    )
    .await;

    let ready = json_of(&next_data(&mut ws).await);
    assert_eq!(ready["t"], "server_ready");
    assert_eq!(ready["c"], "WSE");
    assert_eq!(ready["seq"], 1);
    assert_eq!(ready["p"]["details"]["user_id"], "user-7");

    send_all(
        &mut ws,
        [Message::Text(
            json!({"t":"client_hello","p":{"client_version":"t","protocol_version":1}})
                .to_string()
                .into(),
        )],
    )
    .await;
    let hello = json_of(&next_data(&mut ws).await);
    assert_eq!(hello["t"], "server_hello");
    assert_eq!(hello["seq"], 2);

    let ts = wsload_proto::envelope::now_millis();
    send_all(
        &mut ws,
        [Message::Text(
            json!({"t":"ping","p":{"client_timestamp": ts}})
                .to_string()
                .into(),
        )],
    )
    .await;
    let pong = json_of(&next_data(&mut ws).await);
    assert_eq!(pong["t"], "PONG");
    assert_eq!(pong["p"]["client_timestamp"], ts);
    assert!(pong["p"]["server_timestamp"].as_u64().expect("server ts") >= ts);

    // Plain traffic is counted, not answered.
    for i in 0..100 {
        send_all(
            &mut ws,
            [Message::Text(
                json!({"t":"trade","p":{"i":i,"sym":"BTC"}})
                    .to_string()
                    .into(),
            )],
        )
        .await;
    }
    let received = r#"wsload_server_messages_received_total{profile="wse",format="text"}"#;
    assert_eq!(server.wait_metric(received, 102.0), 102.0);
    assert_eq!(
        server.metric(r#"wsload_server_messages_sent_total{profile="wse",format="text"}"#),
        3.0
    );
    assert_eq!(
        server.metric(r#"wsload_server_malformed_frames_total{profile="wse",format="text"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_and_msgpack_and_zlib_frames() {
    let server = wse_server();
    let url = server.url("/wse?format=msgpack");
    let mut ws = connect_with(
        &url,
        &[("authorization", format!("Bearer {}", token(3600, SECRET)))],
    )
    .await;
    let ready = next_data(&mut ws).await;
    assert!(ready.is_binary(), "format=msgpack answers in MsgPack");
    assert_eq!(json_of(&ready)["t"], "server_ready");

    let ping = json!({"t":"ping","p":{"client_timestamp": 42}});
    let mp = frame::encode_msgpack(&ping).expect("msgpack");
    send_all(&mut ws, [Message::Binary(mp.into())]).await;
    let pong = json_of(&next_data(&mut ws).await);
    assert_eq!(
        (pong["t"].clone(), pong["p"]["client_timestamp"].clone()),
        (json!("PONG"), json!(42))
    );

    let z = frame::encode_zlib(ping.to_string().as_bytes(), 6);
    send_all(&mut ws, [Message::Binary(z.into())]).await;
    let pong = json_of(&next_data(&mut ws).await);
    assert_eq!(pong["t"], "PONG");

    assert_eq!(
        server.metric(r#"wsload_server_messages_received_total{profile="wse",format="msgpack"}"#),
        1.0
    );
    assert_eq!(
        server.metric(r#"wsload_server_messages_received_total{profile="wse",format="zlib"}"#),
        1.0
    );
    assert_eq!(
        server.metric(r#"wsload_server_messages_sent_total{profile="wse",format="msgpack"}"#),
        3.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_are_counted_not_dropped_silently() {
    let server = wse_server();
    let mut ws = connect_with(
        &server.url("/wse"),
        &[("cookie", format!("access_token={}", token(3600, SECRET)))],
    )
    .await;
    next_data(&mut ws).await;
    send_all(
        &mut ws,
        [
            Message::Text("{not json".into()),
            Message::Binary(b"M:\xc1\xc1".to_vec().into()),
            Message::Binary(b"C:definitely not zlib".to_vec().into()),
            Message::Binary(b"\x00\x01 no prefix".to_vec().into()),
            Message::Binary(b"E:ciphertext".to_vec().into()),
        ],
    )
    .await;
    // The connection survives malformed frames: a ping still gets its PONG.
    send_all(
        &mut ws,
        [Message::Text(
            r#"{"t":"ping","p":{"client_timestamp":1}}"#.into(),
        )],
    )
    .await;
    assert_eq!(json_of(&next_data(&mut ws).await)["t"], "PONG");
    for (format, want) in [
        ("text", 1.0),
        ("msgpack", 1.0),
        ("zlib", 1.0),
        ("binary", 1.0),
        ("encrypted", 0.0),
    ] {
        let series =
            format!(r#"wsload_server_malformed_frames_total{{profile="wse",format="{format}"}}"#);
        assert_eq!(server.metric(&series), want, "{series}");
    }
    assert_eq!(
        server.metric(r#"wsload_server_messages_received_total{profile="wse",format="encrypted"}"#),
        1.0
    );
}

async fn refused(server: &Server, headers: &[(&str, String)]) -> (Value, Option<CloseCode>) {
    let mut ws = connect_with(&server.url("/wse"), headers).await;
    let err = json_of(&next_data(&mut ws).await);
    (err, close_code(&mut ws, Duration::from_secs(5)).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_get_an_error_and_close_4401() {
    let server = wse_server();
    type Headers = Vec<(&'static str, String)>;
    let cases: Vec<(&str, Headers, &str)> = vec![
        ("missing", vec![], "AUTH_REQUIRED"),
        (
            "expired",
            vec![("cookie", format!("access_token={}", token(-3600, SECRET)))],
            "AUTH_FAILED",
        ),
        (
            "bad_signature",
            vec![(
                "cookie",
                format!("access_token={}", token(3600, "wrong-secret")),
            )],
            "AUTH_FAILED",
        ),
        (
            "malformed",
            vec![("authorization", "Bearer not.a.jwt".to_string())],
            "AUTH_FAILED",
        ),
    ];
    for (reason, headers, code) in &cases {
        let (err, close) = refused(&server, headers).await;
        assert_eq!(err["t"], "error", "{reason}");
        assert_eq!(err["p"]["code"], *code, "{reason}");
        assert_eq!(close, Some(CloseCode::from(4401)), "{reason}");
        let series = format!(r#"wsload_server_auth_failures_total{{reason="{reason}"}}"#);
        assert_eq!(server.metric(&series), 1.0, "{series}");
    }
    // Wrong audience is a claims failure.
    let mut claims = wsload_proto::jwt::standard_claims("u", "wse-bench", "someone-else", 3600);
    claims.insert("x".into(), 1.into());
    let t = wsload_proto::jwt::sign(&claims, SECRET.as_bytes());
    let (err, close) = refused(&server, &[("cookie", format!("access_token={t}"))]).await;
    assert_eq!(
        (err["p"]["code"].clone(), close),
        (json!("AUTH_FAILED"), Some(CloseCode::from(4401)))
    );
    assert_eq!(
        server.metric(r#"wsload_server_auth_failures_total{reason="claims"}"#),
        1.0
    );
    let closed = r#"wsload_server_connections_closed_total{profile="wse",reason="auth_failed"}"#;
    assert_eq!(server.wait_metric(closed, 5.0), 5.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wse_route_beside_echo_and_anonymous_mode() {
    let server = Server::start(&[
        "--profile",
        "echo",
        "--route",
        "/wse=wse",
        "--wse-allow-anonymous",
    ]);
    let mut ws = connect(&server.url("/wse")).await;
    let ready = json_of(&next_data(&mut ws).await);
    assert_eq!(ready["p"]["details"]["user_id"], "anonymous");
    let mut echo = connect(&server.url("/")).await;
    send_all(&mut echo, [Message::Text("x".into())]).await;
    assert_eq!(next_data(&mut echo).await, Message::Text("x".into()));
}
