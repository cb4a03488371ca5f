use crate::LoadTest;

/// A spec's YAML with `conversation` (its lines indented under `  conversation:`).
fn spec(protocol: &str, conversation: &str) -> String {
    format!(
        "  target: {{url: 'ws://127.0.0.1:3000/socket.io/?EIO=4&transport=websocket'}}\n  protocol: {protocol}\n  scenario: pingpong\n  conversation:\n{conversation}"
    )
}

fn errors(conversation: &str) -> Vec<String> {
    errors_of(&spec("echo", conversation))
}

fn errors_of(yaml: &str) -> Vec<String> {
    match LoadTest::from_spec_yaml(yaml, "t.yaml") {
        Ok(_) => Vec::new(),
        Err(crate::Error::Invalid { errors, .. }) => {
            errors.into_iter().map(|e| e.to_string()).collect()
        }
        Err(other) => panic!("not a validation error: {other}"),
    }
}

/// Exactly one error, and it is this one.
fn only(conversation: &str) -> String {
    let e = errors(conversation);
    assert_eq!(e.len(), 1, "{e:#?}");
    e.into_iter().next().unwrap_or_default()
}

const SOCKET_IO: &str = r#"    open:
      - {name: handshake, expect: {prefix: '0'}, capture: {sid: {json: sid}}}
      - {name: connect, send: {text: '40'}}
      - {name: connected, expect: {prefix: '40'}, timeout: 3s}
      - {name: join, send: {text: '42["join","room-${conn}","${sid}"]'}}
    replies:
      - {when: {equals: '2'}, send: {text: '3'}}
    message:
      text: '42${seq}["echo",{"t":${sendTime},"by":"${sid}","p":"${pad}"}]'
      answer: {match: {prefix: '43'}, id: {regex: '^43(\d+)'}}
    push: {prefix: '42', json: {field: '0', equals: tick}}
"#;

#[test]
fn a_socket_io_conversation_is_accepted() {
    assert_eq!(errors(SOCKET_IO), Vec::<String>::new());
    let jsonrpc = r#"    heartbeat: {every: 25s, send: {text: '{"jsonrpc":"2.0","method":"ping","id":"hb-${conn}"}'}}
    message:
      text: '{"jsonrpc":"2.0","id":${seq},"method":"echo","params":["${uuid}"]}'
      answer: {match: {json: {field: jsonrpc, equals: '2.0'}}, id: {json: id}}
"#;
    assert_eq!(errors(jsonrpc), Vec::<String>::new());
    // A string id reads back too (graphql-ws).
    let gql = r#"    message:
      text: '{"id":"${seq}","type":"subscribe","payload":{"query":"{ hello }"}}'
      answer: {match: {json: {field: type, equals: next}}, id: {json: id}}
"#;
    assert_eq!(errors(gql), Vec::<String>::new());
}

#[test]
fn an_unknown_placeholder_is_named_with_what_is_known() {
    let e = only("    message: {text: '{\"id\":${sequence}}'}\n");
    assert!(
        e.starts_with("spec.conversation.message.text: unknown placeholder ${sequence}; known here: ${conn}, ${seq},"),
        "{e}"
    );
    // A variable is known only in steps after the one that captures it.
    let e = only(
        "    open:\n      - {name: hello, send: {text: 'hi ${sid}'}}\n      - {name: welcome, expect: {prefix: '0'}, capture: {sid: {json: sid}}}\n",
    );
    assert!(
        e.starts_with("spec.conversation.open[0].send.text: unknown placeholder ${sid}"),
        "{e}"
    );
    let e = only(
        "    open:\n      - {name: w, expect: {prefix: '0'}, capture: {sid: {json: sid}}}\n    heartbeat: {every: 5s, send: {text: '${sid}'}}\n",
    );
    assert_eq!(
        e,
        "spec.conversation.heartbeat.send.text: ${sid} is captured on open, but the heartbeat is the same template for every connection; use built-in placeholders only (or send it from a step)"
    );
    let e = only("    heartbeat: {every: 5s, send: {text: '${hex:0}'}}\n");
    assert!(
        e.starts_with("spec.conversation.heartbeat.send.text: ${hex:0}: hex takes"),
        "{e}"
    );
}

#[test]
fn a_bad_regex_is_refused_with_the_regex_crates_reason() {
    let e = only("    open:\n      - {name: ack, expect: {regex: 'a(b'}}\n");
    assert_eq!(
        e,
        "spec.conversation.open[0].expect.regex: \"a(b\" does not compile: unclosed group; see https://docs.rs/regex/#syntax"
    );
    let e = only("    push: {regex: '[z-a]'}\n");
    assert!(e.starts_with("spec.conversation.push.regex: \"[z-a]\" does not compile: invalid character class range"), "{e}");
    let e = only(
        "    open:\n      - {name: ack, expect: {prefix: '0'}, capture: {sid: {regex: 'sid=\\w+'}}}\n",
    );
    assert!(
        e.starts_with("spec.conversation.open[0].capture.sid.regex: \"sid=\\\\w+\" has no group"),
        "{e}"
    );
}

#[test]
fn a_step_sends_or_expects_and_only_an_expect_captures() {
    let e = only("    open:\n      - {name: both, send: {text: a}, expect: {equals: b}}\n");
    assert_eq!(
        e,
        "spec.conversation.open[0]: set send or expect, not both; make them two steps (send, then expect)"
    );
    let e = only("    open:\n      - {name: neither}\n");
    assert_eq!(
        e,
        "spec.conversation.open[0]: set send (a message to send) or expect (a message to wait for)"
    );
    let e = only("    open:\n      - {name: hello, send: {text: a}, capture: {x: {json: x}}}\n");
    assert!(
        e.starts_with("spec.conversation.open[0].capture: captures read the expected message"),
        "{e}"
    );
    let e = only("    open:\n      - {name: w, expect: {equals: a}, capture: {x: {}}}\n");
    assert!(
        e.starts_with("spec.conversation.open[0].capture.x: set exactly one of json"),
        "{e}"
    );
    let e = only("    open:\n      - {name: w, expect: {equals: a}, capture: {seq: {json: id}}}\n");
    assert!(
        e.contains("capture.seq: \"seq\" is a built-in placeholder"),
        "{e}"
    );
    let e =
        only("    open:\n      - {name: w, send: {text: a}}\n      - {name: w, send: {text: b}}\n");
    assert!(
        e.starts_with("spec.conversation.open[1].name: \"w\" is open[0]'s name too"),
        "{e}"
    );
    let e = only("    open:\n      - {name: w, send: {binary: a, text: b}}\n");
    assert_eq!(
        e,
        "spec.conversation.open[0].send: set exactly one of text (sent as a text frame), binary (a binary frame) or bytes (a binary frame written in hex, e.g. 'c0 00')"
    );
    let e = only("    open:\n      - {name: w, expect: {json: {field: '', equals: x}}}\n");
    assert!(
        e.starts_with("spec.conversation.open[0].expect.json.field: is empty"),
        "{e}"
    );
}

#[test]
fn an_answer_id_needs_the_seq_where_it_reads() {
    let e = only("    message:\n      text: '{\"n\":1}'\n      answer: {id: {json: id}}\n");
    assert!(
        e.starts_with("spec.conversation.message.answer.id: message.text carries no ${seq} for its answer to carry back"),
        "{e}"
    );
    let e = only(
        "    message:\n      text: '{\"id\":${seq},\"n\":${conn}}'\n      answer: {id: {json: n}}\n",
    );
    assert_eq!(
        e,
        r#"spec.conversation.message.answer.id: a correlation field the template does not carry: read from the message as sent with ${seq} = 12345 ("{\"id\":12345,\"n\":0}"), it gives "0", not 12345; point answer.id at where message.text carries ${seq}"#
    );
    let e = only("    message:\n      text: '{\"req\":${seq}}'\n      answer: {id: {json: id}}\n");
    assert!(e.contains("it gives nothing, not 12345"), "{e}");
    // A regular expression reads an answer of another shape than the message (Socket.IO's
    // ack is 43<id> for the emit 42<id>): only the ${seq} is required of the message.
    assert_eq!(
        errors(
            "    message:\n      text: '42${seq}[\"echo\"]'\n      answer: {id: {regex: '^43(\\d+)'}}\n",
        ),
        Vec::<String>::new()
    );
    let e = only(
        "    message:\n      text: '42[\"echo\"]'\n      answer: {id: {regex: '^43(\\d+)'}}\n",
    );
    assert!(e.contains("carries no ${seq}"), "{e}");
}

/// wsload answers only what the server sends, never its own messages: an answer equal to
/// (or matching) what it answers is a heartbeat of that shape, not a loop (a server whose
/// ping is `{}` and wants `{}` back). A server that echoes every reply is caught at run time.
/// Before, each of these was refused as a "reply loop".
#[test]
fn a_reply_that_matches_what_it_answers_is_accepted() {
    for replies in [
        "      - {when: {equals: '{}'}, send: {text: '{}'}}\n",
        "      - {when: {prefix: '2'}, send: {text: '2probe'}}\n",
        "      - {when: {equals: ping}, send: {text: pong}}\n      - {when: {regex: 'on'}, send: {text: ok}}\n",
        "      - {when: {equals: \"\\n\"}, send: {text: \"\\n\"}}\n",
    ] {
        assert_eq!(
            errors(&format!("    replies:\n{replies}")),
            Vec::<String>::new(),
            "{replies}"
        );
    }
    let e = only(
        "    open:\n      - {name: w, expect: {prefix: '0'}, capture: {sid: {json: sid}}}\n    replies:\n      - {when: {equals: '2'}, send: {text: '3${sid}'}}\n",
    );
    assert!(
        e.starts_with("spec.conversation.replies[0].send.text: ${sid} is captured on open, but replies answer from the upgrade on"),
        "{e}"
    );
    let e = only("    replies:\n      - {when: {regex: '[z-a]'}, send: {text: '3'}}\n");
    assert!(
        e.starts_with("spec.conversation.replies[0].when.regex: \"[z-a]\" does not compile"),
        "{e}"
    );
}

/// Several kinds of push, each counted by its name (graphql-ws' `next` and `complete`).
#[test]
fn push_rules_are_named_once_each_and_not_beside_push() {
    let gql = "    pushes:\n      - {name: next, match: {json: {field: type, equals: next}}}\n      - {name: complete, match: {json: {field: type, equals: complete}}}\n";
    assert_eq!(errors(gql), Vec::<String>::new());
    let e = only(
        "    pushes:\n      - {name: next, match: {prefix: a}}\n      - {name: next, match: {prefix: b}}\n",
    );
    assert_eq!(
        e,
        "spec.conversation.pushes[1].name: \"next\" is pushes[0]'s name too; give each rule its own, as pushes are counted by name"
    );
    let e = only(&format!("    push: {{prefix: a}}\n{gql}"));
    assert_eq!(
        e,
        format!(
            "spec.conversation.push: {}",
            crate::cel::MSG_PUSH_AND_PUSHES
        )
    );
    let e = only("    pushes:\n      - {name: '', match: {prefix: a}}\n");
    assert_eq!(
        e,
        "spec.conversation.pushes[0].name: must be 1 to 64 characters: the pushes are counted under it"
    );
    let e = only("    pushes:\n      - {name: tick, match: {regex: '[z-a]'}}\n");
    assert!(
        e.starts_with("spec.conversation.pushes[0].match.regex: \"[z-a]\" does not compile"),
        "{e}"
    );
    let many: String = (0..9)
        .map(|i| format!("      - {{name: p{i}, match: {{prefix: '{i}'}}}}\n"))
        .collect();
    let e = only(&format!("    pushes:\n{many}"));
    assert_eq!(e, "spec.conversation.pushes: 9 rules; at most 8");
}

#[test]
fn wse_has_its_own_conversation_and_a_heartbeat_needs_a_period() {
    let e = errors_of(&spec(
        "wse",
        "    replies:\n      - {when: {equals: '2'}, send: {text: '3'}}\n",
    ));
    assert_eq!(
        e,
        [
            "spec.protocol: the wse protocol has a conversation of its own (token, server_ready, client_hello); remove conversation, or set protocol: echo to speak the server's protocol"
        ]
    );
    let e = only("    heartbeat: {every: 0s, send: {text: '\\n'}}\n");
    assert_eq!(
        e,
        "spec.conversation.heartbeat.every: must be above zero (e.g. 25s)"
    );
    let e = only("    open:\n      - {name: w, expect: {equals: a}, timeout: 0s}\n");
    assert_eq!(
        e,
        "spec.conversation.open[0].timeout: must be above zero (default 5s)"
    );
}

#[test]
fn a_ping_is_checked_as_the_message_is() {
    let e = only("    ping:\n      text: '{\"id\":1}'\n      answer: {id: {json: id}}\n");
    assert!(e.starts_with("spec.conversation.ping.answer.id:"), "{e}");
    assert!(e.contains("ping.text carries no ${seq}"), "{e}");
}

#[test]
fn an_echoed_answer_stands_alone() {
    assert_eq!(
        errors("    message:\n      text: 'm ${seq}'\n      answer: {echoed: true}\n"),
        Vec::<String>::new()
    );
    let e = only(
        "    message:\n      text: 'm ${seq}'\n      answer: {echoed: true, match: {prefix: m}}\n",
    );
    assert!(
        e.starts_with("spec.conversation.message.answer.echoed:"),
        "{e}"
    );
    assert!(e.contains("remove match and id, or echoed"), "{e}");
}

#[test]
fn the_msgpack_and_zlib_formats_need_a_json_template() {
    let yaml = |format: &str, text: &str| {
        format!(
            "  target: {{url: 'ws://127.0.0.1:1/'}}\n  scenario: formatComparison\n  formats: [json, {format}]\n  conversation:\n    message: {{text: '{text}'}}\n"
        )
    };
    assert_eq!(
        errors_of(&yaml("msgpack", r#"{"id":${seq},"d":"${pad}"}"#)),
        Vec::<String>::new()
    );
    let e = errors_of(&yaml("zlib", "42[${seq}"));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(e[0].starts_with("spec.conversation.message.text:"), "{e:?}");
    assert!(
        e[0].contains("the zlib format sends the JSON a template renders to"),
        "{e:?}"
    );
}

/// An answer matched by the start of its JSON (`{"jsonrpc"`) has its id read from its first
/// byte, as the load generator reads it: the correlation check finds the `${seq}` the message
/// carries. Before, it read after the prefix (`:"2.0","id":12345,...`, no JSON) and refused a
/// conversation that works.
#[test]
fn a_prefix_that_opens_the_json_is_read_with_it() {
    assert_eq!(
        errors(
            "    message:\n      text: '{\"jsonrpc\":\"2.0\",\"id\":${seq},\"method\":\"sum\"}'\n      answer: {match: {prefix: '{\"jsonrpc\"'}, id: {json: id}}\n",
        ),
        Vec::<String>::new()
    );
    // A header before the JSON is still read after: Socket.IO's `42` before its array.
    assert_eq!(
        errors(
            "    message:\n      text: '42[\"chat\",{\"id\":${seq}}]'\n      answer: {match: {prefix: '42'}, id: {json: 1.id}}\n",
        ),
        Vec::<String>::new()
    );
}

/// MQTT 3.1.1 in binary frames: CONNECT and its CONNACK, a PUBLISH QoS 1 answered by the
/// PUBACK that carries its packet id, PINGREQ as the heartbeat, PINGRESP as a push.
const MQTT: &str = r#"    open:
      - {name: connect, send: {bytes: '10 ${len:varint} 00 04 "MQTT" 04 02 00 3c (${len:u16} "wsload${conn}")'}}
      - {name: connack, expect: {bytes: '20 02 00 00'}}
    heartbeat: {every: 5s, send: {bytes: 'c0 00'}}
    message:
      bytes: '32 ${len:varint} (${len:u16} "wsload/${conn}") ${seq:u16} "{\"seq\":${seq},\"p\":\"${pad}\"}"'
      answer: {match: {bytes: '40 02'}, id: {at: 2, width: 2}}
    push: {bytes: 'd0 00'}
"#;

#[test]
fn an_mqtt_conversation_is_accepted_and_its_binary_fields_checked() {
    assert_eq!(errors(MQTT), Vec::<String>::new());
    let e = only("    message: {bytes: '32 0'}\n");
    assert_eq!(
        e,
        "spec.conversation.message.bytes: the hex digits ending at byte 3 are odd in number; write each byte as two digits (0a, not a)"
    );
    let e = only("    message: {bytes: '32 ${seq}'}\n");
    assert!(
        e.starts_with(
            "spec.conversation.message.bytes: ${seq} outside quotes needs a width: ${seq:u16}"
        ),
        "{e}"
    );
    let e = only("    push: {bytes: 'd0 zz'}\n");
    assert!(
        e.starts_with("spec.conversation.push.bytes: 'z' at byte 3 is not a hex byte"),
        "{e}"
    );
    let e = only("    message: {bytes: '32 ${seq:u16}', answer: {id: {at: 2}}}\n");
    assert_eq!(
        e,
        format!(
            "spec.conversation.message.answer.id.width: {}",
            crate::cel::MSG_AT_WIDTH
        )
    );
    let e = only("    message: {bytes: '32 00 01', answer: {id: {at: 1, width: 2}}}\n");
    assert!(
        e.starts_with("spec.conversation.message.answer.id: message.bytes carries no ${seq}"),
        "{e}"
    );
    let e = only(
        "    open:\n      - {name: w, expect: {prefix: x}, capture: {v: {at: 0, width: 2, regex: '(a)'}}}\n",
    );
    assert!(
        e.starts_with("spec.conversation.open[0].capture.v: set exactly one of json"),
        "{e}"
    );
    // A u8 length cannot hold message.size's pad.
    let yaml = "  target: {url: 'ws://127.0.0.1:1/'}\n  scenario: pingpong\n  message: {size: 1000}\n  conversation:\n    message: {bytes: '30 ${len:u8} \"${pad}\"'}\n";
    let e = errors_of(yaml);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].starts_with(
            "spec.conversation.message.bytes: a length of 998 bytes, above the 255 its field holds"
        ),
        "{e:?}"
    );
    // Bytes are sent as written: no MsgPack or zlib of them.
    let yaml = "  target: {url: 'ws://127.0.0.1:1/'}\n  scenario: formatComparison\n  formats: [json, msgpack]\n  conversation:\n    message: {bytes: '30 00'}\n";
    let e = errors_of(yaml);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].starts_with("spec.conversation.message.bytes: the msgpack format sends the JSON"),
        "{e:?}"
    );
}

/// A fanout's Socket.IO subscribers, with `extra` after the scenario and `resume` as given.
fn resuming(extra: &str, delivery: &str, resume: &str) -> Vec<String> {
    errors_of(&resuming_yaml(extra, delivery, resume))
}

fn resuming_yaml(extra: &str, delivery: &str, resume: &str) -> String {
    format!(
        r#"  target: {{url: 'ws://127.0.0.1:3000/socket.io/?EIO=4&transport=websocket'}}
  scenario: fanout
{extra}  conversation:
    open:
      - {{name: connected, expect: {{prefix: '40'}}, capture: {{pid: {{json: pid}}}}}}
    subscribe:
      - {{name: join, send: {{text: '42["join","${{topic}}"]'}}}}
    message:
      text: '42["publish",{{"room":"${{topic}}","seq":${{seq}},"ts":${{sendTime}}}}]'
    delivery:
      match: {{prefix: '42'}}
      sequence: {{json: '1.seq'}}
{delivery}{resume}"#
    )
}

const RESUME: &str = r#"    resume:
      - {name: resume, send: {text: '40{"pid":"${pid}","offset":"${resumeFrom}"}'}}
      - {name: resumed, expect: {prefix: '40'}, capture: {pid: {json: pid}}}
"#;
const RESUME_FROM: &str = "      resumeFrom: {json: '2'}\n";
const RECONNECT: &str = "  reconnect: {policy: fixed, delay: 500ms}\n";

#[test]
fn a_resume_knows_open_s_captures_and_the_position_and_may_capture_them_anew() {
    assert_eq!(
        resuming(RECONNECT, RESUME_FROM, RESUME),
        Vec::<String>::new()
    );
    // Without delivery.resumeFrom, ${resumeFrom} is no variable.
    let e = resuming(RECONNECT, "", RESUME);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].contains("conversation.resume[0].send.text") && e[0].contains("resumeFrom"),
        "{e:#?}"
    );
}

#[test]
fn a_resume_needs_a_reconnect_policy_and_a_position_needs_a_resume() {
    let e = resuming("", RESUME_FROM, RESUME);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].contains("conversation.resume") && e[0].contains("set reconnect.policy"),
        "{e:#?}"
    );
    // A capture on open of that name would be the position's.
    let e = errors_of(&resuming_yaml(RECONNECT, RESUME_FROM, RESUME).replacen(
        "capture: {pid: {json: pid}}",
        "capture: {resumeFrom: {json: pid}}",
        1,
    ));
    assert!(
        e.iter()
            .any(|e| e.contains("conversation.delivery.resumeFrom")
                && e.contains("name that capture otherwise")),
        "{e:#?}"
    );
    let e = resuming(RECONNECT, RESUME_FROM, "");
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(
        e[0].contains("conversation.delivery.resumeFrom")
            && e[0].contains("add conversation.resume"),
        "{e:#?}"
    );
}

#[test]
fn a_resume_outside_a_fanout_is_refused() {
    let e = errors(&format!(
        "{SOCKET_IO}    resume:\n      - {{name: resume, send: {{text: '40'}}}}\n"
    ));
    assert!(
        e.iter()
            .any(|e| e.contains("conversation.resume") && e.contains("fanout scenario only")),
        "{e:#?}"
    );
}
