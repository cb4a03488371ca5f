//! Command line and environment: every flag has a `WSLOAD_SERVER_*` variable because the pod
//! configures the server through env.

use crate::{ConfigError, Result};
use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::time::Duration;
use wsload_contract::env as var;

/// What a connection gets served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub enum Profile {
    /// Every data frame sent back with the same type.
    Echo,
    /// The WSE protocol: JWT, server_ready, hello, ping/PONG, M:/C: frames.
    Wse,
    /// Reads and counts, never answers.
    Sink,
    /// A timestamped message to every connection each interval.
    Broadcast,
    /// Topics in plain JSON: subscribe, unsubscribe, publish; each publish delivered to the
    /// topic's subscribers.
    Pubsub,
}

impl Profile {
    pub const ALL: [Profile; 5] = [
        Profile::Echo,
        Profile::Wse,
        Profile::Sink,
        Profile::Broadcast,
        Profile::Pubsub,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn label(self) -> &'static str {
        match self {
            Profile::Echo => "echo",
            Profile::Wse => "wse",
            Profile::Sink => "sink",
            Profile::Broadcast => "broadcast",
            Profile::Pubsub => "pubsub",
        }
    }

    fn parse(s: &str) -> Result<Self, ConfigError> {
        Profile::from_str(s, true).map_err(|_| ConfigError::UnknownProfile {
            name: s.to_string(),
        })
    }
}

/// Most broadcast messages a tick publishes: the feed's backlog holds 16 ticks' worth
/// (`state::broadcast_backlog`), each slot a message.
pub const MAX_BROADCAST_BATCH: u32 = 4096;

/// How a broadcast message carries its publish instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Timestamp {
    /// `"ts_us": MICROS`, an integer of microseconds since the Unix epoch.
    Us,
    /// `"ts": MILLIS.FFF`, milliseconds since the Unix epoch as a float with the microseconds
    /// as its fraction, as many real servers write it.
    Ms,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// wsload-server: the reference WebSocket server of wsload.
///
/// Serves echo, WSE, sink, broadcast and pubsub profiles with exact Prometheus counters on a
/// separate port. Every flag can also be set through the environment variable shown.
#[derive(Debug, Parser)]
#[command(name = "wsload-server", version, about, long_about)]
pub struct Cli {
    /// WebSocket listener, ADDR:PORT or ADDR:PORT=PROFILE to pin that listener to a profile.
    /// Repeat the flag (or separate with commas in the variable) for several listeners.
    #[arg(
        long,
        env = var::SERVER_LISTEN,
        value_delimiter = ',',
        default_value = "0.0.0.0:8080"
    )]
    pub listen: Vec<String>,

    /// Profile for listeners and paths not routed otherwise.
    #[arg(
        long,
        env = var::SERVER_PROFILE,
        value_enum,
        default_value = "echo"
    )]
    pub profile: Profile,

    /// PATH=PROFILE: serve a request path with a profile, e.g. /wse=wse. Repeatable.
    #[arg(long = "route", env = var::SERVER_ROUTES, value_delimiter = ',')]
    pub routes: Vec<String>,

    /// Set SO_REUSEPORT on every WebSocket listener, so several server processes (replicas) can
    /// listen on the same ADDR:PORT and the kernel spreads new connections among them. Each
    /// replica needs its own --metrics-listen port.
    #[arg(long, env = var::SERVER_REUSE_PORT)]
    pub reuse_port: bool,

    /// Connections the kernel may queue on each listener before the server accepts them
    /// (capped by net.core.somaxconn). The default is as many as the kernel allows; a small
    /// one reproduces a server whose backlog overflows in a storm (clients see SYN
    /// retransmits: connects of ~1 s and ~3 s).
    #[arg(long, env = var::SERVER_LISTEN_BACKLOG, default_value_t = 65_535,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub listen_backlog: u32,

    /// Address of /metrics (Prometheus), /healthz and /readyz.
    #[arg(
        long,
        env = var::SERVER_METRICS_LISTEN,
        default_value = "0.0.0.0:9090"
    )]
    pub metrics_listen: SocketAddr,

    /// Connections admitted at once; beyond it the server closes with 1013 (try again later).
    /// 0 means no cap.
    #[arg(long, env = var::SERVER_MAX_CONNECTIONS, default_value_t = 0)]
    pub max_connections: u64,

    /// Largest message or frame accepted, in bytes; larger ones close the connection with 1009.
    #[arg(long, env = var::SERVER_MAX_MESSAGE_SIZE, default_value_t = 16 << 20)]
    pub max_message_size: usize,

    /// Time from TCP accept to the HTTP 101 answer before the connection is dropped.
    #[arg(long, env = var::SERVER_HANDSHAKE_TIMEOUT, default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,

    /// Close (1000) a connection that sent no frame for this long. 0 disables.
    #[arg(long, env = var::SERVER_IDLE_TIMEOUT, default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Send a WebSocket ping to every client this often. 0 disables.
    #[arg(long, env = var::SERVER_PING_INTERVAL, default_value = "25s", value_parser = parse_duration)]
    pub ping_interval: Duration,

    /// On SIGTERM/SIGINT: stop accepting, close every connection with 1001 and exit within
    /// this bound.
    #[arg(long, env = var::SERVER_DRAIN_TIMEOUT, default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// HS256 secret for WSE tokens; required by the wse profile unless --wse-allow-anonymous.
    #[arg(long, env = var::SERVER_JWT_SECRET, hide_env_values = true)]
    pub jwt_secret: Option<String>,

    /// Demand this `iss` claim in WSE tokens.
    #[arg(long, env = var::SERVER_JWT_ISSUER)]
    pub jwt_issuer: Option<String>,

    /// Demand this `aud` claim in WSE tokens.
    #[arg(long, env = var::SERVER_JWT_AUDIENCE)]
    pub jwt_audience: Option<String>,

    /// Serve the wse profile without a token.
    #[arg(long, env = var::SERVER_WSE_ALLOW_ANONYMOUS)]
    pub wse_allow_anonymous: bool,

    /// Tick period of the broadcast profile.
    #[arg(long, env = var::SERVER_BROADCAST_INTERVAL, default_value = "100ms", value_parser = parse_duration)]
    pub broadcast_interval: Duration,

    /// Padding, in bytes, of each broadcast message.
    #[arg(
        long,
        env = var::SERVER_BROADCAST_PAYLOAD_SIZE,
        default_value_t = 64
    )]
    pub broadcast_payload_size: usize,

    /// Broadcast messages published at each tick, each with its own `seq` and instant. The
    /// timer ticks at most once a millisecond, so a feed faster than 1,000 messages a second
    /// takes a batch: `--broadcast-interval 1ms --broadcast-batch 100` publishes 100,000 a
    /// second, more than a client on one core reads (a broadcaster at full speed).
    #[arg(long, env = var::SERVER_BROADCAST_BATCH, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BROADCAST_BATCH)))]
    pub broadcast_batch: u32,

    /// How each broadcast message carries its publish instant.
    #[arg(
        long,
        env = var::SERVER_BROADCAST_TIMESTAMP,
        value_enum,
        default_value = "us"
    )]
    pub broadcast_timestamp: Timestamp,

    /// Deliveries a topic subscriber's connection may have waiting (pubsub and wse profiles);
    /// a publish that finds the queue full drops that delivery and counts it
    /// (wsload_server_topic_dropped_total{reason="slow_consumer"}): a slow subscriber never
    /// blocks the publisher or the other subscribers.
    #[arg(long, env = var::SERVER_SUBSCRIBER_QUEUE, default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub subscriber_queue: u32,

    /// The server's own publisher: topics t0..tN-1, each getting --ticker-rate messages per
    /// second on an open-loop schedule. 0: no ticker. Needs the pubsub or wse profile.
    #[arg(long, env = var::SERVER_TICKER_TOPICS, default_value_t = 0)]
    pub ticker_topics: u32,

    /// Ticker messages per second to each ticker topic.
    #[arg(long, env = var::SERVER_TICKER_RATE, default_value_t = 10.0)]
    pub ticker_rate: f64,

    /// Padding, in bytes, of each ticker message's `data`.
    #[arg(long, env = var::SERVER_TICKER_PAYLOAD_SIZE, default_value_t = 64)]
    pub ticker_payload_size: usize,

    /// TEST HOOK: drop every Nth delivery to the first subscriber of each topic without
    /// sending it, yet count it as delivered (the server lies on purpose, so that a client's
    /// gap detection can be checked against the server's counters). 0: off.
    #[arg(long, default_value_t = 0)]
    pub test_drop_every: u64,

    /// TEST HOOK: send every Nth delivery to the first subscriber of each topic twice (counted
    /// delivered once). 0: off.
    #[arg(long, default_value_t = 0)]
    pub test_duplicate_every: u64,

    /// TEST HOOK: hold every Nth delivery to the first subscriber of each topic and send it
    /// after the next one (N+1 arrives before N). 0: off.
    #[arg(long, default_value_t = 0)]
    pub test_swap_every: u64,

    /// Read buffer per connection in bytes: small saves memory with many idle connections.
    #[arg(long, env = var::SERVER_READ_BUFFER_SIZE, default_value_t = 4096)]
    pub read_buffer_size: usize,

    /// Runtime worker threads (default: one per core).
    #[arg(long, env = var::SERVER_THREADS)]
    pub threads: Option<usize>,

    /// Stop (as on SIGTERM) when the parent process, PID, ends, however it ends: `wsload run`
    /// starts its managed server with its own pid, so a run killed even with SIGKILL leaves no
    /// server behind. A server whose parent is not PID (it ended already) exits at once.
    #[arg(long, value_name = "PID")]
    pub exit_with_parent: Option<u32>,

    /// Log format on stderr; the level comes from RUST_LOG (default info).
    #[arg(
        long,
        env = var::SERVER_LOG_FORMAT,
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

/// `500ms`, `10s`, `2m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|source| DurationError::Seconds {
            text: s.to_string(),
            source,
        });
    }
    humantime::parse_duration(s).map_err(|source| DurationError::NotADuration {
        text: s.to_string(),
        source,
    })
}

/// Why a duration flag does not read (clap shows it after the flag and the value).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    /// A number of seconds no duration holds (negative, too large).
    #[error("{text:?}: {source}")]
    Seconds {
        text: String,
        #[source]
        source: std::time::TryFromFloatSecsError,
    },
    #[error("{text:?}: {source} (write e.g. 500ms, 10s, 2m)")]
    NotADuration {
        text: String,
        #[source]
        source: humantime::DurationError,
    },
}

fn topics_of(cli: &Cli) -> Result<Topics> {
    let ticker = if cli.ticker_topics == 0 {
        None
    } else if !(cli.ticker_rate.is_finite() && cli.ticker_rate > 0.0) {
        return Err(ConfigError::TickerRate(cli.ticker_rate).into());
    } else {
        Some(Ticker {
            topics: cli.ticker_topics,
            rate: cli.ticker_rate,
            payload_size: cli.ticker_payload_size,
        })
    };
    let every = |n: u64| (n > 0).then_some(n);
    Ok(Topics {
        subscriber_queue: cli.subscriber_queue as usize,
        ticker,
        hooks: Hooks {
            drop_every: every(cli.test_drop_every),
            duplicate_every: every(cli.test_duplicate_every),
            swap_every: every(cli.test_swap_every),
        },
    })
}

/// A listener and the profile it is pinned to, if any.
#[derive(Debug, Clone)]
pub struct Listener {
    pub addr: SocketAddr,
    pub profile: Option<Profile>,
}

/// The server's own publisher (`--ticker-*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ticker {
    pub topics: u32,
    /// Messages per second to each topic.
    pub rate: f64,
    pub payload_size: usize,
}

/// Test hooks that misdeliver to the first subscriber of each topic on purpose; each
/// `Some(n)` acts on every nth delivery to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Not sent, yet counted as delivered.
    pub drop_every: Option<u64>,
    /// Sent twice, counted once.
    pub duplicate_every: Option<u64>,
    /// Sent after the next delivery.
    pub swap_every: Option<u64>,
}

impl Hooks {
    pub fn any(&self) -> bool {
        self.drop_every.is_some() || self.duplicate_every.is_some() || self.swap_every.is_some()
    }
}

/// Topics, shared by the pubsub and wse profiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Topics {
    pub subscriber_queue: usize,
    pub ticker: Option<Ticker>,
    pub hooks: Hooks,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listeners: Vec<Listener>,
    pub default_profile: Profile,
    pub routes: Vec<(String, Profile)>,
    pub reuse_port: bool,
    pub listen_backlog: u32,
    pub metrics_listen: SocketAddr,
    pub max_connections: u64,
    pub max_message_size: usize,
    pub handshake_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    pub ping_interval: Option<Duration>,
    pub drain_timeout: Duration,
    pub jwt_secret: Option<Vec<u8>>,
    pub jwt_issuer: Option<String>,
    pub jwt_audience: Option<String>,
    pub wse_allow_anonymous: bool,
    pub broadcast_interval: Duration,
    pub broadcast_payload_size: usize,
    pub broadcast_batch: u32,
    pub broadcast_timestamp: Timestamp,
    pub topics: Topics,
    pub read_buffer_size: usize,
}

fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

impl Config {
    pub fn from_cli(cli: &Cli) -> Result<Self> {
        let listeners = cli
            .listen
            .iter()
            .map(|l| {
                let (addr, profile) = match l.split_once('=') {
                    Some((a, p)) => (a, Some(Profile::parse(p)?)),
                    None => (l.as_str(), None),
                };
                let addr = addr.trim().parse().map_err(|source| ConfigError::Listen {
                    listen: l.clone(),
                    source,
                })?;
                Ok(Listener { addr, profile })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        if listeners.is_empty() {
            return Err(ConfigError::NoListener.into());
        }
        let routes = cli
            .routes
            .iter()
            .map(|r| {
                let (path, p) = r
                    .split_once('=')
                    .ok_or_else(|| ConfigError::RouteForm { route: r.clone() })?;
                if !path.starts_with('/') {
                    return Err(ConfigError::RoutePath { route: r.clone() });
                }
                Ok((path.to_string(), Profile::parse(p)?))
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let at_least = |flag, value: usize, min| {
            if value < min {
                Err(ConfigError::TooSmall { flag, min })
            } else {
                Ok(())
            }
        };
        at_least("--max-message-size", cli.max_message_size, 16)?;
        at_least("--read-buffer-size", cli.read_buffer_size, 256)?;
        let above_zero = |flag, d: Duration| {
            if d.is_zero() {
                Err(ConfigError::Zero { flag })
            } else {
                Ok(())
            }
        };
        above_zero("--broadcast-interval", cli.broadcast_interval)?;
        above_zero("--handshake-timeout", cli.handshake_timeout)?;
        let config = Config {
            listeners,
            default_profile: cli.profile,
            routes,
            reuse_port: cli.reuse_port,
            listen_backlog: cli.listen_backlog,
            metrics_listen: cli.metrics_listen,
            max_connections: cli.max_connections,
            max_message_size: cli.max_message_size,
            handshake_timeout: cli.handshake_timeout,
            idle_timeout: nonzero(cli.idle_timeout),
            ping_interval: nonzero(cli.ping_interval),
            drain_timeout: cli.drain_timeout,
            jwt_secret: cli.jwt_secret.as_ref().map(|s| s.as_bytes().to_vec()),
            jwt_issuer: cli.jwt_issuer.clone(),
            jwt_audience: cli.jwt_audience.clone(),
            wse_allow_anonymous: cli.wse_allow_anonymous,
            broadcast_interval: cli.broadcast_interval,
            broadcast_payload_size: cli.broadcast_payload_size,
            broadcast_batch: cli.broadcast_batch,
            broadcast_timestamp: cli.broadcast_timestamp,
            topics: topics_of(cli)?,
            read_buffer_size: cli.read_buffer_size,
        };
        if config.serves(Profile::Wse) && config.jwt_secret.is_none() && !config.wse_allow_anonymous
        {
            return Err(ConfigError::WseWithoutSecret.into());
        }
        if config.topics.ticker.is_some() && !config.serves_topics() {
            return Err(ConfigError::TickerUnheard.into());
        }
        Ok(config)
    }

    /// Every profile some listener or path can reach.
    pub fn profiles(&self) -> Vec<Profile> {
        Profile::ALL
            .into_iter()
            .filter(|p| self.serves(*p))
            .collect()
    }

    /// Whether some profile served speaks topics (pubsub, wse).
    pub fn serves_topics(&self) -> bool {
        self.serves(Profile::Pubsub) || self.serves(Profile::Wse)
    }

    pub fn serves(&self, profile: Profile) -> bool {
        let unpinned = self.listeners.iter().any(|l| l.profile.is_none());
        (unpinned && self.default_profile == profile)
            || self.listeners.iter().any(|l| l.profile == Some(profile))
            || (unpinned && self.routes.iter().any(|(_, p)| *p == profile))
    }

    /// The profile for a request `path` on a listener pinned to `pinned`, if any.
    /// A pinned listener serves its profile on every path.
    pub fn route(&self, pinned: Option<Profile>, path: &str) -> Profile {
        if let Some(p) = pinned {
            return p;
        }
        self.routes
            .iter()
            .find(|(prefix, _)| path == prefix)
            .map(|(_, p)| *p)
            .unwrap_or(self.default_profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every variable the server reads is the contract's, and every one the operator sets on a
    /// server pod is read.
    #[test]
    fn the_variables_read_are_the_contracts() {
        let cli = Cli::command();
        let read: Vec<&str> = cli
            .get_arguments()
            .filter_map(|a| a.get_env()?.to_str())
            .collect();
        assert!(read.contains(&var::SERVER_LISTEN), "{read:?}");
        for v in &read {
            assert!(var::ALL.contains(v), "{v} is not in wsload_contract::env");
        }
        for v in var::SERVER_POD {
            assert!(
                read.contains(v),
                "the operator sets {v}, which the server does not read"
            );
        }
    }

    /// The configuration of `args`; what clap or the configuration says against them.
    fn config(args: &[&str]) -> Result<Config, String> {
        let mut argv = vec!["wsload-server"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        Config::from_cli(&cli).map_err(|e| e.to_string())
    }

    #[test]
    fn routes_and_pinned_listeners() {
        let c = config(&[
            "--listen",
            "127.0.0.1:1",
            "--listen",
            "127.0.0.1:2=sink",
            "--route",
            "/wse=wse",
            "--jwt-secret",
            "s",
        ])
        .expect("valid");
        assert_eq!(c.route(None, "/wse"), Profile::Wse);
        assert_eq!(c.route(None, "/other"), Profile::Echo);
        assert_eq!(c.route(Some(Profile::Sink), "/wse"), Profile::Sink);
        assert_eq!(
            c.profiles(),
            vec![Profile::Echo, Profile::Wse, Profile::Sink]
        );
    }

    #[test]
    fn errors_name_the_flag_and_the_fix() {
        let err = |args: &[&str]| {
            config(args)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(&["--profile", "wse"]).contains("--jwt-secret"));
        assert!(err(&["--listen", "nowhere"]).contains("--listen \"nowhere\""));
        assert!(err(&["--listen", "127.0.0.1:1=nope"]).contains("unknown profile \"nope\""));
        assert!(err(&["--route", "wse"]).contains("PATH=PROFILE"));
        assert!(err(&["--route", "wse=wse"]).contains("must start with '/'"));
        assert!(err(&["--idle-timeout", "soon"]).contains("500ms"));
        assert!(config(&["--profile", "wse", "--wse-allow-anonymous"]).is_ok());
        assert!(err(&["--ticker-topics", "3"]).contains("serve the pubsub or wse profile"));
        assert!(
            err(&[
                "--profile",
                "pubsub",
                "--ticker-topics",
                "1",
                "--ticker-rate",
                "0"
            ])
            .contains("--ticker-rate 0")
        );
        assert!(err(&["--subscriber-queue", "0"]).contains("subscriber-queue"));
        assert_eq!(
            err(&["--max-message-size", "8"]),
            "--max-message-size: must be at least 16 bytes"
        );
        assert_eq!(
            err(&["--handshake-timeout", "0"]),
            "--handshake-timeout: must be above zero"
        );
    }

    #[test]
    fn topics_and_hooks() {
        let c = config(&[
            "--profile",
            "pubsub",
            "--ticker-topics",
            "4",
            "--ticker-rate",
            "250",
            "--test-swap-every",
            "10",
        ])
        .expect("valid");
        assert_eq!(
            c.topics.ticker,
            Some(Ticker {
                topics: 4,
                rate: 250.0,
                payload_size: 64
            })
        );
        assert_eq!(c.topics.subscriber_queue, 1024);
        assert_eq!(
            c.topics.hooks,
            Hooks {
                swap_every: Some(10),
                ..Hooks::default()
            }
        );
        assert!(c.serves_topics());
        assert!(!config(&[]).expect("valid").serves_topics());
    }

    #[test]
    fn broadcast_batch_and_timestamp() {
        let c = config(&[]).expect("valid");
        assert_eq!(
            (c.broadcast_batch, c.broadcast_timestamp),
            (1, Timestamp::Us)
        );
        let c =
            config(&["--broadcast-batch", "100", "--broadcast-timestamp", "ms"]).expect("valid");
        assert_eq!(
            (c.broadcast_batch, c.broadcast_timestamp),
            (100, Timestamp::Ms)
        );
        let max = MAX_BROADCAST_BATCH.to_string();
        assert_eq!(
            config(&["--broadcast-batch", &max]).map(|c| c.broadcast_batch),
            Ok(MAX_BROADCAST_BATCH)
        );
        for bad in ["0", &(MAX_BROADCAST_BATCH + 1).to_string()] {
            let err = config(&["--broadcast-batch", bad]).expect_err(bad);
            assert!(err.contains("--broadcast-batch"), "{err}");
        }
        let err = config(&["--broadcast-timestamp", "s"]).expect_err("no such form");
        assert!(err.contains("us") && err.contains("ms"), "{err}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        let c = config(&["--idle-timeout", "0", "--ping-interval", "0"]).expect("valid");
        assert_eq!((c.idle_timeout, c.ping_interval), (None, None));
    }
}
