//! From a new LoadTest to released shards: the spec checked, the server started and waited
//! on, the shards started, and the start barrier.

use super::cells::cell_released;
use super::fanout;
use super::step::{CONDITION_FAILED, Step, humantime};
use crate::builders;
use crate::names::{self, MANAGER};
use crate::pods::{self, PodHealth};
use crate::results;
use crate::server_counter::ServerCounter;
use crate::text::listed;
use crate::{Error, Result};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use kube::api::{Patch, PatchParams};
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
        self.st.shards = results::shard_entries(spec);
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
        let replicas = server.replicas.max(1);
        for r in 0..replicas {
            if !self.world.servers.contains_key(&r) {
                let pod = builders::server_pod(self.lt, &server, r);
                self.apis
                    .pods
                    .patch(&names::server_replica(&test, r), &pp, &Patch::Apply(&pod))
                    .await?;
            }
        }
        let svc = builders::server_service(self.lt, &server);
        let svc = self
            .apis
            .services
            .patch(&names::server(&test), &pp, &Patch::Apply(&svc))
            .await?;
        let (start_limit, _, _) = self.timeouts();
        let mut ready = Vec::new();
        let mut waiting = Vec::new();
        for r in 0..replicas {
            let pod = names::server_replica(&test, r);
            match self.world.servers.get(&r).map(pods::health) {
                Some(PodHealth::Ready { ip }) => ready.push(ip),
                Some(PodHealth::Ended { reason }) => {
                    return self
                        .fail(
                            "ServerFailed",
                            format!("server pod {pod} ended before the test: {reason}"),
                        )
                        .await;
                }
                other => waiting.push((
                    pod,
                    other
                        .map(|h| h.describe())
                        .unwrap_or_else(|| "not created".into()),
                )),
            }
        }
        if !waiting.is_empty() {
            if self.deadline_passed(start_limit) {
                let limit = humantime(start_limit);
                let message = match waiting.as_slice() {
                    [(pod, why)] if replicas == 1 => {
                        format!("server pod {pod} not ready within {limit}: {why}")
                    }
                    _ => format!(
                        "{}/{replicas} server pods not ready within {limit}: {}",
                        waiting.len(),
                        waiting
                            .iter()
                            .map(|(pod, why)| format!("{pod}: {why}"))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                };
                return self.fail("ServerNotReady", message).await;
            }
            if replicas > 1 {
                self.st.message = Some(format!("{}/{replicas} server pods ready", ready.len()));
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        // One replica: its pod IP, which needs neither DNS nor kube-proxy. More: the Service,
        // whose kube-proxy rules spread the shards' connections over every replica.
        let host = if replicas == 1 {
            ready.first().cloned().unwrap_or_default()
        } else {
            svc.spec
                .as_ref()
                .and_then(|s| s.cluster_ip.clone())
                .filter(|ip| !ip.is_empty() && ip != "None")
                .unwrap_or_else(|| {
                    let ns = self.lt.metadata.namespace.clone().unwrap_or_default();
                    format!("{}.{ns}.svc", names::server(&test))
                })
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let url = format!("ws://{host}:{}{}", server.port, server.path);
        self.st.target_url = Some(url.clone());
        let who = if replicas == 1 {
            names::server(&test)
        } else {
            format!(
                "{replicas} server pods behind Service {}",
                names::server(&test)
            )
        };
        self.condition("ServerReady", true, "PodReady", format!("{who} at {url}"));
        self.enter(
            Phase::Starting,
            format!("server ready at {url}; starting shards"),
        );
        Ok(Action::requeue(Duration::from_millis(200)))
    }

    /// The managed server must stay up, every replica of it, while shards start and run.
    pub(super) fn server_lost(&self) -> Option<String> {
        let server = self.lt.spec.target.server.as_ref()?;
        let test = self.test();
        (0..server.replicas.max(1)).find_map(|r| {
            let pod = names::server_replica(&test, r);
            match self.world.servers.get(&r).map(pods::health) {
                None => Some(format!("server pod {pod} deleted")),
                Some(PodHealth::Ended { reason }) => {
                    Some(format!("server pod {pod} ended: {reason}"))
                }
                _ => None,
            }
        })
    }

    pub(super) async fn starting(&mut self) -> Result<Action> {
        if let Some(why) = self.server_lost() {
            return self.fail("ServerLost", why).await;
        }
        let test = self.test();
        let target_url = self.st.target_url.clone().unwrap_or_default();
        let document = builders::loadtest_document(self.lt)
            .map_err(|e| Error::serialize("the LoadTest for its shards", e))?;
        let pp = PatchParams::apply(MANAGER).force();
        let (start_limit, _, _) = self.timeouts();
        let mut waiting = Vec::new();
        let mut ready = Vec::new();
        let mut create = Vec::new();
        for i in 0..self.lt.spec.shards {
            let name = names::shard(&test, i);
            let Some(pod) = self.world.shards.get(&i) else {
                // Created once: a pod's spec is immutable, and the one made is the one to use.
                create.push((
                    name,
                    builders::shard_pod(self.lt, i, &target_url, &document),
                ));
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
        // Hundreds of pods: created side by side, not one round trip after another.
        let creates: Vec<_> = create
            .into_iter()
            .map(|(name, pod)| {
                let api = self.apis.pods.clone();
                let pp = pp.clone();
                async move { api.patch(&name, &pp, &Patch::Apply(&pod)).await.map(|_| ()) }
            })
            .collect();
        for created in fanout::bounded(creates).await {
            created?;
        }
        for (i, _) in &ready {
            // Released shards stay Running through a retry of the others' release.
            if self
                .shard(*i)
                .is_some_and(|s| s.state == ShardState::Pending)
            {
                self.set_shard(*i, ShardState::Ready, None);
            }
        }
        if !waiting.is_empty() {
            if self.deadline_passed(start_limit) {
                return self
                    .fail(
                        "ShardsNotReady",
                        format!(
                            "{} of {} shards not ready within {}: {}",
                            waiting.len(),
                            self.lt.spec.shards,
                            humantime(start_limit),
                            listed(&waiting, 10)
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
        // The start instant (and the server counter's baseline, and cell 0) is written to
        // status before any shard hears it, so an operator that restarts mid-release sends
        // every shard the same instant.
        let Some(start_ms) = self.st.start_at_millis else {
            if let Some(wait) = self.read_baseline(start_limit).await {
                return Ok(Action::requeue(wait));
            }
            let delay =
                SignedDuration::try_from(self.lt.spec.run.start_delay.get()).unwrap_or_default();
            let at = self.now.checked_add(delay).unwrap_or(self.now);
            self.st.start_at = Some(Time(at));
            self.st.start_at_millis = Some(u64::try_from(at.as_millisecond()).unwrap_or(0));
            self.st.message = Some(format!("all shards ready; releasing them at {at}"));
            return Ok(Action::requeue(Duration::from_millis(10)));
        };
        if self.st.cells.is_empty()
            && let Some(first) = wsload_control::Conductor::first(&self.lt.spec)
        {
            self.st
                .cells
                .push(cell_released(&first, start_ms, ready.len()));
        }
        // Only the shards not released yet: a retry must not wait on those already told.
        let unreleased: Vec<(u32, String)> = ready
            .iter()
            .filter(|(i, _)| {
                self.shard(*i)
                    .is_some_and(|s| s.state != ShardState::Running)
            })
            .cloned()
            .collect();
        let answers = fanout::each(
            &self.ctx.http,
            &unreleased,
            self.ctx.config.control_timeout,
            |c| async move {
                // No cell named: every shard runs the spec's first cell, the one recorded above.
                c.start(start_ms, None).await
            },
        )
        .await;
        let mut refused = Vec::new();
        for (i, answer) in answers {
            match answer {
                Ok(_) => self.set_shard(i, ShardState::Running, None),
                Err(e) => refused.push((i, e.to_string())),
            }
        }
        refused.sort();
        if !refused.is_empty() {
            let now_ms = u64::try_from(self.now.as_millisecond()).unwrap_or(0);
            if now_ms < start_ms {
                let text: Vec<String> = refused
                    .iter()
                    .map(|(i, e)| format!("shard {i}: {e}"))
                    .collect();
                self.st.message = Some(format!("releasing: {}", listed(&text, 5)));
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            // The instant passed: a shard released now would start late and skew every
            // cell. It is lost, and the test's shardFailure policy decides.
            for (i, e) in &refused {
                self.shard_failed(
                    *i,
                    ShardState::Lost,
                    format!("not released before the start instant: {e}"),
                );
            }
            let released = self.count_live();
            if released == 0 {
                return self
                    .fail("ReleaseFailed", "no shard could be released")
                    .await;
            }
            if let Some(c) = self.st.cells.first_mut() {
                c.shards = u32::try_from(released).unwrap_or(u32::MAX);
            }
        }
        let released = self.count_live();
        let start_at = self
            .st
            .start_at
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        self.condition(
            "Released",
            true,
            "StartBarrier",
            format!("{released} shards released for {start_at}"),
        );
        self.enter(
            Phase::Running,
            format!("{released} shards released for {start_at}"),
        );
        Ok(Action::requeue(self.ctx.config.poll))
    }

    /// Reads the servers' summed received counter before the first cell into
    /// `status.serverReceivedBaseline`; `Some(wait)` to try again (a replica not answering
    /// yet), until the start deadline, after which the run goes on with delivery unknown.
    async fn read_baseline(&mut self, start_limit: Duration) -> Option<Duration> {
        if self.st.server_received_baseline.is_some() {
            return None;
        }
        let counter = match ServerCounter::of(&self.lt.spec, &self.world.servers) {
            Ok(Some(c)) => c,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(loadtest = %self.test(), error = %e, "no server counter: delivery will be unknown");
                return None;
            }
        };
        match counter
            .read(&self.ctx.http, self.ctx.config.control_timeout)
            .await
        {
            Ok(n) => {
                self.st.server_received_baseline = Some(n);
                None
            }
            Err(e) if !self.deadline_passed(start_limit) => {
                self.st.message = Some(format!("reading the server counter: {e}"));
                Some(Duration::from_millis(500))
            }
            Err(e) => {
                tracing::warn!(loadtest = %self.test(), error = %e, "server counter unreadable: delivery will be unknown");
                None
            }
        }
    }
}
