//! Malformed input gets the right error and leaves the session usable.

mod common;

use common::{RawClient, start};
use serde_json::{Value, json};
use switchboard_node::protocol::jsonrpc::{INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RESOURCE_NOT_FOUND};
use switchboard_node::server::ServerConfig;
use switchboard_node::transport::http::HttpConfig;

/// What a malformed body must produce: an HTTP status and, for JSON-RPC errors, the code and id.
struct Case {
    name: &'static str,
    body: Vec<u8>,
    status: u16,
    code: Option<i64>,
    id: Value,
}

fn case(name: &'static str, body: impl Into<Vec<u8>>, status: u16, code: Option<i64>, id: Value) -> Case {
    Case { name, body: body.into(), status, code, id }
}

#[tokio::test]
async fn malformed_bodies_get_precise_errors() {
    let srv = start(ServerConfig::default(), HttpConfig { max_body_bytes: 64 * 1024, ..Default::default() }).await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
    let cases = [
        case("invalid JSON", "{\"jsonrpc\": \"2.0\", ", 400, Some(PARSE_ERROR), Value::Null),
        case("not UTF-8 JSON", vec![0xffu8, 0xfe, b'{'], 400, Some(PARSE_ERROR), Value::Null),
        case("empty body", "", 400, Some(PARSE_ERROR), Value::Null),
        case("deep nesting", deep, 400, Some(PARSE_ERROR), Value::Null),
        case("batch array", r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, 400, Some(INVALID_REQUEST), Value::Null),
        case("scalar", "42", 400, Some(INVALID_REQUEST), Value::Null),
        case("wrong jsonrpc", r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#, 400, Some(INVALID_REQUEST), json!(3)),
        case("missing jsonrpc", r#"{"id":3,"method":"ping"}"#, 400, Some(INVALID_REQUEST), json!(3)),
        case("missing method", r#"{"jsonrpc":"2.0","id":4}"#, 400, Some(INVALID_REQUEST), json!(4)),
        case("method not a string", r#"{"jsonrpc":"2.0","id":4,"method":1}"#, 400, Some(INVALID_REQUEST), json!(4)),
        case("float id", r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, 400, Some(INVALID_REQUEST), Value::Null),
        case("object id", r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, 400, Some(INVALID_REQUEST), Value::Null),
        case("null id", r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, 400, Some(INVALID_REQUEST), Value::Null),
        case("params array", r#"{"jsonrpc":"2.0","id":5,"method":"ping","params":[]}"#, 400, Some(INVALID_REQUEST), json!(5)),
        case(
            "result and error",
            r#"{"jsonrpc":"2.0","id":5,"result":{},"error":{"code":1,"message":"x"}}"#,
            400,
            Some(INVALID_REQUEST),
            json!(5),
        ),
        case(
            "huge body",
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(100 * 1024)),
            413,
            None,
            Value::Null,
        ),
        case("unknown method", r#"{"jsonrpc":"2.0","id":6,"method":"no/such"}"#, 200, Some(METHOD_NOT_FOUND), json!(6)),
        case(
            "unknown tool",
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"nope"}}"#,
            200,
            Some(INVALID_PARAMS),
            json!(7),
        ),
        case("tool name missing", r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{}}"#, 200, Some(INVALID_PARAMS), json!(8)),
        case(
            "arguments not an object",
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":[1]}}"#,
            200,
            Some(INVALID_PARAMS),
            json!(9),
        ),
        case(
            "prompt argument missing",
            r#"{"jsonrpc":"2.0","id":10,"method":"prompts/get","params":{"name":"test_prompt_with_arguments","arguments":{"arg1":"a"}}}"#,
            200,
            Some(INVALID_PARAMS),
            json!(10),
        ),
        case(
            "unknown resource",
            r#"{"jsonrpc":"2.0","id":11,"method":"resources/read","params":{"uri":"test://nope"}}"#,
            200,
            Some(RESOURCE_NOT_FOUND),
            json!(11),
        ),
        case(
            "bad cursor",
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/list","params":{"cursor":"%%%"}}"#,
            200,
            Some(INVALID_PARAMS),
            json!(12),
        ),
        case(
            "bad log level",
            r#"{"jsonrpc":"2.0","id":13,"method":"logging/setLevel","params":{"level":"loud"}}"#,
            200,
            Some(INVALID_PARAMS),
            json!(13),
        ),
        case(
            "initialize without clientInfo",
            r#"{"jsonrpc":"2.0","id":14,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
            200,
            Some(INVALID_PARAMS),
            json!(14),
        ),
        case(
            "bad completion ref",
            r#"{"jsonrpc":"2.0","id":15,"method":"completion/complete","params":{"ref":{"type":"ref/tool"},"argument":{"name":"a","value":""}}}"#,
            200,
            Some(INVALID_PARAMS),
            json!(15),
        ),
    ];
    for c in &cases {
        let res = client.post(c.body.clone()).send().await.unwrap();
        assert_eq!(res.status().as_u16(), c.status, "{}: status", c.name);
        if let Some(code) = c.code {
            let body: Value = res.json().await.unwrap_or_else(|e| panic!("{}: body is not JSON: {e}", c.name));
            assert_eq!(body["jsonrpc"], "2.0", "{}", c.name);
            assert_eq!(body["error"]["code"], code, "{}: {body}", c.name);
            assert_eq!(body["id"], c.id, "{}: id", c.name);
            assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}: message", c.name);
        }
        // The session is still usable after every bad message.
        let pong = client.call(1000, "ping", json!({})).await;
        assert_eq!(pong["result"], json!({}), "{}: session usable afterwards", c.name);
    }
}

#[tokio::test]
async fn invalid_tool_arguments_are_a_tool_error_the_model_can_read() {
    let srv = start(ServerConfig::default(), HttpConfig::default()).await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    for args in [json!({}), json!({"text": 5}), json!({"steps": 0})] {
        let tool = if args.get("steps").is_some() { "countdown" } else { "echo" };
        let reply = client.call(1, "tools/call", json!({"name": tool, "arguments": args})).await;
        assert_eq!(reply["result"]["isError"], true, "{tool} {args}: {reply}");
        assert!(reply["result"]["content"][0]["text"].as_str().unwrap().contains("invalid arguments"), "{reply}");
    }
    // JSON Schema 2020-12 features are honoured ($ref into $defs, additionalProperties: false,
    // allOf/anyOf, if/then/else).
    let reply = client.call(2, "tools/call", json!({"name": "json_schema_2020_12_tool", "arguments": {"name": "a", "extra": 1}})).await;
    assert_eq!(reply["result"]["isError"], true);
    let reply = client.call(3, "tools/call", json!({"name": "json_schema_2020_12_tool", "arguments": {"address": {"city": 7}}})).await;
    assert_eq!(reply["result"]["isError"], true);
    let reply = client
        .call(
            4,
            "tools/call",
            json!({"name": "json_schema_2020_12_tool", "arguments": {"name": "a", "address": {"city": "x"}, "email": "a@b"}}),
        )
        .await;
    assert!(reply["result"].get("isError").is_none(), "{reply}");
    // contactMethod "phone" requires a phone (if/then), whatever else is given.
    let reply = client
        .call(5, "tools/call", json!({"name": "json_schema_2020_12_tool", "arguments": {"contactMethod": "phone", "email": "a@b"}}))
        .await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
}
