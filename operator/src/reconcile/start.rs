//! From a new LoadTest to released shards: the spec checked, the server started and waited
//! on, the shards started, and the start barrier.

use super::step::{CONDITION_FAILED, Step, humantime};
use crate::builders::{self, Endpoints};
use crate::names::{self, MANAGER};
use crate::pods::{self, PodHealth};
use crate::results;
use crate::shard_client::ShardClient;
use crate::{Error, Result};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use std::time::Duration;
use wsload_spec::status::{Phase, ShardState};

impl Step<'_> {
    pub(super) fn begin(&mut self) -> Result<Action> {
        self.st.observed_generation = self.lt.metadata.generation;
        self.st.start_time = Some(Time(self.now));
        let spec = &self.lt.spec;
        if let Err(errors) = wsload_spec::validate::validate(spec) {
            let list = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            self.mark_failed("InvalidSpec", format!("invalid LoadTest: {list}"));
            self.enter(Phase::Failed, format!("invalid LoadTest: {list}"));
            self.st.completion_time = Some(Time(self.now));
            return Ok(Action::await_change());
        }
        self.st.shards = results::shares(&self.test(), spec);
        self.condition(CONDITION_FAILED, false, "NoFailure", "");
        self.enter(Phase::Pending, "starting the server under test");
        Ok(Action::requeue(Duration::from_millis(200)))
    }

    pub(super) async fn pending(&mut self) -> Result<Action> {
        let Some(server) = self.lt.spec.target.server.clone() else {
            let url = self.lt.spec.target.url.clone().unwrap_or_default();
            self.st.target_url = Some(url.clone());
            self.enter(Phase::Starting, format!("target {url}; starting shards"));
            return Ok(Action::requeue(Duration::from_millis(200)));
        };
        let pp = PatchParams::apply(MANAGER).force();
        let test = self.test();
        if self.world.server.is_none() {
            let pod = builders::server_pod(self.lt, &server);
            self.apis
                .pods
                .patch(&names::server(&test), &pp, &Patch::Apply(&pod))
                .await?;
        }
        let svc = builders::server_service(self.lt, &server);
        self.apis
            .services
            .patch(&names::server(&test), &pp, &Patch::Apply(&svc))
            .await?;
        let (start_limit, _, _) = self.timeouts();
        match self.world.server.as_ref().map(pods::health) {
            Some(PodHealth::Ready { ip }) => {
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.clone()
                };
                let url = format!("ws://{host}:{}{}", server.port, server.path);
                self.st.target_url = Some(url.clone());
                self.condition(
                    "ServerReady",
                    true,
                    "PodReady",
                    format!("{} at {url}", names::server(&test)),
                );
                self.enter(
                    Phase::Starting,
                    format!("server ready at {url}; starting shards"),
                );
                Ok(Action::requeue(Duration::from_millis(200)))
            }
            Some(PodHealth::Ended { reason }) => {
                self.fail(
                    "ServerFailed",
                    format!(
                        "server pod {} ended before the test: {reason}",
                        names::server(&test)
                    ),
                )
                .await
            }
            other => {
                if self.deadline_passed(start_limit) {
                    let why = other
                        .map(|h| h.describe())
                        .unwrap_or_else(|| "not created".into());
                    return self
                        .fail(
                            "ServerNotReady",
                            format!(
                                "server pod {} not ready within {}: {why}",
                                names::server(&test),
                                humantime(start_limit)
                            ),
                        )
                        .await;
                }
                Ok(Action::requeue(Duration::from_secs(1)))
            }
        }
    }

    /// The managed server must stay up while shards start and run.
    pub(super) fn server_lost(&self) -> Option<String> {
        self.lt.spec.target.server.as_ref()?;
        match self.world.server.as_ref().map(pods::health) {
            None => Some("server pod deleted".into()),
            Some(PodHealth::Ended { reason }) => Some(format!("server pod ended: {reason}")),
            _ => None,
        }
    }

    pub(super) fn endpoints(&self) -> Endpoints {
        let spec = &self.lt.spec;
        let server_metrics_url = spec
            .server_metrics
            .as_ref()
            .and_then(|m| m.url.clone())
            .or_else(|| {
                let server = spec.target.server.as_ref()?;
                let ip = self.world.server.as_ref().and_then(pods::ip)?;
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip
                };
                Some(format!("http://{host}:{}/metrics", server.metrics_port))
            });
        Endpoints {
            target_url: self.st.target_url.clone().unwrap_or_default(),
            server_metrics_url,
        }
    }

    pub(super) async fn starting(&mut self) -> Result<Action> {
        if let Some(why) = self.server_lost() {
            return self.fail("ServerLost", why).await;
        }
        let test = self.test();
        self.ensure_results_config_map().await?;
        let endpoints = self.endpoints();
        let document =
            builders::loadtest_document(self.lt).map_err(|e| Error::Serialize(e.to_string()))?;
        let pp = PatchParams::apply(MANAGER).force();
        let (start_limit, _, _) = self.timeouts();
        let mut waiting = Vec::new();
        let mut ready = Vec::new();
        for i in 0..self.lt.spec.shards {
            let name = names::shard(&test, i);
            let Some(pod) = self.world.shards.get(&i) else {
                // Created once: a pod's spec is immutable, and the one made is the one to use.
                let pod = builders::shard_pod(self.lt, i, &endpoints, &document);
                self.apis
                    .pods
                    .patch(&name, &pp, &Patch::Apply(&pod))
                    .await?;
                waiting.push(format!("shard {i}: pod created"));
                continue;
            };
            match pods::health(pod) {
                PodHealth::Ready { ip } => ready.push((i, ip)),
                PodHealth::Ended { reason } => {
                    self.set_shard(i, ShardState::Failed, Some(reason.clone()));
                    return self
                        .fail(
                            "ShardFailed",
                            format!("shard {i} (pod {name}) ended before the start: {reason}"),
                        )
                        .await;
                }
                h => {
                    self.set_shard(i, ShardState::Pending, Some(h.describe()));
                    waiting.push(format!("shard {i} (pod {name}): {}", h.describe()));
                }
            }
        }
        for (i, _) in &ready {
            self.set_shard(*i, ShardState::Ready, None);
        }
        if !waiting.is_empty() {
            if self.deadline_passed(start_limit) {
                return self
                    .fail(
                        "ShardsNotReady",
                        format!(
                            "shards not ready within {}: {}",
                            humantime(start_limit),
                            waiting.join("; ")
                        ),
                    )
                    .await;
            }
            self.st.message = Some(format!(
                "{}/{} shards ready",
                ready.len(),
                self.lt.spec.shards
            ));
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        self.condition(
            "ShardsReady",
            true,
            "AllReady",
            format!("{} shards ready", ready.len()),
        );
        // The start instant is written to status before any shard hears it, so an operator that
        // restarts mid-release sends every shard the same instant.
        let Some(start_at) = self.st.start_at.as_ref().map(|t| t.0) else {
            let delay =
                SignedDuration::try_from(self.lt.spec.run.start_delay.get()).unwrap_or_default();
            let at = self.now.checked_add(delay).unwrap_or(self.now);
            self.st.start_at = Some(Time(at));
            self.st.message = Some(format!("all shards ready; releasing them at {at}"));
            return Ok(Action::requeue(Duration::from_millis(10)));
        };
        let start_ms = u64::try_from(start_at.as_millisecond()).unwrap_or(0);
        let mut refused = Vec::new();
        for (i, ip) in &ready {
            let client = ShardClient::new(ip, self.ctx.config.http_timeout);
            match client.start(start_ms).await {
                Ok(_) => self.set_shard(*i, ShardState::Running, None),
                Err(e) => refused.push(format!("shard {i}: {e}")),
            }
        }
        if !refused.is_empty() {
            if self.deadline_passed(start_limit) {
                return self
                    .fail(
                        "ReleaseFailed",
                        format!("shards could not be released: {}", refused.join("; ")),
                    )
                    .await;
            }
            self.st.message = Some(format!("releasing: {}", refused.join("; ")));
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
        self.condition(
            "Released",
            true,
            "StartBarrier",
            format!("all shards released at {start_at}"),
        );
        self.enter(
            Phase::Running,
            format!("{} shards released at {start_at}", ready.len()),
        );
        Ok(Action::requeue(self.ctx.config.poll))
    }

    pub(super) async fn ensure_results_config_map(&self) -> Result<()> {
        if self.world.results.is_some() {
            return Ok(());
        }
        let cm = builders::results_config_map(self.lt);
        match self
            .apis
            .config_maps
            .create(&PostParams::default(), &cm)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
