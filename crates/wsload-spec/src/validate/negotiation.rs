//! The upgrade's negotiation in a spec: subprotocols and compression.

use super::Errors;
use crate::spec::LoadTestSpec;

/// What the upgrade offers beyond the upgrade itself: subprotocols (RFC 6455 4.1: tokens,
/// each once) and compression (RFC 7692 window sizes), each from its own field, not also from
/// `auth.headers`: the client must know what it offered to check what the server agreed to.
pub(super) fn check(spec: &LoadTestSpec, e: &mut Errors) {
    let header = |name: &str| {
        spec.auth
            .iter()
            .flat_map(|a| a.headers.keys())
            .find(|k| k.eq_ignore_ascii_case(name))
    };
    if let Some(h) = header("sec-websocket-protocol")
        && !spec.subprotocols.is_empty()
    {
        e.add(
            format!("auth.headers.{h}"),
            "offers subprotocols beside spec.subprotocols: list them in subprotocols only",
        );
    }
    if let Some(h) = header("sec-websocket-extensions") {
        e.add(
            format!("auth.headers.{h}"),
            "the client cannot speak an extension it did not negotiate itself: for \
             permessage-deflate set spec.compression instead",
        );
    }
    for (i, p) in spec.subprotocols.iter().enumerate() {
        let field = format!("subprotocols[{i}]");
        if p.is_empty() || !p.bytes().all(is_token_char) {
            e.add(
                field,
                format!(
                    "{p:?} is not a token (RFC 6455 4.1: visible ASCII without spaces, commas or \
                     ()<>@;:\\\"/[]?={{}}), e.g. graphql-transport-ws or v12.stomp"
                ),
            );
        } else if spec.subprotocols[..i].contains(p) {
            e.add(field, format!("{p:?} is listed twice"));
        }
    }
    if spec.subprotocols.len() > 16 {
        e.add("subprotocols", "at most 16");
    }
    let Some(c) = &spec.compression else { return };
    for (field, bits, min) in [
        ("serverMaxWindowBits", c.server_max_window_bits, 8),
        // zlib, which compresses, has no 256-byte window (RFC 7692 allows 8).
        ("clientMaxWindowBits", c.client_max_window_bits, 9),
    ] {
        if let Some(b) = bits
            && !(min..=15).contains(&b)
        {
            e.add(
                format!("compression.{field}"),
                format!("{b}: must be {min}-15 (a window of 2^N bytes)"),
            );
        }
    }
}

/// A `token` character (RFC 2616 2.2): visible ASCII, no separator.
fn is_token_char(b: u8) -> bool {
    b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b)
}

#[cfg(test)]
mod tests {
    use crate::LoadTest;

    fn errors(spec: &str) -> Vec<String> {
        let yaml = format!(
            "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata: {{name: n}}\nspec:\n  target: {{url: 'ws://127.0.0.1:9/'}}\n  scenario: throughput\n{spec}"
        );
        match LoadTest::from_yaml(&yaml, "t.yaml") {
            Ok(_) => Vec::new(),
            Err(e) => e.to_string().lines().map(str::to_string).collect(),
        }
    }

    fn has(errors: &[String], want: &str) -> bool {
        errors.iter().any(|e| e.contains(want))
    }

    #[test]
    fn subprotocols_are_tokens_listed_once() {
        assert_eq!(
            errors("  subprotocols: [graphql-transport-ws, v12.stomp, 'mqtt']\n"),
            Vec::<String>::new()
        );
        let e = errors("  subprotocols: ['graphql ws', 'a,b', v12.stomp, v12.stomp]\n");
        for want in [
            "spec.subprotocols[0]: \"graphql ws\" is not a token (RFC 6455 4.1",
            "spec.subprotocols[1]: \"a,b\" is not a token",
            "spec.subprotocols[3]: \"v12.stomp\" is listed twice",
        ] {
            assert!(has(&e, want), "missing {want:?} in {e:#?}");
        }
        assert!(!has(&e, "subprotocols[2]"), "{e:#?}");
    }

    #[test]
    fn a_subprotocol_or_extension_header_in_auth_headers_is_refused_beside_its_field() {
        // Alone, as before: the header is sent as written.
        assert_eq!(
            errors("  auth: {headers: {Sec-WebSocket-Protocol: chat}}\n"),
            Vec::<String>::new()
        );
        let e =
            errors("  auth: {headers: {Sec-WebSocket-Protocol: chat}}\n  subprotocols: [chat]\n");
        assert!(
            has(
                &e,
                "spec.auth.headers.Sec-WebSocket-Protocol: offers subprotocols beside spec.subprotocols"
            ),
            "{e:#?}"
        );
        let e = errors("  auth: {headers: {sec-websocket-extensions: permessage-deflate}}\n");
        assert!(
            has(
                &e,
                "spec.auth.headers.sec-websocket-extensions: the client cannot speak an extension it did not negotiate itself: for permessage-deflate set spec.compression instead"
            ),
            "{e:#?}"
        );
    }

    #[test]
    fn window_bits_are_in_range() {
        assert_eq!(
            errors(
                "  compression: {serverMaxWindowBits: 8, clientMaxWindowBits: 9, required: true}\n"
            ),
            Vec::<String>::new()
        );
        let e = errors("  compression: {clientMaxWindowBits: 8}\n");
        assert!(
            has(&e, "spec.compression.clientMaxWindowBits: 8: must be 9-15"),
            "{e:#?}"
        );
        let e = errors("  compression: {serverMaxWindowBits: 16}\n");
        assert!(
            has(&e, "spec.compression.serverMaxWindowBits: 16: must be 8-15"),
            "{e:#?}"
        );
    }
}
