//! A held connection dropped: counted in its window, and brought back as the policy says
//! (`spec.reconnect`), until it is open again, the policy gives up or the cell ends. Off the
//! hold's path: only a drop pays for it (its future is boxed by the caller).

use super::serving::Serving;
use super::worker::WorkerState;
use crate::connect::{self, Role, Ws};
use crate::model::comeback::Comeback;
use std::time::Duration;
use tokio::time::Instant;
use wsload_report::measure::ConnectError;
use wsload_spec::reconnect::{GOLDEN, unit_draw};

/// A connection open again, with what its steps on open captured.
pub(super) struct Back {
    pub ws: Ws,
    pub vars: Vec<bytes::Bytes>,
    /// Deliveries its steps read past (a replay), for its subscriber to read first.
    pub early: crate::connect::early::Early,
}

/// Ends a dropped connection's socket now (FIN both ways), before its policy's wait: kept
/// open until the new one replaced it, the server would see the client linger through the
/// backoff and its new connection open beside the old. The descriptor goes when `ws` does.
pub(super) fn shut(ws: &Ws) {
    use std::os::fd::AsRawFd;
    let fd = match ws.get_ref() {
        wsload_ws::Io::Plain(t) => t.as_raw_fd(),
        wsload_ws::Io::Tls(t) => t.get_ref().0.as_raw_fd(),
    };
    // Already shut by the peer, or reset: nothing left to end.
    let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Both);
}

/// Milliseconds from the measured phase's start to `t` (0 before it).
fn into_phase(ctx: &WorkerState, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(ctx.measure_from).as_millis()).unwrap_or(u64::MAX)
}

/// Connection `n` dropped (now, its close done): counted in its window, which is returned;
/// then, if the cell's policy reconnects, attempts on its schedule until one opens as `role`
/// (its steps on open run again, a subscriber's subscriptions too; or, given `resume`'s
/// variables, the conversation's `resume` steps), the policy's last attempt fails, or the
/// cell's deadline comes. `None`: it stays down.
pub(super) async fn come_back(
    serving: &Serving,
    ctx: &WorkerState,
    comeback: &Comeback,
    n: u64,
    role: &Role,
    resume: Option<&[bytes::Bytes]>,
) -> (usize, Option<Back>) {
    let dropped_at = Instant::now();
    let window = {
        let mut m = ctx.stats.borrow_mut();
        let r = m.reconnect.get_or_insert_with(|| comeback.figures());
        let w = r.window(into_phase(ctx, dropped_at));
        r.dropped(w);
        w
    };
    let Some(backoff) = comeback.backoff.as_ref() else {
        return (window, None);
    };
    let record = |f: &mut dyn FnMut(&mut wsload_report::reconnect::Reconnects)| {
        let mut m = ctx.stats.borrow_mut();
        f(m.reconnect.get_or_insert_with(|| comeback.figures()));
    };
    // Each connection's own draws: seeded by its number, so that a run's spread is the same
    // from one run to the next and no two connections wait alike.
    let mut rng = Jitter::new(n);
    let mut last = Duration::ZERO;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        if backoff.max_attempts() != 0 && attempt > backoff.max_attempts() {
            record(&mut |r| r.gave_up(window));
            return (window, None);
        }
        let wait = backoff.delay(attempt, last, rng.next());
        last = wait;
        let at = Instant::now() + wait;
        if at >= ctx.deadline {
            return (window, None);
        }
        tokio::time::sleep_until(at).await;
        let began = Instant::now();
        record(&mut |r| r.attempt(window, into_phase(ctx, began)));
        ctx.slot.reconnect_attempt();
        let dialed = tokio::time::timeout_at(
            ctx.deadline,
            connect::reopen(
                &serving.dialer,
                &ctx.script,
                n,
                role,
                resume.map(<[bytes::Bytes]>::to_vec),
            ),
        )
        .await;
        let now = Instant::now();
        match dialed {
            // Cut short by the cell's end: neither back nor failed.
            Err(_) => return (window, None),
            Ok(Err(e)) => {
                tracing::debug!(
                    connection = n,
                    reason = e.why.label(),
                    attempt,
                    "reconnect failed"
                );
                record(&mut |r| r.failed(window, e.why));
                witness(ctx, e.why, e.evidence.as_deref());
            }
            Ok(Ok(d)) => {
                let handshake = d.tcp + d.upgrade + d.ready.unwrap_or_default();
                record(&mut |r| {
                    r.back(
                        window,
                        into_phase(ctx, now),
                        now.saturating_duration_since(dropped_at),
                        handshake,
                    )
                });
                ctx.slot.reconnected(handshake);
                return (
                    window,
                    Some(Back {
                        ws: d.ws,
                        vars: d.vars,
                        early: d.early,
                    }),
                );
            }
        }
    }
}

/// Keeps the first failed attempt's evidence for its reason, as a first dial's is kept.
fn witness(ctx: &WorkerState, why: ConnectError, evidence: Option<&str>) {
    if let Some(text) = evidence {
        let mut m = ctx.stats.borrow_mut();
        if !m.counts.has_evidence(why.label()) {
            m.counts.witness(why.label(), text);
        }
    }
}

/// A connection's uniform draws in [0, 1) for its jitter (splitmix64: no state shared
/// between connections, nothing to lock).
struct Jitter(u64);

impl Jitter {
    fn new(seed: u64) -> Jitter {
        Jitter(seed ^ GOLDEN)
    }
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        unit_draw(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Jitter;

    #[test]
    fn draws_are_uniform_enough_and_differ_between_connections() {
        let mut a = Jitter::new(1);
        let draws: Vec<f64> = (0..10_000).map(|_| a.next()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        let below_tenth = draws.iter().filter(|d| **d < 0.1).count();
        assert!((800..1200).contains(&below_tenth), "{below_tenth}");
        assert_ne!(Jitter::new(1).next(), Jitter::new(2).next());
    }
}
