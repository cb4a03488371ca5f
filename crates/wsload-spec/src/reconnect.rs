//! Clients that come back (`spec.reconnect`) and what is done to the server while they are
//! held (`spec.disruptions`): a deploy or a crashed replica drops many connections at once,
//! and how they reconnect decides whether the replicas left survive the herd.

use crate::units::Dur;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Most disruptions in one LoadTest: each is a window of the report.
pub const MAX_DISRUPTIONS: usize = 16;

/// How a dropped connection comes back. Off unless a policy is named.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReconnectSpec {
    /// `none` (the default: a dropped connection stays down), `immediate`, `fixed` (every
    /// attempt `delay` after the last), `exponential` (`delay`, doubling to `maxDelay`, with
    /// `jitter`), `steps` (the `delays` in order, the last one repeated), or a client
    /// library's defaults: `socketio` (1 s doubling to 5 s, +-50 %), `signalr` (0, 2, 10,
    /// 30 s, then it gives up), `centrifuge` (0.5 s doubling to 20 s, full jitter).
    #[serde(default)]
    pub policy: ReconnectPolicy,
    /// The first delay (`fixed`: every delay; `exponential`: the first, before jitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Dur>,
    /// The longest delay of `exponential`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay: Option<Dur>,
    /// How `exponential` spreads its delays: `none`, `full` (uniform in 0..d), `equal` (d/2
    /// plus uniform in 0..d/2), `decorrelated` (uniform in delay..3x the last delay, capped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Jitter>,
    /// The delays of `steps`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub delays: Vec<Dur>,
    /// Attempts after one drop before the connection gives up; 0: until the cell's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ReconnectPolicy {
    #[default]
    None,
    Immediate,
    Fixed,
    Exponential,
    Steps,
    /// socket.io-client: reconnectionDelay 1000, reconnectionDelayMax 5000,
    /// randomizationFactor 0.5, attempts unbounded.
    Socketio,
    /// @microsoft/signalr withAutomaticReconnect(): 0, 2, 10, 30 s, then it stops.
    Signalr,
    /// centrifuge-js: minReconnectDelay 500, maxReconnectDelay 20000, full jitter.
    Centrifuge,
}

impl ReconnectPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ReconnectPolicy::None => "none",
            ReconnectPolicy::Immediate => "immediate",
            ReconnectPolicy::Fixed => "fixed",
            ReconnectPolicy::Exponential => "exponential",
            ReconnectPolicy::Steps => "steps",
            ReconnectPolicy::Socketio => "socketio",
            ReconnectPolicy::Signalr => "signalr",
            ReconnectPolicy::Centrifuge => "centrifuge",
        }
    }
    /// A client library's defaults: the policy sets every delay itself.
    pub fn is_preset(self) -> bool {
        matches!(
            self,
            ReconnectPolicy::Socketio | ReconnectPolicy::Signalr | ReconnectPolicy::Centrifuge
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Jitter {
    #[default]
    None,
    Full,
    Equal,
    Decorrelated,
    /// +-50 % of the delay (Socket.IO's randomizationFactor 0.5); set by `socketio` only.
    #[serde(skip)]
    #[schemars(skip)]
    HalfEither,
}

impl Jitter {
    pub fn as_str(self) -> &'static str {
        match self {
            Jitter::None => "none",
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
            Jitter::HalfEither => "+-50%",
        }
    }
}

/// A policy with every value settled: what a connection follows after a drop.
#[derive(Debug, Clone, PartialEq)]
pub enum Backoff {
    /// Exponential (and fixed, `factor` 1; immediate, `first` 0) with a jitter.
    Growing {
        first: Duration,
        max: Duration,
        factor: u32,
        jitter: Jitter,
        max_attempts: u32,
    },
    /// Delays in order, the last repeated; `max_attempts` 0: unbounded.
    Steps {
        delays: Vec<Duration>,
        max_attempts: u32,
    },
}

impl Backoff {
    /// Attempts after one drop before giving up; 0: until the cell's end.
    pub fn max_attempts(&self) -> u32 {
        match self {
            Backoff::Growing { max_attempts, .. } | Backoff::Steps { max_attempts, .. } => {
                *max_attempts
            }
        }
    }

    /// The wait before attempt `attempt` (1 for the first after a drop), `last` the wait
    /// before the previous attempt (decorrelated jitter grows from it), `random` a uniform
    /// draw in [0, 1).
    pub fn delay(&self, attempt: u32, last: Duration, random: f64) -> Duration {
        match self {
            Backoff::Steps { delays, .. } => {
                let i = (attempt.max(1) as usize - 1).min(delays.len().saturating_sub(1));
                delays.get(i).copied().unwrap_or_default()
            }
            Backoff::Growing {
                first,
                max,
                factor,
                jitter,
                ..
            } => {
                let grown = first
                    .checked_mul(factor.saturating_pow(attempt.saturating_sub(1).min(62)))
                    .unwrap_or(*max)
                    .min(*max);
                let random = random.clamp(0.0, 1.0);
                match jitter {
                    Jitter::None => grown,
                    Jitter::Full => grown.mul_f64(random),
                    Jitter::Equal => grown / 2 + (grown / 2).mul_f64(random),
                    Jitter::Decorrelated => {
                        // AWS's "decorrelated jitter": between the base and three times the
                        // last wait (the base before the first), capped.
                        let upper = last.max(*first).saturating_mul(3);
                        let span = upper.saturating_sub(*first);
                        (*first + span.mul_f64(random)).min(*max)
                    }
                    Jitter::HalfEither => grown.mul_f64(0.5 + random).min(*max),
                }
            }
        }
    }
}

impl ReconnectSpec {
    /// Whether connections reconnect at all.
    pub fn enabled(&self) -> bool {
        self.policy != ReconnectPolicy::None
    }

    /// The policy with every value settled; `None` when connections do not reconnect.
    /// Assumes a validated spec (see `validate`).
    pub fn backoff(&self) -> Option<Backoff> {
        let attempts = self.max_attempts.unwrap_or(0);
        let delay = self.delay.map_or(Duration::from_secs(1), Dur::get);
        let max = self.max_delay.map_or(Duration::from_secs(30), Dur::get);
        let growing = |first, max, factor, jitter, max_attempts| Backoff::Growing {
            first,
            max,
            factor,
            jitter,
            max_attempts,
        };
        let ms = Duration::from_millis;
        Some(match self.policy {
            ReconnectPolicy::None => return None,
            ReconnectPolicy::Immediate => {
                growing(Duration::ZERO, Duration::ZERO, 1, Jitter::None, attempts)
            }
            ReconnectPolicy::Fixed => {
                growing(delay, delay, 1, self.jitter.unwrap_or_default(), attempts)
            }
            ReconnectPolicy::Exponential => growing(
                delay,
                max.max(delay),
                2,
                self.jitter.unwrap_or_default(),
                attempts,
            ),
            ReconnectPolicy::Steps => Backoff::Steps {
                delays: self.delays.iter().map(|d| d.get()).collect(),
                max_attempts: attempts,
            },
            ReconnectPolicy::Socketio => growing(ms(1000), ms(5000), 2, Jitter::HalfEither, 0),
            ReconnectPolicy::Signalr => Backoff::Steps {
                delays: vec![ms(0), ms(2000), ms(10_000), ms(30_000)],
                max_attempts: 4,
            },
            ReconnectPolicy::Centrifuge => growing(ms(500), ms(20_000), 2, Jitter::Full, 0),
        })
    }

    /// How the policy reads in a report: `exponential 1s..30s, full jitter`.
    pub fn describe(&self) -> String {
        let Some(b) = self.backoff() else {
            return "none".into();
        };
        let d = |d: Duration| humantime::format_duration(d).to_string();
        let attempts = match b.max_attempts() {
            0 => String::new(),
            n => format!(", at most {n} attempts"),
        };
        let how = match &b {
            Backoff::Steps { delays, .. } => {
                let list: Vec<String> = delays.iter().map(|x| d(*x)).collect();
                format!("delays {}", list.join(", "))
            }
            Backoff::Growing {
                first,
                max,
                factor,
                jitter,
                ..
            } => match (*factor, *jitter) {
                (1, Jitter::None) => format!("every {}", d(*first)),
                (1, j) => format!("every {}, {} jitter", d(*first), j.as_str()),
                (_, j) => format!("{}..{} doubling, {} jitter", d(*first), d(*max), j.as_str()),
            },
        };
        format!("{} ({how}{attempts})", self.policy.as_str())
    }
}

/// Something done to the server at an instant of each cell's measured phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disruption {
    /// When, from the start of the measured phase (after the warm-up).
    pub at: Dur,
    /// Kill server replicas at once (locally SIGKILL of managed `wsload-server` processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill: Option<KillSpec>,
    /// Restart every replica of the managed server, one at a time, as a deploy does:
    /// locally SIGTERM (the server closes its connections with 1001 and exits), then the
    /// replica started again on its ports and ready before the next. With `deployment`, in a
    /// cluster: the user's own Deployment rolled as `kubectl rollout restart` rolls it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartSpec>,
    /// Drop a share of the held connections from the client side, abruptly (no close frame):
    /// clients that vanish at once, against any server, the user's own included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close: Option<CloseSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloseSpec {
    /// Which share of the held connections, `25%` or `0.25`: each connection is in it or not
    /// by a draw of its number, so about that share.
    pub share: crate::units::Percent,
}

impl CloseSpec {
    /// Whether connection `conn` is in the share closed by disruption number `index`: a draw
    /// of both (splitmix64), so each disruption picks its own share.
    pub fn picks(&self, conn: u64, index: usize) -> bool {
        unit_draw(conn ^ ((index as u64) << 40) ^ GOLDEN) < self.share.0
    }
}

/// splitmix64's increment: a connection's jitter draws step by it.
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// A uniform draw in [0, 1) from `z` (splitmix64's finalizer, its top 53 bits): what a
/// close picks by and what a reconnecting connection's jitter draws, nothing shared between
/// connections.
pub fn unit_draw(mut z: u64) -> f64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartSpec {
    /// How long after a replica is ready again the next one is restarted (a Deployment's
    /// `minReadySeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Dur>,
    /// The user's own Deployment, in the LoadTest's namespace, that serves `target.url`:
    /// the operator annotates its pod template (`wsload.dev/restartedAt`, as `kubectl
    /// rollout restart` does) and the Deployment's own strategy rolls it; done once every
    /// replica is updated and available. Needs the chart's `rollDeployments` to name the
    /// namespace (the operator may patch Deployments only there); a cluster's only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub deployment: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KillSpec {
    /// How many of the managed server's replicas are killed (the first ones started).
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub replicas: u32,
    /// Started again this long after the kill (as a Deployment replaces a crashed pod);
    /// unset, they stay down for the rest of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_after: Option<Dur>,
}

fn one() -> u32 {
    1
}

/// Whether any of `disruptions` acts on the server's processes (a kill, a restart): only the
/// process that runs the managed server can, and what they counted goes with them.
pub fn on_server(disruptions: &[Disruption]) -> bool {
    disruptions
        .iter()
        .any(|d| d.kill.is_some() || d.restart.is_some())
}

impl Disruption {
    /// How the disruption reads in a report: `kill 1 replica at 5s`.
    pub fn describe(&self) -> String {
        let at = humantime::format_duration(self.at.get());
        if let Some(c) = &self.close {
            return format!("close {:.0}% at {at}", c.share.0 * 100.0);
        }
        if let Some(r) = &self.restart {
            if let Some(name) = &r.deployment {
                return format!("rollout restart of deployment {name} at {at}");
            }
            let pause = r
                .pause
                .map(|p| format!(", {} apart", humantime::format_duration(p.get())))
                .unwrap_or_default();
            return format!("rolling restart at {at}{pause}");
        }
        match &self.kill {
            Some(k) => {
                let s = if k.replicas == 1 { "" } else { "s" };
                let back = k
                    .restart_after
                    .map(|r| format!(", restarted {} later", humantime::format_duration(r.get())))
                    .unwrap_or_default();
                format!("kill {} replica{s} at {at}{back}", k.replicas)
            }
            None => format!("nothing at {at}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ReconnectSpec {
        crate::yaml::parse(yaml).expect("yaml")
    }

    #[test]
    fn exponential_doubles_to_its_cap_and_full_jitter_spreads_below_it() {
        let b = spec("{policy: exponential, delay: 100ms, maxDelay: 1s, jitter: none}")
            .backoff()
            .expect("on");
        let ms = |a| b.delay(a, Duration::ZERO, 0.5).as_millis();
        assert_eq!(
            [ms(1), ms(2), ms(3), ms(4), ms(5), ms(40)],
            [100, 200, 400, 800, 1000, 1000]
        );
        let full = spec("{policy: exponential, delay: 100ms, maxDelay: 1s, jitter: full}")
            .backoff()
            .expect("on");
        assert_eq!(full.delay(3, Duration::ZERO, 0.0), Duration::ZERO);
        assert_eq!(full.delay(3, Duration::ZERO, 0.25).as_millis(), 100);
        let equal = spec("{policy: exponential, delay: 100ms, maxDelay: 1s, jitter: equal}")
            .backoff()
            .expect("on");
        assert_eq!(equal.delay(3, Duration::ZERO, 0.0).as_millis(), 200);
        assert_eq!(equal.delay(3, Duration::ZERO, 0.5).as_millis(), 300);
    }

    #[test]
    fn decorrelated_jitter_grows_from_the_last_wait_and_stays_capped() {
        let b = spec("{policy: exponential, delay: 100ms, maxDelay: 1s, jitter: decorrelated}")
            .backoff()
            .expect("on");
        assert_eq!(b.delay(1, Duration::ZERO, 0.0).as_millis(), 100);
        // Between 100 ms and 3 x 300 ms.
        assert_eq!(b.delay(2, Duration::from_millis(300), 0.5).as_millis(), 500);
        assert_eq!(b.delay(9, Duration::from_secs(5), 0.99).as_millis(), 1000);
    }

    #[test]
    fn presets_are_the_client_libraries_defaults() {
        let io = spec("{policy: socketio}").backoff().expect("on");
        // socket.io-client: 1 s x 2^n capped at 5 s, +-50 %.
        assert_eq!(io.delay(1, Duration::ZERO, 0.0).as_millis(), 500);
        assert_eq!(io.delay(2, Duration::ZERO, 0.5).as_millis(), 2000);
        assert_eq!(io.delay(9, Duration::ZERO, 0.99).as_millis(), 5000);
        let signalr = spec("{policy: signalr}").backoff().expect("on");
        let waits: Vec<u128> = (1..=5)
            .map(|a| signalr.delay(a, Duration::ZERO, 0.3).as_millis())
            .collect();
        assert_eq!(waits, [0, 2000, 10_000, 30_000, 30_000]);
        assert_eq!(signalr.max_attempts(), 4);
        assert_eq!(
            spec("{policy: centrifuge}").describe(),
            "centrifuge (500ms..20s doubling, full jitter)"
        );
        assert!(spec("{}").backoff().is_none());
    }
}
