//! The shard side of the protocol's routing, written once for every shard that serves it (the
//! load generator's `wsload shard --await-start`, and the operator tests' fake shards): which
//! request is which call, what a wrong method gets, and that none is heard without the test's
//! token.

use crate::auth::{self, Token};
use crate::protocol::{self, CellOrder, ClockReading, MeasureOrder, Phase, StartRequest, State};
use wsload_http::{Reply, Request};

/// What a shard does for each control request; the answers are the shard's (202, 409, ...).
pub trait ShardEndpoint {
    /// The test's token: a control request without it is answered 401 and reaches none of
    /// the methods below.
    fn token(&self) -> &Token;
    fn state(&self) -> State;
    /// `POST /control/start` with its body.
    fn start(&self, body: &[u8]) -> Reply;
    /// `POST /control/cell` with its body.
    fn cell(&self, body: &[u8]) -> Reply;
    /// `POST /control/measure` with its body. A shard that never says it is `connected` is
    /// never sent one: by default it refuses it (409).
    fn measure(&self, _body: &[u8]) -> Reply {
        json(409, &self.state())
    }
    /// `POST /control/end`.
    fn end(&self) -> Reply;
    /// `GET /control/result`.
    fn result(&self) -> Reply;
    /// `GET /control/clock`: the wall clock the shard stamps its measurements with.
    fn clock(&self) -> ClockReading;
}

/// A JSON reply (a 500 saying so if `value` cannot be serialized).
pub fn json(status: u16, value: &impl serde::Serialize) -> Reply {
    match serde_json::to_string(value) {
        Ok(body) => Reply::json(status, body),
        Err(e) => Reply::text(500, format!("cannot serialize: {e}\n")),
    }
}

/// Whether `path` is the control API's (`/control` and below): all of it needs the token,
/// paths it does not know included, so that a caller without it learns nothing of them.
pub fn is_control(path: &str) -> bool {
    path == protocol::STATE
        || path
            .strip_prefix(protocol::STATE)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `request` carries the shard's token.
fn authorized(shard: &impl ShardEndpoint, request: &Request<'_>) -> bool {
    shard.token().admits(request.authorization)
}

/// The answer to `request` when it is a control request (`None`: not one). Without the
/// token: 401, and nothing is asked of the shard. A finish is answered with the state; the
/// shard acts on it once the answer is sent ([`is_finish`]).
pub fn route(shard: &impl ShardEndpoint, request: &Request<'_>) -> Option<Reply> {
    if !is_control(request.path) {
        return None;
    }
    if !authorized(shard, request) {
        return Some(Reply::text(401, auth::REFUSED));
    }
    let get = matches!(request.method, "GET" | "HEAD");
    let post = request.method == "POST";
    Some(match request.path {
        protocol::STATE if get => json(200, &shard.state()),
        protocol::START if post => shard.start(request.body),
        protocol::CELL if post => shard.cell(request.body),
        protocol::MEASURE if post => shard.measure(request.body),
        protocol::END if post => shard.end(),
        protocol::RESULT if get => shard.result(),
        protocol::FINISH if post => json(200, &shard.state()),
        protocol::CLOCK if get => json(200, &shard.clock()),
        protocol::STATE | protocol::RESULT | protocol::CLOCK => {
            Reply::text(405, format!("{}: only GET\n", request.path))
        }
        protocol::START | protocol::CELL | protocol::MEASURE | protocol::END | protocol::FINISH => {
            Reply::text(405, format!("{}: only POST\n", request.path))
        }
        _ => return None,
    })
}

/// Whether `request` was `POST /control/finish` with the token: the shard may go, after the
/// answer is on its way (a conductor that saw the connection drop would retry a finish that
/// worked).
pub fn is_finish(shard: &impl ShardEndpoint, request: &Request<'_>) -> bool {
    request.method == "POST" && request.path == protocol::FINISH && authorized(shard, request)
}

/// What a shard does with an order, by the protocol's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// New: act on it, answer 202.
    Accept,
    /// The same order again (a conductor's retry): answer 202, change nothing.
    Again,
    /// Refused: answer 409 with the state.
    Conflict,
}

impl Admit {
    /// The answer when there is nothing to act on (a repeated order: 202; a refused one: 409,
    /// both with the state); `None` for a new order, which the caller acts on first.
    pub fn settled(self, state: &impl serde::Serialize) -> Option<Reply> {
        match self {
            Admit::Accept => None,
            Admit::Again => Some(json(202, state)),
            Admit::Conflict => Some(json(409, state)),
        }
    }
}

/// The body of `POST /control/start`, or the 400 saying what it must be.
pub fn parse_start(body: &[u8]) -> Result<StartRequest, Reply> {
    serde_json::from_slice(body).map_err(|e| {
        Reply::text(
            400,
            format!("body must be {{\"startAt\": <unix ms>, \"cell\"?: {{...}}}}: {e}\n"),
        )
    })
}

/// The body of `POST /control/cell`, or the 400 saying what it must be.
pub fn parse_cell(body: &[u8]) -> Result<CellOrder, Reply> {
    serde_json::from_slice(body).map_err(|e| {
        Reply::text(
            400,
            format!(
                "body must be {{\"startAt\": <unix ms>, \"cell\": {{\"index\", \"label\", \"connections\", \"size\", \"format\"}}}}: {e}\n"
            ),
        )
    })
}

/// A start: once, while waiting; the same body again is a retry.
pub fn admit_start(started: Option<&StartRequest>, state: Phase, request: &StartRequest) -> Admit {
    match started {
        Some(prev) if prev == request => Admit::Again,
        Some(_) => Admit::Conflict,
        None if state != Phase::Waiting => Admit::Conflict,
        None => Admit::Accept,
    }
}

/// A cell: the next one (`cellsDone`), to a shard between cells whose cells did not end.
pub fn admit_cell(
    last: Option<&CellOrder>,
    state: &State,
    ended: bool,
    request: &CellOrder,
) -> Admit {
    if last == Some(request) {
        Admit::Again
    } else if state.state != Phase::Between || ended || request.cell.index != state.cells_done {
        Admit::Conflict
    } else {
        Admit::Accept
    }
}

/// The body of `POST /control/measure`, or the 400 saying what it must be.
pub fn parse_measure(body: &[u8]) -> Result<MeasureOrder, Reply> {
    serde_json::from_slice(body).map_err(|e| {
        Reply::text(
            400,
            format!("body must be {{\"cell\": <index>, \"startAt\": <unix ms>}}: {e}\n"),
        )
    })
}

/// A measure order: to a shard `connected` on that cell; the same order again (even once the
/// shard measures or finished the cell) is a retry. `last` is the order taken for the cell the
/// shard connected last.
pub fn admit_measure(last: Option<&MeasureOrder>, state: &State, request: &MeasureOrder) -> Admit {
    let connected_on = state.connected.as_ref().map(|c| c.index);
    if last == Some(request) {
        Admit::Again
    } else if state.state != Phase::Connected
        || connected_on != Some(request.cell)
        || last.is_some_and(|l| l.cell == request.cell)
    {
        Admit::Conflict
    } else {
        Admit::Accept
    }
}

/// The end: once, between cells.
pub fn admit_end(ended: bool, state: Phase) -> Admit {
    if ended {
        Admit::Again
    } else if state != Phase::Between {
        Admit::Conflict
    } else {
        Admit::Accept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::CellKey;
    use wsload_spec::Format;

    #[test]
    fn only_a_new_order_is_left_to_act_on() {
        let state = serde_json::json!({"state": "running"});
        assert!(Admit::Accept.settled(&state).is_none());
        let again = Admit::Again.settled(&state).expect("answered");
        assert_eq!(
            (again.status, again.body.as_str()),
            (202, r#"{"state":"running"}"#)
        );
        let refused = Admit::Conflict.settled(&state).expect("answered");
        assert_eq!(
            (refused.status, refused.body.as_str()),
            (409, r#"{"state":"running"}"#)
        );
    }

    fn order(index: u32) -> CellOrder {
        CellOrder {
            start_at: 5,
            cell: CellKey {
                index,
                label: "x".into(),
                connections: 1,
                size: 1,
                format: Format::default(),
            },
            conductor_at: None,
            offset_micros: 0,
        }
    }

    #[test]
    fn orders_are_taken_once_repeated_alike_and_otherwise_refused() {
        let go = StartRequest {
            start_at: 5,
            cell: None,
            conductor_at: None,
            offset_micros: 0,
        };
        let later = StartRequest {
            start_at: 6,
            cell: None,
            conductor_at: None,
            offset_micros: 0,
        };
        assert_eq!(admit_start(None, Phase::Waiting, &go), Admit::Accept);
        assert_eq!(admit_start(Some(&go), Phase::Armed, &go), Admit::Again);
        assert_eq!(
            admit_start(Some(&go), Phase::Armed, &later),
            Admit::Conflict
        );
        assert_eq!(admit_start(None, Phase::Failed, &go), Admit::Conflict);
        let between = State {
            state: Phase::Between,
            cells_done: 1,
            ..Default::default()
        };
        assert_eq!(admit_cell(None, &between, false, &order(1)), Admit::Accept);
        assert_eq!(
            admit_cell(Some(&order(1)), &between, false, &order(1)),
            Admit::Again
        );
        assert_eq!(
            admit_cell(None, &between, false, &order(2)),
            Admit::Conflict
        );
        assert_eq!(admit_cell(None, &between, true, &order(1)), Admit::Conflict);
        assert_eq!(admit_end(false, Phase::Between), Admit::Accept);
        assert_eq!(admit_end(true, Phase::Done), Admit::Again);
        assert_eq!(admit_end(false, Phase::Running), Admit::Conflict);
        assert_eq!(parse_start(b"{}").expect_err("no startAt").status, 400);
        assert_eq!(
            parse_cell(b"{\"startAt\": 1}").expect_err("no cell").status,
            400
        );
    }

    #[test]
    fn a_measure_order_goes_to_a_shard_connected_on_its_cell_once() {
        let go = MeasureOrder {
            cell: 2,
            start_at: 9,
            conductor_at: None,
        };
        let connected = |index: u32| State {
            state: Phase::Connected,
            cells_done: 2,
            connected: Some(crate::protocol::ConnectSummary {
                index,
                opened: 5,
                failed: 0,
                measure_at: None,
            }),
            ..Default::default()
        };
        assert_eq!(admit_measure(None, &connected(2), &go), Admit::Accept);
        // Not yet connected on that cell, or on another.
        assert_eq!(admit_measure(None, &connected(1), &go), Admit::Conflict);
        let running = State {
            state: Phase::Running,
            ..connected(2)
        };
        assert_eq!(admit_measure(None, &running, &go), Admit::Conflict);
        // A retry, even once the shard measures: the same answer, nothing done twice.
        assert_eq!(admit_measure(Some(&go), &running, &go), Admit::Again);
        // Another instant for the cell already ordered.
        let later = MeasureOrder { start_at: 10, ..go };
        assert_eq!(
            admit_measure(Some(&go), &connected(2), &later),
            Admit::Conflict
        );
        assert_eq!(
            parse_measure(b"{\"cell\": 2}")
                .expect_err("no startAt")
                .status,
            400
        );
        assert_eq!(
            parse_measure(b"{\"cell\": 2, \"startAt\": 9, \"offsetMicros\": 1}")
                .expect_err("unknown field")
                .status,
            400
        );
    }
}
