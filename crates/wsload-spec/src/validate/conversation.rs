//! The conversation's checks: every template parses with the variables known where it is sent,
//! every match and capture compiles, steps and push rules are well formed and named, and the
//! measured message carries what its answer is recognised by. An automatic reply equal to
//! what it answers is no loop (wsload answers the server's messages only): a server that
//! keeps sending the trigger back is caught at run time, as `reply_loop`.

use super::Errors;
use crate::cel;
use crate::conversation::{
    Capture, Conversation, MAX_LENGTH_AT, MAX_NAME_LEN, MAX_PUSH_RULES, MAX_SPLIT_LEN, MAX_STEPS,
    MAX_TEMPLATE_LEN, Match, MeasuredMessage, Payload, PushRule, RESUME_FROM_VAR, Reply, Split,
    Step,
};
use crate::matching::{Extractor, Matcher};
use crate::spec::{Format, LoadTestSpec, Protocol};
use crate::template::{BUILT_IN, Template, TemplateError, Values, Written};
use std::collections::BTreeMap;

const FIELD: &str = "conversation";
/// The `${seq}` the correlation check renders the measured message with.
const PROBE_SEQ: u64 = 12345;
/// Longest variable name.
const MAX_VAR_LEN: usize = 64;

pub(super) fn conversation(spec: &LoadTestSpec, e: &mut Errors) {
    let Some(c) = &spec.conversation else { return };
    if spec.protocol == Protocol::Wse {
        e.add(
            "protocol",
            "the wse protocol has a conversation of its own (token, server_ready, client_hello); remove conversation, or set protocol: echo to speak the server's protocol",
        );
    }
    counts(c, e);
    if let Some(s) = &c.split {
        split(s, e);
    }
    // A fanout's connections know their topic from the start (a publisher's, a subscriber's
    // first; each in turn in `subscribe`).
    let known = if spec.scenario.profile().motion == crate::scenario::Motion::Fanout {
        vec!["topic".to_string()]
    } else {
        Vec::new()
    };
    let vars = steps("open", &c.open, known, e);
    let vars = steps("subscribe", &c.subscribe, vars, e);
    if let Some(d) = &c.delivery {
        let prefix = d.matches.as_ref().and_then(|m| m.prefix.as_deref());
        if let Some(m) = &d.matches {
            matcher(&format!("{FIELD}.delivery.match"), m, e);
        }
        extractor(
            &format!("{FIELD}.delivery.sequence"),
            &d.sequence,
            prefix,
            e,
        );
        for (name, x) in [
            ("publishedAt", &d.published_at),
            ("topic", &d.topic),
            ("resumeFrom", &d.resume_from),
        ] {
            if let Some(x) = x {
                extractor(&format!("{FIELD}.delivery.{name}"), x, prefix, e);
            }
        }
    }
    resume(spec, c, &vars, e);
    replies(&c.replies, &vars, e);
    if let Some(hb) = &c.heartbeat {
        if hb.every.get().is_zero() {
            e.add(
                format!("{FIELD}.heartbeat.every"),
                "must be above zero (e.g. 25s)",
            );
        }
        built_in_only(
            &format!("{FIELD}.heartbeat.send"),
            &hb.send,
            &vars,
            "the heartbeat is the same template for every connection",
            e,
        );
    }
    let encoded = spec
        .formats
        .iter()
        .chain([&spec.message.format])
        .find(|f| matches!(f, Format::Msgpack | Format::Zlib));
    for (name, m) in [("message", &c.message), ("ping", &c.ping)] {
        let Some(m) = m else { continue };
        message(
            name,
            m,
            spec.message.size as usize,
            &vars,
            c.split.as_ref(),
            e,
        );
        if let Some(format) = encoded {
            json_for(name, m, *format, spec.message.size as usize, &vars, e);
        }
    }
    if let Some(m) = &c.push {
        matcher(&format!("{FIELD}.push"), m, e);
    }
    pushes(c, e);
}

/// Named push rules: each matches, each has its own name (the pushes are counted under it),
/// and `push` (one unnamed rule) is not given beside them.
fn pushes(c: &Conversation, e: &mut Errors) {
    if c.pushes.is_empty() {
        return;
    }
    if c.push.is_some() {
        e.add(format!("{FIELD}.push"), crate::cel::MSG_PUSH_AND_PUSHES);
    }
    if c.pushes.len() > MAX_PUSH_RULES {
        e.add(
            format!("{FIELD}.pushes"),
            format!("{} rules; at most {MAX_PUSH_RULES}", c.pushes.len()),
        );
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, PushRule { name, matches }) in c.pushes.iter().enumerate() {
        let at = format!("{FIELD}.pushes[{i}]");
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            e.add(
                format!("{at}.name"),
                format!("must be 1 to {MAX_NAME_LEN} characters: the pushes are counted under it"),
            );
        } else if let Some(k) = names.insert(name, i) {
            e.add(
                format!("{at}.name"),
                format!(
                    "{name:?} is pushes[{k}]'s name too; give each rule its own, as pushes are counted by name"
                ),
            );
        }
        matcher(&format!("{at}.match"), matches, e);
    }
}

/// The `maxItems` the CRD declares.
fn counts(c: &Conversation, e: &mut Errors) {
    for (field, n) in [
        ("open", c.open.len()),
        ("replies", c.replies.len()),
        ("subscribe", c.subscribe.len()),
        ("resume", c.resume.len()),
    ] {
        if n > MAX_STEPS {
            e.add(
                format!("{FIELD}.{field}"),
                format!("{n} entries; at most {MAX_STEPS}"),
            );
        }
    }
}

/// How a frame splits: one way, its text within bounds.
fn split(s: &Split, e: &mut Errors) {
    let at = format!("{FIELD}.split");
    match (&s.separator, &s.json_array, &s.packets) {
        (Some(sep), None, None) => {
            if sep.is_empty() || sep.len() > MAX_SPLIT_LEN {
                e.add(
                    format!("{at}.separator"),
                    format!("must be 1 to {MAX_SPLIT_LEN} bytes, e.g. \"\\n\""),
                );
            }
        }
        (None, Some(a), None) => {
            if a.prefix.len() > MAX_SPLIT_LEN {
                e.add(
                    format!("{at}.jsonArray.prefix"),
                    format!("at most {MAX_SPLIT_LEN} bytes"),
                );
            }
        }
        (None, None, Some(p)) => {
            if p.at > MAX_LENGTH_AT {
                e.add(
                    format!("{at}.packets.at"),
                    format!("at most {MAX_LENGTH_AT}: the length field's offset in the packet"),
                );
            }
        }
        _ => e.add(at, cel::MSG_SPLIT_KIND),
    }
}

/// `resume`: a fanout subscriber's, back after a drop its policy brings it back from; its
/// templates know what `open` and `subscribe` captured and `${resumeFrom}` (with
/// `delivery.resumeFrom`), and its captures may take those names anew.
fn resume(spec: &LoadTestSpec, c: &Conversation, vars: &[String], e: &mut Errors) {
    let from = c.delivery.as_ref().and_then(|d| d.resume_from.as_ref());
    if c.resume.is_empty() {
        if from.is_some() {
            e.add(
                format!("{FIELD}.delivery.resumeFrom"),
                "no step sends it: add conversation.resume, the steps a subscriber back runs with ${resumeFrom}, or remove it",
            );
        }
        return;
    }
    if spec.scenario.profile().motion != crate::scenario::Motion::Fanout {
        e.add(
            format!("{FIELD}.resume"),
            "a subscriber back resumes where its deliveries stopped, in the fanout scenario only; remove it (a connection back runs open again)",
        );
    }
    if spec.reconnect.policy == crate::reconnect::ReconnectPolicy::None {
        e.add(
            format!("{FIELD}.resume"),
            "no connection comes back without a reconnect policy; set reconnect.policy (e.g. exponential), or remove resume",
        );
    }
    let mut known = vars.to_vec();
    if from.is_some() {
        if known.iter().any(|v| v == RESUME_FROM_VAR) {
            e.add(
                format!("{FIELD}.delivery.resumeFrom"),
                format!("a step on open or subscribe captures {RESUME_FROM_VAR:?} too, the name of the position resume knows; name that capture otherwise"),
            );
        }
        known.push(RESUME_FROM_VAR.to_string());
    }
    // A capture here refreshes a variable of `open`'s (a session id the server gives anew):
    // checked as a new name would be, against the built-in ones only.
    let renewed: Vec<String> = known
        .iter()
        .filter(|v| c.resume.iter().any(|s| s.capture.contains_key(v.as_str())))
        .cloned()
        .collect();
    known.retain(|v| !renewed.contains(v));
    let mut before = known.clone();
    before.extend(renewed);
    let _ = steps_knowing("resume", &c.resume, known, &before, e);
}

/// The steps of `list` (`open`, `subscribe`), in order, knowing `vars` before them; returns
/// those and the variables they capture.
fn steps(list: &str, steps: &[Step], vars: Vec<String>, e: &mut Errors) -> Vec<String> {
    let templates = vars.clone();
    steps_knowing(list, steps, vars, &templates, e)
}

/// As [`steps`]; `vars` are the names a capture may not take, `templates` those the first
/// step's templates know.
fn steps_knowing(
    list: &str,
    steps: &[Step],
    mut vars: Vec<String>,
    templates: &[String],
    e: &mut Errors,
) -> Vec<String> {
    let mut known: Vec<String> = templates.to_vec();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        let at = format!("{FIELD}.{list}[{i}]");
        if step.name.is_empty() || step.name.len() > 64 {
            e.add(
                format!("{at}.name"),
                "must be 1 to 64 characters: a miss is counted under it",
            );
        } else if let Some(k) = names.insert(&step.name, i) {
            e.add(
                format!("{at}.name"),
                format!(
                    "{:?} is {list}[{k}]'s name too; give each step its own, as misses are counted by name",
                    step.name
                ),
            );
        }
        if step.timeout.is_some_and(|t| t.get().is_zero()) {
            e.add(format!("{at}.timeout"), "must be above zero (default 5s)");
        }
        match (&step.send, &step.expect) {
            (Some(_), Some(_)) => e.add(
                &at,
                "set send or expect, not both; make them two steps (send, then expect)",
            ),
            (None, None) => e.add(
                &at,
                "set send (a message to send) or expect (a message to wait for)",
            ),
            (Some(send), None) => {
                payload(&format!("{at}.send"), send, &known, e);
            }
            (None, Some(expect)) => {
                matcher(&format!("{at}.expect"), expect, e);
            }
        }
        if step.capture.is_empty() {
            continue;
        }
        if step.capture.len() > MAX_STEPS {
            e.add(
                format!("{at}.capture"),
                format!("{} captures; at most {MAX_STEPS}", step.capture.len()),
            );
        }
        let Some(expect) = &step.expect else {
            e.add(
                format!("{at}.capture"),
                "captures read the expected message, and this step expects none; move capture to the step whose expect matches the message",
            );
            continue;
        };
        for (name, capture) in &step.capture {
            let field = format!("{at}.capture.{name}");
            if let Some(problem) = var_name(name, &vars) {
                e.add(&field, problem);
            }
            extractor(&field, capture, expect.prefix.as_deref(), e);
        }
        // Only later steps see them: a value is known once its message has been received.
        vars.extend(step.capture.keys().cloned());
        known.extend(
            step.capture
                .keys()
                .filter(|k| !templates.contains(k))
                .cloned(),
        );
    }
    vars
}

/// What is wrong with a variable's name, if anything.
fn var_name(name: &str, known: &[String]) -> Option<String> {
    let ident = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= MAX_VAR_LEN;
    if !ident {
        return Some(format!(
            "{name:?} is not a variable name: letters, digits and _, starting with a letter or _, at most {MAX_VAR_LEN}"
        ));
    }
    if BUILT_IN.contains(&name) {
        return Some(format!(
            "{name:?} is a built-in placeholder (${{{name}}}); name the variable otherwise"
        ));
    }
    known.iter().any(|k| k == name).then(|| {
        format!("{name:?} is captured by an earlier step already; name this one otherwise")
    })
}

/// Replies answer from the upgrade on, before any capture, so their templates know only the
/// built-in placeholders (the heartbeat's too: one template for every connection). An answer
/// may match a `when`, its own or another's: wsload reads only what the server sends, so it
/// never answers itself, and a server that echoes the answer back is caught at run time.
fn replies(replies: &[Reply], vars: &[String], e: &mut Errors) {
    for (j, r) in replies.iter().enumerate() {
        matcher(&format!("{FIELD}.replies[{j}].when"), &r.when, e);
        let why = "replies answer from the upgrade on, before it is known";
        built_in_only(&format!("{FIELD}.replies[{j}].send"), &r.send, vars, why, e);
    }
}

/// A template that may use only the built-in placeholders; a captured variable is refused
/// with `why`.
fn built_in_only(field: &str, p: &Payload, vars: &[String], why: &str, e: &mut Errors) {
    let Some((written, source)) = one_of(field, p.written(), e) else {
        return;
    };
    let field = format!("{field}.{}", written.name());
    match Template::parse_as(written, source, &[]) {
        Err(TemplateError::Unknown { name, .. }) if vars.contains(&name) => {
            e.add(
                field,
                format!(
                    "${{{name}}} is captured on open, but {why}; use built-in placeholders only (or send it from a step)"
                ),
            );
        }
        parsed => {
            template_result(&field, source, parsed, 0, e);
        }
    }
}

/// The measured message: its template, and that its answer rule can recognise its answers.
fn message(
    name: &str,
    m: &MeasuredMessage,
    size: usize,
    vars: &[String],
    split: Option<&Split>,
    e: &mut Errors,
) {
    let field = format!("{FIELD}.{name}");
    let Some((written, source)) = one_of(&field, m.written(), e) else {
        return;
    };
    let which = written.name();
    let template = template(&format!("{field}.{which}"), written, source, vars, size, e);
    let Some(answer) = &m.answer else { return };
    if answer.echoed && (answer.matches.is_some() || answer.id.is_some()) {
        e.add(
            format!("{field}.answer.echoed"),
            crate::cel::MSG_ECHOED_ALONE,
        );
    }
    if let Some(mm) = &answer.matches {
        matcher(&format!("{field}.answer.match"), mm, e);
    }
    let Some(id) = &answer.id else { return };
    let prefix = answer.matches.as_ref().and_then(|mm| mm.prefix.as_deref());
    let (Some(extract), Some(template)) = (
        extractor(&format!("{field}.answer.id"), id, prefix, e),
        template,
    ) else {
        return;
    };
    if !template.uses(&crate::template::Part::Seq) {
        e.add(
            format!("{field}.answer.id"),
            format!(
                "{name}.{which} carries no ${{seq}} for its answer to carry back; add ${{seq}} where the server reads the id (e.g. \"id\":${{seq}}), or remove answer.id to take answers in order"
            ),
        );
        return;
    }
    // A JSON id is the request's own field carried back (JSON-RPC's and graphql-ws' `id`):
    // it must read the seq back from the message as sent. A regular expression reads an
    // answer of another shape (Socket.IO's `43<id>`, STOMP's `receipt-id:<id>`), which the
    // message cannot be checked against.
    if id.json.is_none() {
        return;
    }
    let vars = vars.iter().map(|v| (v.clone(), b"v".to_vec())).collect();
    let sent = render(&template, PROBE_SEQ, size, &vars);
    let probe = PROBE_SEQ.to_string();
    // Framed as the server frames its messages (a SockJS client sends `["..."]` too), the
    // message carries its seq in one of its parts.
    let parts = split.map_or_else(|| vec![sent.clone()], |s| parts_as_sent(&sent, s));
    let read = parts
        .iter()
        .map(|p| extract.extract(p))
        .find(|r| *r == Some(probe.as_bytes()))
        .unwrap_or_else(|| extract.extract(&sent));
    if read != Some(probe.as_bytes()) {
        let got = read.map_or_else(|| "nothing".to_string(), quoted);
        e.add(
            format!("{field}.answer.id"),
            format!(
                "a correlation field the template does not carry: read from the message as sent with ${{seq}} = {PROBE_SEQ} ({}), it gives {got}, not {PROBE_SEQ}; point answer.id at where {name}.{which} carries ${{seq}}",
                quoted(&sent)
            ),
        );
    }
}

/// The messages a frame `sent` carries, split as `split` says: by its separator, or as the
/// elements of a JSON array (a string's text, any other value as written), its prefix
/// optional (a SockJS client's frames have none). A packet stream's message is one packet.
fn parts_as_sent(sent: &[u8], split: &Split) -> Vec<Vec<u8>> {
    if split.packets.is_some() {
        return vec![sent.to_vec()];
    }
    if let Some(sep) = split.separator.as_deref().filter(|s| !s.is_empty()) {
        let text = String::from_utf8_lossy(sent);
        return text
            .split(sep)
            .filter(|p| !p.is_empty())
            .map(|p| p.as_bytes().to_vec())
            .collect();
    }
    let prefix = split.json_array.as_ref().map_or("", |a| a.prefix.as_str());
    let body = sent.strip_prefix(prefix.as_bytes()).unwrap_or(sent);
    match serde_json::from_slice::<Vec<serde_json::Value>>(body) {
        Ok(values) => values
            .into_iter()
            .map(|v| match v {
                serde_json::Value::String(s) => s.into_bytes(),
                other => other.to_string().into_bytes(),
            })
            .collect(),
        Err(_) => vec![sent.to_vec()],
    }
}

/// A message sent in the `msgpack` or `zlib` format is the JSON its template renders to,
/// encoded: it must render to JSON.
fn json_for(
    name: &str,
    m: &MeasuredMessage,
    format: Format,
    size: usize,
    vars: &[String],
    e: &mut Errors,
) {
    let (which, source) = match m.written() {
        Some((Written::Bytes, _)) => {
            e.add(
                format!("{FIELD}.{name}.bytes"),
                format!(
                    "the {} format sends the JSON a template renders to, and bytes are sent as written; send it in the json or binary format",
                    format.as_str()
                ),
            );
            return;
        }
        Some((written, source)) => (written.name(), source),
        None => return,
    };
    let names: Vec<&str> = vars.iter().map(String::as_str).collect();
    let Ok(t) = Template::parse(source, &names) else {
        return;
    };
    let vars = vars.iter().map(|v| (v.clone(), b"v".to_vec())).collect();
    let sent = render(&t, PROBE_SEQ, size, &vars);
    if serde_json::from_slice::<serde_json::Value>(&sent).is_err() {
        e.add(
            format!("{FIELD}.{name}.{which}"),
            format!(
                "the {} format sends the JSON a template renders to, and this one renders to {}, not JSON; send it in the json or binary format, or write it as JSON",
                format.as_str(),
                quoted(&sent)
            ),
        );
    }
}

/// `text`, `binary` or `bytes`, exactly one (`written`, as the payload says): which, and the
/// template.
fn one_of<'a>(
    field: &str,
    written: Option<(Written, &'a str)>,
    e: &mut Errors,
) -> Option<(Written, &'a str)> {
    if written.is_none() {
        e.add(
            field,
            "set exactly one of text (sent as a text frame), binary (a binary frame) or bytes (a binary frame written in hex, e.g. 'c0 00')",
        );
    }
    written
}

fn payload(field: &str, p: &Payload, vars: &[String], e: &mut Errors) -> Option<Template> {
    let (written, source) = one_of(field, p.written(), e)?;
    template(
        &format!("{field}.{}", written.name()),
        written,
        source,
        vars,
        0,
        e,
    )
}

/// A template, and its lengths (in bytes) checked as it renders at `size`.
fn template(
    field: &str,
    written: Written,
    source: &str,
    vars: &[String],
    size: usize,
    e: &mut Errors,
) -> Option<Template> {
    let names: Vec<&str> = vars.iter().map(String::as_str).collect();
    let parsed = Template::parse_as(written, source, &names);
    template_result(field, source, parsed, size, e)
}

fn template_result(
    field: &str,
    source: &str,
    parsed: Result<Template, TemplateError>,
    size: usize,
    e: &mut Errors,
) -> Option<Template> {
    if source.len() > MAX_TEMPLATE_LEN {
        e.add(
            field,
            format!("{} bytes; at most {MAX_TEMPLATE_LEN}", source.len()),
        );
    }
    let t = parsed.map_err(|err| e.add(field, err.to_string())).ok()?;
    let vars = BTreeMap::new();
    if let Err(err) = t.check_lengths(&probe_values(PROBE_SEQ, size, &vars)) {
        e.add(field, err.to_string());
    }
    Some(t)
}

fn matcher(field: &str, m: &Match, e: &mut Errors) -> Option<Matcher> {
    if *m == Match::default() {
        e.add(field, crate::cel::MSG_MATCH_EMPTY);
        return None;
    }
    for (sub, text) in [
        ("equals", m.equals.as_deref()),
        ("prefix", m.prefix.as_deref()),
        ("bytes", m.bytes.as_deref()),
        ("regex", m.regex.as_deref()),
        ("json.equals", m.json.as_ref().map(|j| j.equals.as_str())),
    ] {
        if let Some(t) = text
            && t.len() > MAX_TEMPLATE_LEN
        {
            e.add(
                format!("{field}.{sub}"),
                format!("{} bytes; at most {MAX_TEMPLATE_LEN}", t.len()),
            );
        }
    }
    Matcher::compile(m)
        .map_err(|err| e.add(sub_field(field, err.field()), err.to_string()))
        .ok()
}

fn extractor(field: &str, c: &Capture, prefix: Option<&str>, e: &mut Errors) -> Option<Extractor> {
    Extractor::compile(c, prefix)
        .map_err(|err| e.add(sub_field(field, err.field()), err.to_string()))
        .ok()
}

fn sub_field(field: &str, sub: Option<&str>) -> String {
    match sub {
        Some(s) => format!("{field}.{s}"),
        None => field.to_string(),
    }
}

fn render(t: &Template, seq: u64, size: usize, vars: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    t.render(&mut probe_values(seq, size, vars))
}

/// The values the checks render a template with.
fn probe_values(seq: u64, size: usize, vars: &BTreeMap<String, Vec<u8>>) -> Values<'_> {
    Values {
        conn: 0,
        seq,
        send_time_us: 1_700_000_000_000_000,
        size,
        vars,
        random: 0,
    }
}

/// A message in an error: quoted, and cut short if long.
fn quoted(bytes: &[u8]) -> String {
    const MOST: usize = 120;
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(MOST) {
        Some((cut, _)) => format!("{:?}...", &text[..cut]),
        None => format!("{text:?}"),
    }
}

#[cfg(test)]
mod tests;
