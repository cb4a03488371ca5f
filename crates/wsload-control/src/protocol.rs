//! The shard control protocol (docs/operator.md, "Shard control protocol"). A shard gets ready,
//! then waits on its endpoint:
//!
//! ```text
//! GET  /control         -> State
//! POST /control/start   StartRequest  {"startAt": unix_ms, "cell"?: CellKey}   -> 202 State
//! POST /control/cell    CellOrder     {"startAt": unix_ms, "cell": CellKey}    -> 202 State
//! POST /control/measure MeasureOrder  {"cell": index, "startAt": unix_ms}  -> 202 State
//! POST /control/end     {}            -> 202 State (the shard builds its result)
//! GET  /control/result  -> 200 RunResult JSON, or 409 State while there is none
//! POST /control/finish  {}            -> 200 State (the result is stored: exit)
//! GET  /control/clock   -> 200 ClockReading {"unixMicros": u64}
//! ```
//!
//! A shard of several that holds or drives its connections (every cell but a fanout's, whose
//! shards begin at an instant computed alike on each: see the load generator's cell/start_line.rs) is
//! `connected` once its share of the cell is open, with its [`ConnectSummary`], and measures
//! from the instant the conductor names once every live shard is connected
//! (`POST /control/measure`): "N connections at once" then holds over all shards, however
//! long each took to open its share. After each cell the shard is `between`, with the cell's
//! [`CellSummary`], until the conductor orders the next cell or the end. Every POST is idempotent for the same body, so
//! a conductor may retry after a lost answer; a different body is a 409 with the state.

use serde::{Deserialize, Serialize};
use wsload_spec::Format;

pub const STATE: &str = "/control";
pub const START: &str = "/control/start";
pub const CELL: &str = "/control/cell";
pub const MEASURE: &str = "/control/measure";
pub const END: &str = "/control/end";
pub const RESULT: &str = "/control/result";
pub const FINISH: &str = "/control/finish";
pub const CLOCK: &str = "/control/clock";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Loading or ready; no start time yet.
    #[default]
    Waiting,
    /// Has the start time of its next cell, sleeps until it.
    Armed,
    /// Running a cell.
    Running,
    /// Opened its share of the running cell; waits for the instant every shard measures from.
    Connected,
    /// Finished a cell; waits for the next cell or the end.
    Between,
    /// Measured; the result is ready.
    Done,
    /// Could not prepare, or the run broke off (the result holds what was measured).
    Failed,
}

impl Phase {
    /// Whether the shard will still run or report cells.
    pub fn live(self) -> bool {
        matches!(
            self,
            Phase::Waiting | Phase::Armed | Phase::Running | Phase::Connected | Phase::Between
        )
    }
}

/// One cell as the conductor names it: every shard runs its share of `connections`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CellKey {
    /// Position in the run, from 0.
    pub index: u32,
    pub label: String,
    /// Connections of the whole test (all shards).
    pub connections: u32,
    pub size: u32,
    pub format: Format,
}

/// What a shard says of a cell it finished: enough for the conductor to judge a probe and to
/// reconcile delivery, without the histograms (those come once, in the result).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CellSummary {
    pub index: u32,
    pub attempted: u64,
    pub connected: u64,
    /// Connections that failed or were dropped.
    pub failed: u64,
    /// Data messages sent, warm-up included: what the server should have received.
    pub sent_with_warmup: u64,
    /// When this shard began the cell and finished it, Unix microseconds.
    pub started_at_micros: u64,
    pub finished_at_micros: u64,
}

/// What a shard says once its share of a cell is open (`connected`), and when it was told to
/// measure from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectSummary {
    /// The cell's position in the run.
    pub index: u32,
    pub opened: u64,
    /// Connections that could not open.
    pub failed: u64,
    /// The measured phase's instant as ordered (Unix ms, this shard's clock); absent while the
    /// shard waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_at: Option<u64>,
}

/// What `GET /control` answers (and every other control request, beside its status).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    pub state: Phase,
    /// The start of the cell armed or running, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<u64>,
    /// When this shard's first cell began, Unix microseconds (wall clock, after the sleep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_micros: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_micros: Option<u64>,
    /// Cells finished so far.
    #[serde(default)]
    pub cells_done: u32,
    /// The last cell finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_cell: Option<CellSummary>,
    /// The last cell whose share this shard opened, when it waits (or waited) for the other
    /// shards before measuring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected: Option<ConnectSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Anything else the conductor should know: a start time already past when it arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl State {
    /// Armed for a cell at `start_at` (Unix ms), received at `now` (Unix ms): the note says
    /// when the instant had already passed, so the conductor learns its order came late.
    pub fn arm(&mut self, start_at: u64, now: u64) {
        self.state = Phase::Armed;
        self.start_at = Some(start_at);
        self.note = (start_at < now).then(|| {
            format!(
                "startAt {start_at} was {} ms in the past when it arrived: starting now",
                now - start_at
            )
        });
    }
}

/// `GET /control/clock`: the shard's wall clock, read when the request is answered, from the
/// clock it stamps its measurements with (crate::clock: how the conductor uses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClockReading {
    pub unix_micros: u64,
}

/// `POST /control/start`: the first cell's instant. Without `cell`, the first cell of the
/// spec's sequence ([`crate::Conductor`]), which every shard computes alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartRequest {
    pub start_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<CellKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conductor_at: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset_micros: i64,
}

/// `POST /control/cell`: the next cell, and the instant every shard begins it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CellOrder {
    pub start_at: u64,
    pub cell: CellKey,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conductor_at: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset_micros: i64,
}

/// `POST /control/measure`: every live shard opened its share of cell `cell`; measure from
/// `start_at` (Unix ms, on the shard's clock; `conductor_at` the same instant on the
/// conductor's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasureOrder {
    pub cell: u32,
    pub start_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conductor_at: Option<u64>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A shard's release (in [`StartRequest`] and [`CellOrder`]): the cell's instant on the
/// shard's own clock (`start_at`), and what the shard needs to stamp instants on the
/// conductor's clock, which shards on other nodes compare (a fanout's publish instants and
/// receipts): the same instant on the conductor's clock (`conductor_at`, Unix ms; absent:
/// `start_at`) and the shard's clock minus the conductor's (`offset_micros`), as last measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Release {
    pub start_at: u64,
    pub conductor_at: Option<u64>,
    pub offset_micros: i64,
}
