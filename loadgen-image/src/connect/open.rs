//! A connection opened for its part in a cell: dialed (crate::connect::dialer), then the
//! conversation's steps on open run on it (WSE's `server_ready` and hello, a Socket.IO
//! handshake, a subscriber's subscribe steps), their captures kept for its messages.

use super::dialer::{Dialed, Dialer};
use super::failure::{DialError, capture_missed, closed_at, closed_why, expect_missed, ws_error};
use crate::conversation::{Action, Fill, Incoming, Script, Step};
use futures_util::{SinkExt, StreamExt};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use wsload_report::measure::ConnectError;

/// A connection's part in a fanout, as it dials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Not in a fanout.
    Any,
    /// A publisher of this topic (its name).
    Publisher(bytes::Bytes),
    /// A subscriber of these topics (their names), subscribed in this order.
    Subscriber(Vec<bytes::Bytes>),
}

/// The `evidence` label under which a cell keeps what its server negotiated.
pub use wsload_report::measure::NEGOTIATED;

/// Opens connection number `n` for its part in the cell: dialed ([`Dialer::dial`]), then the
/// conversation's steps on open, each within its own timeout. A connection with a part in a
/// fanout knows its topic (`${topic}`) from the start, and a subscriber runs the subscribe
/// steps for each of its topics after those on open.
pub async fn open(
    dialer: &Dialer,
    script: &Script,
    n: u64,
    role: &Role,
) -> Result<Dialed, DialError> {
    let mut dialed = dial(dialer, script, n).await?;
    greet(script, n, role, &mut dialed, false).await?;
    Ok(dialed)
}

/// Opens connection `n` again after its drop. With `resume` (the variables of a subscriber
/// that has a position to resume from, `${resumeFrom}` among them) it runs the conversation's
/// `resume` steps; otherwise those on open and its subscriptions, as [`open`]. What the
/// server delivers while they run (a replay, a topic already subscribed again) is kept in
/// `early` for the subscriber, up to [`super::early::EARLY_MAX_BYTES`].
pub async fn reopen(
    dialer: &Dialer,
    script: &Script,
    n: u64,
    role: &Role,
    resume: Option<Vec<bytes::Bytes>>,
) -> Result<Dialed, DialError> {
    let mut dialed = dial(dialer, script, n).await?;
    match resume {
        Some(vars) if !script.resume.is_empty() && vars.len() == script.var_count() => {
            dialed.vars = vars;
            let began = Instant::now();
            steps(script, &script.resume, n, &mut dialed, true).await?;
            dialed.ready = Some(began.elapsed());
        }
        _ => greet(script, n, role, &mut dialed, true).await?,
    }
    Ok(dialed)
}

async fn dial(dialer: &Dialer, script: &Script, n: u64) -> Result<Dialed, DialError> {
    let mut dialed = dialer.dial(n).await?;
    if let Some(split) = &script.split {
        // Before the steps on open: what they expect may come packed too.
        dialed.ws.split_messages(split.clone());
    }
    dialed.vars = vec![bytes::Bytes::new(); script.var_count()];
    Ok(dialed)
}

/// The steps on open, then a subscriber's subscriptions, with its topics known.
async fn greet(
    script: &Script,
    n: u64,
    role: &Role,
    dialed: &mut Dialed,
    keep: bool,
) -> Result<(), DialError> {
    let topics: &[bytes::Bytes] = match role {
        Role::Any => &[],
        Role::Publisher(topic) => std::slice::from_ref(topic),
        Role::Subscriber(topics) => topics,
    };
    if let (Some(first), Some(var)) = (topics.first(), dialed.vars.first_mut())
        && script.delivery().is_some()
    {
        *var = first.clone();
    }
    let subscribing = matches!(role, Role::Subscriber(_)) && !script.subscribe.is_empty();
    if script.open.is_empty() && !subscribing {
        return Ok(());
    }
    let began = Instant::now();
    steps(script, &script.open, n, dialed, keep).await?;
    if subscribing {
        for topic in topics {
            dialed.vars[0] = topic.clone();
            steps(script, &script.subscribe, n, dialed, keep).await?;
        }
    }
    dialed.ready = Some(began.elapsed());
    Ok(())
}

/// Steps of the conversation, in order: a send is written out; an expect reads until a
/// message matches (answering what the replies answer, skipping the rest) and captures
/// its values. A miss is `expect_timeout`, by step, with the last message seen. With `keep`,
/// the deliveries read past are kept in `d.early`.
async fn steps(
    script: &Script,
    steps: &[Step],
    n: u64,
    d: &mut Dialed,
    keep: bool,
) -> Result<(), DialError> {
    let mut arena = bytes::BytesMut::new();
    for (i, step) in steps.iter().enumerate() {
        let fill = Fill {
            conn: n,
            seq: i as u64 + 1,
            size: script.open_size,
        };
        match &step.action {
            Action::Send(out) => {
                // A step's template may splice what earlier steps captured.
                let msg = if out.uses_vars() {
                    out.resolve(&d.vars).message(&mut arena, &fill)
                } else {
                    out.message(&mut arena, &fill)
                };
                d.ws.send(msg)
                    .await
                    .map_err(|e| DialError::from(ws_error(&e)))?;
                d.greetings_sent += 1;
            }
            Action::Expect {
                matcher,
                captures,
                timeout,
            } => {
                let until = Instant::now() + *timeout;
                let mut last: Option<String> = None;
                let msg = loop {
                    let Ok(next) = tokio::time::timeout_at(until, d.ws.next()).await else {
                        return Err(expect_missed(&step.name, *timeout, last.as_deref()));
                    };
                    let (text, data) = match next {
                        None => return Err(ConnectError::ClosedEarly.into()),
                        Some(Err(e)) => return Err(ws_error(&e).into()),
                        Some(Ok(Message::Close(frame))) => {
                            return Err(DialError {
                                why: closed_why(frame.as_ref()),
                                evidence: Some(closed_at(&step.name, frame.as_ref())),
                                step: None,
                            });
                        }
                        Some(Ok(Message::Text(t))) => (true, t.into()),
                        Some(Ok(Message::Binary(b))) => (false, b),
                        Some(Ok(_)) => continue,
                    };
                    if matcher.matches(text, &data) {
                        break data;
                    }
                    if keep
                        && let Some(rule) = script.delivery()
                        && rule.is_delivery(text, &data)
                    {
                        let len = data.len();
                        let m = if text {
                            match tokio_tungstenite::tungstenite::Utf8Bytes::try_from(data) {
                                Ok(t) => Message::Text(t),
                                Err(_) => continue,
                            }
                        } else {
                            Message::Binary(data)
                        };
                        // Past the budgets it is read past, as a first open's is.
                        d.early.keep(m, len);
                        continue;
                    }
                    if let Incoming::Reply(r) = script.incoming(text, &data)
                        && let Some((t, answer)) = script.reply(r, &mut arena, &fill)
                    {
                        d.ws.queue_reply(t, &answer);
                        d.replies += 1;
                    }
                    last = Some(String::from_utf8_lossy(&data[..data.len().min(512)]).into());
                };
                for (var, x) in captures {
                    let Some(value) = x.extract(&msg) else {
                        return Err(capture_missed(&step.name, script.var_name(*var), &msg));
                    };
                    // Made text here so that a template splicing it stays valid UTF-8; a
                    // binary field (`at`) stays its bytes, for a bytes template to send back.
                    d.vars[*var] = if x.is_binary() {
                        bytes::Bytes::copy_from_slice(value)
                    } else {
                        bytes::Bytes::from(String::from_utf8_lossy(value).into_owned().into_bytes())
                    };
                }
            }
        }
    }
    Ok(())
}
