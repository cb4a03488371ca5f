//! Where a run's connections go and how the server's receipt is read: the URL given, or
//! the managed server started here; and the servers' received counters.

use super::error::RunError;
use crate::conduct::local_server::{self, LocalServers};
use crate::conduct::server_metrics::Counter;
use crate::model::options::Options;
use wsload_spec::LoadTest;

/// Where a run's connections go: `--target-url`, else the spec's URL, else the managed
/// server's replicas, started here (and stopped when this is dropped).
pub struct Target {
    pub url: String,
    /// The servers' metrics endpoints, when known.
    pub metrics_urls: Vec<String>,
    pub local: Option<LocalServers>,
}

pub fn target(lt: &LoadTest, opts: &Options) -> Result<Target, RunError> {
    let spec = &lt.spec;
    let (url, metrics_urls, local) = match (&opts.target_url, &spec.target.url, &spec.target.server)
    {
        (Some(u), _, _) => (
            u.clone(),
            opts.server_metrics_url.iter().cloned().collect(),
            None,
        ),
        (None, Some(u), _) => (u.clone(), Vec::new(), None),
        (None, None, Some(server)) => {
            let s = LocalServers::start(
                local_server::find_binary(opts.server_bin.clone()),
                spec,
                server,
            )?;
            (s.ws_url.clone(), s.metrics_urls.clone(), Some(s))
        }
        (None, None, None) => {
            return Err(RunError::NoTarget);
        }
    };
    Ok(Target {
        url,
        metrics_urls,
        local,
    })
}

/// The received counters of a test's servers: the spec's `serverMetrics` (its own URL, else
/// each of `metrics_urls`), else for a managed server, ours on each replica.
pub fn server_counters(lt: &LoadTest, metrics_urls: &[String]) -> Vec<Counter> {
    let spec = &lt.spec;
    match &spec.server_metrics {
        Some(m) => {
            let urls: Vec<String> = match &m.url {
                Some(u) => vec![u.clone()],
                None => metrics_urls.to_vec(),
            };
            urls.into_iter()
                .filter(|u| !u.is_empty())
                .map(|url| Counter {
                    url,
                    name: m.received.clone(),
                    labels: m.labels.clone(),
                })
                .collect()
        }
        None if spec.target.server.is_some() => metrics_urls
            .iter()
            .map(|url| Counter {
                url: url.clone(),
                name: wsload_spec::DEFAULT_RECEIVED_METRIC.to_string(),
                labels: Default::default(),
            })
            .collect(),
        None => Vec::new(),
    }
}
