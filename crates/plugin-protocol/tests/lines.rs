//! The line parser and both classifications, and the line builders, on exact lines.

use envrt_plugin_protocol::line::dropped_request_id;
use envrt_plugin_protocol::{
    ErrorObject, HostMessage, Incoming, Invocation, InvocationScope, LineError, RequestId, codes, decode_strict_base64,
    encode_base64, error_response_line, notification_line, notifications, request_line, response_line,
};
use serde_json::{Value, json};

#[test]
fn a_host_classifies_like_the_sdk() {
    let r = Incoming::parse(br#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#).unwrap();
    assert_eq!(
        r,
        Incoming::Response {
            id: Some(RequestId::Number(3)),
            outcome: Ok(json!({"a":1}))
        }
    );
    let r = Incoming::parse(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#).unwrap();
    assert!(matches!(
        r,
        Incoming::Response {
            id: None,
            outcome: Err(ErrorObject { code: -32700, .. })
        }
    ));
    let r = Incoming::parse(
        br#"{"jsonrpc":"2.0","method":"execute.log","params":{"stream":"stdout","chunk":"a"},"paperclipInvocationId":"inv-7"}"#,
    )
    .unwrap();
    assert!(matches!(r, Incoming::Notification { ref invocation_id, .. } if invocation_id.as_deref() == Some("inv-7")));
    let r = Incoming::parse(br#"{"jsonrpc":"2.0","id":"w1","method":"config.get","params":{}}"#).unwrap();
    assert!(matches!(
        r,
        Incoming::Request {
            id: RequestId::String(_),
            ..
        }
    ));
    assert!(Incoming::parse(br#"{"jsonrpc":"1.0","id":1,"result":1}"#).is_err());
    assert_eq!(
        Incoming::parse(br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#),
        Err(LineError::NotJsonRpc)
    );
    assert_eq!(
        Incoming::parse(br#"{"jsonrpc":"2.0","id":{"a":1},"result":1}"#),
        Err(LineError::NotJsonRpc)
    );
    assert!(matches!(Incoming::parse(b"not json"), Err(LineError::Json { .. })));
}

#[test]
fn a_worker_classifies_like_the_sdk_with_its_exact_texts() {
    let invalid = |code: i64, message: &str| HostMessage::Invalid(ErrorObject::new(code, message));
    assert_eq!(
        HostMessage::classify("this is not json"),
        invalid(-32700, "Parse error: Invalid JSON: this is not json")
    );
    assert_eq!(
        HostMessage::classify("[1]"),
        invalid(-32700, "Parse error: Invalid JSON-RPC message: expected an object")
    );
    assert_eq!(
        HostMessage::classify(r#"{"jsonrpc":"1.0","id":99,"method":"health","params":{}}"#),
        invalid(
            -32700,
            "Parse error: Invalid or missing jsonrpc version (expected \"2.0\", got \"1.0\")"
        )
    );
    assert_eq!(
        HostMessage::classify(r#"{"id":99,"method":"health"}"#),
        invalid(
            -32700,
            "Parse error: Invalid or missing jsonrpc version (expected \"2.0\", got \"undefined\")"
        )
    );
    assert_eq!(
        HostMessage::classify(r#"{"jsonrpc":"2.0","id":null,"method":"health"}"#),
        HostMessage::Ignored
    );
    assert_eq!(
        HostMessage::classify(r#"{"jsonrpc":"2.0","method":"onEvent"}"#),
        HostMessage::Ignored
    );
    assert_eq!(
        HostMessage::classify(r#"{"jsonrpc":"2.0","method":"envrt.cancel","params":{"id":7}}"#),
        HostMessage::Cancel(RequestId::Number(7))
    );
    assert_eq!(
        HostMessage::classify(r#"{"jsonrpc":"2.0","method":"envrt.cancel","params":{}}"#),
        HostMessage::Ignored
    );
    assert_eq!(
        HostMessage::classify(r#"{"jsonrpc":"2.0","id":3,"result":null}"#),
        HostMessage::Ignored
    );
    assert_eq!(
        HostMessage::classify(
            r#"{"jsonrpc":"2.0","id":"a","method":"health","paperclipInvocation":{"id":"inv-1","scope":{}}}"#
        ),
        HostMessage::Request {
            id: RequestId::String("a".into()),
            method: "health".into(),
            params: Value::Null,
            invocation: Some("inv-1".into())
        }
    );
}

#[test]
fn an_odd_request_id_is_echoed_as_it_came() {
    let HostMessage::Request { id, .. } = HostMessage::classify(r#"{"jsonrpc":"2.0","id":1.5,"method":"health"}"#)
    else {
        panic!("not a request")
    };
    assert!(!id.is_valid());
    assert_eq!(
        String::from_utf8(response_line(&id, Value::Null)).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"result\":null}\n"
    );
}

#[test]
fn worker_side_lines_round_trip_through_the_host_classifier() {
    let line = response_line(&RequestId::Number(4), json!({"status": "ok"}));
    assert_eq!(
        Incoming::parse(line.strip_suffix(b"\n").unwrap()).unwrap(),
        Incoming::Response {
            id: Some(RequestId::Number(4)),
            outcome: Ok(json!({"status": "ok"}))
        }
    );
    let line = error_response_line(
        Some(&RequestId::Number(5)),
        &ErrorObject::new(codes::WORKER_ERROR, "boom"),
    );
    assert!(matches!(
        Incoming::parse(line.strip_suffix(b"\n").unwrap()).unwrap(),
        Incoming::Response { outcome: Err(ErrorObject { code: -32002, ref message, .. }), .. } if message == "boom"
    ));
    assert_eq!(
        String::from_utf8(error_response_line(None, &ErrorObject::new(codes::PARSE_ERROR, "x"))).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"x\"}}\n"
    );
    let line = notification_line(
        notifications::EXECUTE_LOG,
        &json!({"stream": "stdout", "chunk": "a"}),
        Some("inv-1"),
    );
    assert_eq!(
        Incoming::parse(line.strip_suffix(b"\n").unwrap()).unwrap(),
        Incoming::Notification {
            method: "execute.log".into(),
            params: json!({"stream": "stdout", "chunk": "a"}),
            invocation_id: Some("inv-1".into())
        }
    );
}

#[test]
fn request_lines_carry_the_invocation() {
    let line = request_line(
        7,
        "health",
        json!({}),
        Some(Invocation {
            id: "inv-1".into(),
            scope: InvocationScope {
                company_id: Some("co".into()),
            },
            traceparent: None,
        }),
    );
    assert_eq!(
        String::from_utf8(line).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"health\",\"params\":{},\"paperclipInvocation\":{\"id\":\"inv-1\",\"scope\":{\"companyId\":\"co\"}}}\n"
    );
    let traced = Invocation {
        id: "inv-2".into(),
        scope: InvocationScope::default(),
        traceparent: Some(envrt_plugin_protocol::mint_traceparent([0xab; 24])),
    };
    assert_eq!(
        String::from_utf8(request_line(8, "health", json!({}), Some(traced))).unwrap(),
        "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"health\",\"params\":{},\"paperclipInvocation\":{\"id\":\"inv-2\",\"scope\":{},\"traceparent\":\"00-abababababababababababababababab-abababababababab-01\"}}\n"
    );
    // Neither id may be all zeros (W3C trace context).
    assert_eq!(
        envrt_plugin_protocol::mint_traceparent([0; 24]),
        "00-00000000000000000000000000000001-0000000000000001-01"
    );
}

#[test]
fn a_dropped_request_keeps_its_id_when_the_head_names_it() {
    assert_eq!(
        dropped_request_id(br#"{"jsonrpc":"2.0","id":42,"method":"x""#),
        Some(RequestId::Number(42))
    );
    assert_eq!(
        dropped_request_id(br#"{"jsonrpc":"2.0","id":"a-1","method""#),
        Some(RequestId::String("a-1".into()))
    );
    assert_eq!(dropped_request_id(br#"{"id":7,"jsonrpc":"2.0""#), None);
    assert_eq!(dropped_request_id(br#"{"jsonrpc":"2.0","id":{"x":1},"#), None);
}

#[test]
fn base64_is_strict() {
    assert_eq!(decode_strict_base64("aGVsbG8A/wo=").unwrap(), b"hello\0\xff\n");
    for bad in ["", "aGk", "aGk=\n", " aGk=", "aGl=", "a*k=", "===="] {
        assert_eq!(decode_strict_base64(bad), None, "{bad:?}");
    }
    assert_eq!(encode_base64(b"hi"), "aGk=");
}
