//! From a new LoadTest to released shards: the spec checked, the server started and waited
//! on, the shards started, and the start barrier.

use super::cells::cell_released;
use super::fanout;
use super::reason::{ConditionType, Reason};
use super::view::{View, humantime};
use crate::builders;
use crate::names::{self, MANAGER};
use crate::pods::{self, PodHealth};
use crate::server_counter::ServerCounter;
use crate::shard_entries;
use crate::text::listed;
use crate::{Error, Result};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use std::time::Duration;
use wsload_control::server_topics;
use wsload_spec::ManagedServer;
use wsload_spec::fanout::ServerTopics;
use wsload_spec::scenario::Motion;
use wsload_spec::status::{Phase, ShardState};

/// The server's replica pods in one reconcile of Pending.
#[derive(Default)]
struct ServerPods {
    /// The pod IP of each ready replica.
    ready: Vec<String>,
    /// Each replica not ready (pod name) and what it waits for.
    waiting: Vec<(String, String)>,
}

/// The shards' pods in one reconcile of Starting.
#[derive(Default)]
struct ShardPods {
    /// Index and pod IP of each ready shard.
    ready: Vec<(u32, String)>,
    /// Pods to apply (name, pod): the shards that have none yet.
    create: Vec<(String, Pod)>,
    /// What each shard not ready waits for.
    waiting: Vec<String>,
    /// The shards among `waiting` whose pods are on no node yet (index, and the scheduler's
    /// reason when it gave one).
    unscheduled: Vec<(u32, String)>,
}

/// A server replica's pod ended before the test: the test fails with this as its message.
#[derive(Debug, thiserror::Error)]
#[error("server pod {pod} ended before the test: {reason}")]
struct ServerEnded {
    pod: String,
    /// How the pod ended, as [`PodHealth::Ended`] tells it.
    reason: String,
}

/// A shard's pod ended before the start: the test fails with this as its message.
#[derive(Debug, thiserror::Error)]
#[error("shard {index} (pod {pod}) ended before the start: {reason}")]
struct ShardEnded {
    index: u32,
    pod: String,
    /// How the pod ended, as [`PodHealth::Ended`] tells it.
    reason: String,
}

impl View<'_> {
    pub(super) async fn begin(&mut self) -> Result<Action> {
        self.st.observed_generation = self.lt.metadata.generation;
        self.st.start_time = Some(Time(self.now));
        let spec = &self.lt.spec;
        if let Err(errors) = wsload_spec::validate::validate(spec) {
            let list = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            self.mark_failed(Reason::InvalidSpec, format!("invalid LoadTest: {list}"));
            self.enter(Phase::Failed, format!("invalid LoadTest: {list}"));
            self.st.completion_time = Some(Time(self.now));
            return Ok(Action::await_change());
        }
        if self.refused_by_outdated_crd().await? || self.refused_by_pod_security().await? {
            return Ok(Action::await_change());
        }
        self.st.shards = shard_entries::pending(spec);
        self.condition(ConditionType::Failed, false, Reason::NoFailure, "");
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
        let service = self.apply_server(&server).await?;
        let replicas = server.replicas.max(1);
        let pods = match self.server_pods(replicas) {
            Ok(pods) => pods,
            Err(ended) => return self.fail(Reason::ServerFailed, ended.to_string()).await,
        };
        if !pods.waiting.is_empty() {
            return self.wait_for_server(&pods, replicas).await;
        }
        let url = self.server_url(&server, &service, &pods.ready);
        self.st.target_url = Some(url.clone());
        let test = self.test();
        let who = if replicas == 1 {
            names::server(&test)
        } else {
            format!(
                "{replicas} server pods behind Service {}",
                names::server(&test)
            )
        };
        self.condition(
            ConditionType::ServerReady,
            true,
            Reason::PodReady,
            format!("{who} at {url}"),
        );
        self.enter(
            Phase::Starting,
            format!("server ready at {url}; starting shards"),
        );
        Ok(Action::requeue(Duration::from_millis(200)))
    }

    /// Applies the server's missing replica pods and its Service; the Service as applied.
    async fn apply_server(&self, server: &ManagedServer) -> Result<Service> {
        let pp = PatchParams::apply(MANAGER).force();
        for r in 0..server.replicas.max(1) {
            if !self.world.servers.contains_key(&r) {
                self.apply_server_replica(server, r).await?;
            }
        }
        let service = builders::server_service(self.lt, server);
        Ok(self
            .apis
            .services
            .patch(&names::server(&self.test()), &pp, &Patch::Apply(&service))
            .await?)
    }

    /// Applies replica `r`'s pod: creates it when its name is free (at the start, and again
    /// after a disruption deleted it).
    pub(super) async fn apply_server_replica(&self, server: &ManagedServer, r: u32) -> Result<()> {
        let pp = PatchParams::apply(MANAGER).force();
        let pod = builders::server_pod(self.lt, server, r);
        self.apis
            .pods
            .patch(
                &names::server_replica(&self.test(), r),
                &pp,
                &Patch::Apply(&pod),
            )
            .await?;
        Ok(())
    }

    /// Each server replica's pod as the view holds it; `Err` with the cause when one ended
    /// before the test.
    fn server_pods(&self, replicas: u32) -> std::result::Result<ServerPods, ServerEnded> {
        let test = self.test();
        let mut pods = ServerPods::default();
        for r in 0..replicas {
            let pod = names::server_replica(&test, r);
            match self.world.servers.get(&r).map(pods::health) {
                Some(PodHealth::Ready { ip }) => pods.ready.push(ip),
                Some(PodHealth::Ended { reason }) => return Err(ServerEnded { pod, reason }),
                other => pods.waiting.push((
                    pod,
                    other
                        .map(|h| h.describe())
                        .unwrap_or_else(|| "not created".into()),
                )),
            }
        }
        Ok(pods)
    }

    /// Some server replicas are not ready: look again soon, or fail once the start deadline
    /// passed.
    async fn wait_for_server(&mut self, pods: &ServerPods, replicas: u32) -> Result<Action> {
        let start_limit = self.limits().start;
        if self.deadline_passed(start_limit) {
            let limit = humantime(start_limit);
            let message = match pods.waiting.as_slice() {
                [(pod, why)] if replicas == 1 => {
                    format!("server pod {pod} not ready within {limit}: {why}")
                }
                waiting => format!(
                    "{}/{replicas} server pods not ready within {limit}: {}",
                    waiting.len(),
                    waiting
                        .iter()
                        .map(|(pod, why)| format!("{pod}: {why}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            };
            return self.fail(Reason::ServerNotReady, message).await;
        }
        if replicas > 1 {
            self.st.message = Some(format!("{}/{replicas} server pods ready", pods.ready.len()));
        }
        Ok(Action::requeue(Duration::from_secs(1)))
    }

    /// The URL the shards dial. One replica: its pod IP, which needs neither DNS nor
    /// kube-proxy. More, or one a disruption deletes and creates again (under another IP):
    /// the Service, whose kube-proxy rules spread the shards' connections over every replica
    /// ready.
    fn server_url(&self, server: &ManagedServer, service: &Service, ready: &[String]) -> String {
        let disrupted = wsload_spec::reconnect::on_server(&self.lt.spec.disruptions);
        let host = if server.replicas.max(1) == 1 && !disrupted {
            ready.first().cloned().unwrap_or_default()
        } else {
            service
                .spec
                .as_ref()
                .and_then(|s| s.cluster_ip.clone())
                .filter(|ip| !ip.is_empty() && ip != "None")
                .unwrap_or_else(|| {
                    let ns = self.lt.metadata.namespace.clone().unwrap_or_default();
                    format!("{}.{ns}.svc", names::server(&self.test()))
                })
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        format!("ws://{host}:{}{}", server.port, server.path)
    }

    /// The managed server must stay up, every replica of it, while shards start and run; but
    /// for those a disruption took down (see `disrupt`).
    pub(super) fn server_lost(&self) -> Option<String> {
        let server = self.lt.spec.target.server.as_ref()?;
        let test = self.test();
        (0..server.replicas.max(1)).find_map(|r| {
            if self.disrupted(r, self.world.servers.get(&r)) {
                return None;
            }
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
            return self.fail(Reason::ServerLost, why).await;
        }
        let start_limit = self.limits().start;
        let document = builders::loadtest_document(self.lt)
            .map_err(|e| Error::serialize("the LoadTest for its shards", e))?;
        let mut pods = match self.shard_pods(&document) {
            Ok(pods) => pods,
            Err(ended) => return self.fail(Reason::ShardFailed, ended.to_string()).await,
        };
        if !pods.create.is_empty() {
            // Before any shard pod: a pod whose Secret is missing does not start.
            self.create_control_secret().await?;
        }
        self.create_shard_pods(std::mem::take(&mut pods.create))
            .await?;
        self.mark_ready(&pods.ready);
        if !pods.waiting.is_empty() {
            return self.wait_for_shards(&pods, start_limit).await;
        }
        self.condition(
            ConditionType::ShardsReady,
            true,
            Reason::AllReady,
            format!("{} shards ready", pods.ready.len()),
        );
        // The start instant (and the server counter's baseline, and cell 0) is written to
        // status before any shard hears it, so an operator that restarts mid-release sends
        // every shard the same instant.
        let Some(start_ms) = self.st.start_at_millis else {
            // Every shard's clock first: the release instants are corrected by it.
            self.probe_clocks(&pods.ready, wsload_control::clock::BURST)
                .await;
            return Ok(self.fix_start_instant(start_limit).await);
        };
        if self.st.cells.is_empty()
            && let Some(first) = wsload_control::Conductor::first(&self.lt.spec)
        {
            self.st
                .cells
                .push(cell_released(&first, start_ms, pods.ready.len()));
        }
        let refused = self.release(&pods.ready, start_ms).await;
        if !refused.is_empty()
            && let Some(action) = self.refused_release(&refused, start_ms).await?
        {
            return Ok(action);
        }
        Ok(self.enter_running())
    }

    /// Every shard's pod as the view holds it, each shard's status following its pod's
    /// health; `Err` with the cause when a shard's pod ended before the start.
    fn shard_pods(&mut self, document: &str) -> std::result::Result<ShardPods, ShardEnded> {
        let test = self.test();
        let target_url = self.st.target_url.clone().unwrap_or_default();
        let mut pods = ShardPods::default();
        for i in 0..self.lt.spec.shards {
            let name = names::shard(&test, i);
            let Some(pod) = self.world.shards.get(&i) else {
                // Created once: a pod's spec is immutable, and the one made is the one to use.
                pods.create
                    .push((name, builders::shard_pod(self.lt, i, &target_url, document)));
                pods.waiting.push(format!("shard {i}: pod created"));
                continue;
            };
            match pods::health(pod) {
                PodHealth::Ready { ip } => pods.ready.push((i, ip)),
                PodHealth::Ended { reason } => {
                    self.set_shard(i, ShardState::Failed, Some(reason.clone()));
                    return Err(ShardEnded {
                        index: i,
                        pod: name,
                        reason,
                    });
                }
                h => {
                    if matches!(h, PodHealth::Unscheduled(_)) {
                        pods.unscheduled.push((i, h.describe()));
                    }
                    self.set_shard(i, ShardState::Pending, Some(h.describe()));
                    pods.waiting
                        .push(format!("shard {i} (pod {name}): {}", h.describe()));
                }
            }
        }
        Ok(pods)
    }

    /// Creates the Secret holding the test's control token, which the shard pods mount. Create
    /// only, never read: one that exists already (an earlier reconcile's) holds the same
    /// derived token.
    async fn create_control_secret(&self) -> Result<()> {
        let secret = builders::control_secret(self.lt, &self.token());
        match self
            .apis
            .secrets
            .create(&PostParams::default(), &secret)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_already_exists() || status.code == 409 => {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Applies the missing shard pods, side by side: hundreds of pods must not take one round
    /// trip after another.
    async fn create_shard_pods(&self, create: Vec<(String, Pod)>) -> Result<()> {
        let pp = PatchParams::apply(MANAGER).force();
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
        Ok(())
    }

    /// Shards whose pods are ready and that wait for their release become Ready.
    fn mark_ready(&mut self, ready: &[(u32, String)]) {
        for (i, _) in ready {
            // Released shards stay Running through a retry of the others' release.
            if self
                .shard(*i)
                .is_some_and(|s| s.state == ShardState::Pending)
            {
                self.set_shard(*i, ShardState::Ready, None);
            }
        }
    }

    /// Some shards are not ready: look again soon, or fail. Shards on no node fail the test
    /// once the scheduling deadline passed, as `ShardsUnschedulable` with the scheduler's
    /// reason (more shards one per node than nodes, a selector no node matches, a taint not
    /// tolerated): waiting out the ready deadline too would not place them. Scheduled shards
    /// not ready fail it once the whole start deadline passed.
    async fn wait_for_shards(&mut self, pods: &ShardPods, start_limit: Duration) -> Result<Action> {
        let shards = self.lt.spec.shards;
        let scheduling = self.lt.spec.run.deadlines.scheduling.get();
        if !pods.unscheduled.is_empty() && self.deadline_passed(scheduling) {
            return self
                .fail(
                    Reason::ShardsUnschedulable,
                    format!(
                        "{} of {shards} shards not scheduled within {}: {}",
                        pods.unscheduled.len(),
                        humantime(scheduling),
                        by_reason(&pods.unscheduled)
                    ),
                )
                .await;
        }
        if self.deadline_passed(start_limit) {
            return self
                .fail(
                    Reason::ShardsNotReady,
                    format!(
                        "{} of {shards} shards not ready within {}: {}",
                        pods.waiting.len(),
                        humantime(start_limit),
                        listed(&pods.waiting, 10)
                    ),
                )
                .await;
        }
        let mut message = format!("{}/{shards} shards ready", pods.ready.len());
        // Said before the deadline: a user watching `kubectl get lt` sees why at once.
        if !pods.unscheduled.is_empty() {
            message.push_str(&format!(
                "; {} not scheduled: {}",
                pods.unscheduled.len(),
                by_reason(&pods.unscheduled)
            ));
        }
        self.st.message = Some(message);
        Ok(Action::requeue(Duration::from_secs(1)))
    }

    /// Every shard ready and no instant yet: the servers' baseline read, then the start
    /// instant chosen and recorded; the release follows in the next reconcile.
    async fn fix_start_instant(&mut self, start_limit: Duration) -> Action {
        if let Some(wait) = self.read_baseline(start_limit).await {
            return Action::requeue(wait);
        }
        let delay =
            SignedDuration::try_from(self.lt.spec.run.start_delay.get()).unwrap_or_default();
        // From now, not from the reconcile's start: the clock probes before it may have taken
        // a control timeout (a shard that does not answer), and the shards must hear the
        // instant before it passes.
        let now = Timestamp::now();
        let at = now.checked_add(delay).unwrap_or(now);
        self.st.start_at = Some(Time(at));
        self.st.start_at_millis = Some(u64::try_from(at.as_millisecond()).unwrap_or(0));
        self.st.message = Some(format!("all shards ready; releasing them at {at}"));
        Action::requeue(Duration::from_millis(10))
    }

    /// Tells every ready shard not released yet to start at `start_ms` (a retry must not wait
    /// on those already told); the shards that refused or did not answer, with why, by index.
    async fn release(
        &mut self,
        ready: &[(u32, String)],
        start_ms: u64,
    ) -> Vec<(u32, wsload_control::Error)> {
        let unreleased: Vec<(u32, String)> = ready
            .iter()
            .filter(|(i, _)| {
                self.shard(*i)
                    .is_some_and(|s| s.state != ShardState::Running)
            })
            .cloned()
            .collect();
        // Each shard its instant on its own clock: all begin at `start_ms` on the operator's.
        let releases = self.releases(&unreleased, start_ms);
        let answers = self
            .order_shards(&unreleased, |i, c| {
                let at = releases.of(i);
                // No cell named: every shard runs the spec's first cell, the one recorded
                // above.
                async move { c.start(at, None).await }
            })
            .await;
        let mut refused = Vec::new();
        for (i, answer) in answers {
            match answer {
                Ok(_) => self.set_shard(i, ShardState::Running, None),
                Err(e) => refused.push((i, e)),
            }
        }
        // Each shard answers once: its index alone orders them.
        refused.sort_by_key(|(i, _)| *i);
        refused
    }

    /// Some shards were not released: before the instant, try again soon; after it, they are
    /// lost. `Some` when the reconcile ends here.
    async fn refused_release(
        &mut self,
        refused: &[(u32, wsload_control::Error)],
        start_ms: u64,
    ) -> Result<Option<Action>> {
        let now_ms = u64::try_from(self.now.as_millisecond()).unwrap_or(0);
        if now_ms < start_ms {
            let text: Vec<String> = refused
                .iter()
                .map(|(i, e)| format!("shard {i}: {e}"))
                .collect();
            self.st.message = Some(format!("releasing: {}", listed(&text, 5)));
            return Ok(Some(Action::requeue(Duration::from_millis(200))));
        }
        // The instant passed: a shard released now would start late and skew every
        // cell. It is lost, and the test's shardFailure policy decides.
        for (i, e) in refused {
            self.shard_failed(
                *i,
                ShardState::Lost,
                format!("not released before the start instant: {e}"),
            );
        }
        let released = self.count_live();
        if released == 0 {
            return self
                .fail(Reason::ReleaseFailed, "no shard could be released")
                .await
                .map(Some);
        }
        if let Some(c) = self.st.cells.first_mut() {
            c.shards = u32::try_from(released).unwrap_or(u32::MAX);
        }
        Ok(None)
    }

    fn enter_running(&mut self) -> Action {
        let released = self.count_live();
        let start_at = self
            .st
            .start_at
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        self.condition(
            ConditionType::Released,
            true,
            Reason::StartBarrier,
            format!("{released} shards released for {start_at}"),
        );
        self.enter(
            Phase::Running,
            format!("{released} shards released for {start_at}"),
        );
        Action::requeue(self.ctx.config.poll)
    }

    /// A fanout's topic counters at `counter`'s replicas, summed; `None` when not a fanout, or
    /// unreadable (each cell's `serverTopics` is then unknown: a note in the log, no retry,
    /// as the received counter just answered).
    pub(super) async fn read_topics(&self, counter: &ServerCounter) -> Option<ServerTopics> {
        if self.lt.spec.scenario.profile().motion != Motion::Fanout {
            return None;
        }
        match server_topics::read(
            &self.ctx.http,
            &counter.urls,
            self.ctx.config.control_timeout,
        )
        .await
        {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "server topic counters unreadable");
                None
            }
        }
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
                tracing::warn!(error = %e, "no server counter: delivery will be unknown");
                return None;
            }
        };
        match counter
            .read(&self.ctx.http, self.ctx.config.control_timeout)
            .await
        {
            Ok(n) => {
                self.st.server_received_baseline = Some(n);
                self.st.server_topics_baseline = self.read_topics(&counter).await;
                self.read_connections_baseline(&counter).await;
                None
            }
            Err(e) if !self.deadline_passed(start_limit) => {
                self.st.message = Some(format!("reading the server counter: {e}"));
                Some(Duration::from_millis(500))
            }
            Err(e) => {
                tracing::warn!(error = %e, "server counter unreadable: delivery will be unknown");
                None
            }
        }
    }
}

/// Shards grouped by why they wait, one group per reason in order of the first shard of each:
/// `shards 2, 3: unschedulable: 0/4 nodes are available: ...`. Shards of one test are
/// usually held back by one scheduler message, which a per-shard list would repeat; and the
/// message itself holds commas, so groups are separated by `; `. At most [`REASONS_SHOWN`]
/// groups: status and the Event stay small whatever the shards wait for.
fn by_reason(shards: &[(u32, String)]) -> String {
    let mut groups: Vec<(Vec<u32>, &str)> = Vec::new();
    for (i, why) in shards {
        match groups.iter_mut().find(|(_, w)| w == why) {
            Some((indices, _)) => indices.push(*i),
            None => groups.push((vec![*i], why)),
        }
    }
    let mut text = groups
        .iter()
        .take(REASONS_SHOWN)
        .map(|(indices, why)| {
            let which = if let [one] = indices.as_slice() {
                format!("shard {one}")
            } else {
                format!("shards {}", listed(indices, 10))
            };
            format!("{which}: {why}")
        })
        .collect::<Vec<_>>()
        .join("; ");
    if groups.len() > REASONS_SHOWN {
        let more: usize = groups[REASONS_SHOWN..].iter().map(|(i, _)| i.len()).sum();
        text.push_str(&format!("; {more} more shards for other reasons"));
    }
    text
}

/// How many distinct reasons [`by_reason`] spells out.
const REASONS_SHOWN: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_ended_before_the_test_is_named_with_how_it_ended() {
        let server = ServerEnded {
            pod: "t-server".into(),
            reason: "container server OOMKilled (exit code 137)".into(),
        };
        assert_eq!(
            server.to_string(),
            "server pod t-server ended before the test: container server OOMKilled (exit code 137)"
        );
        let shard = ShardEnded {
            index: 1,
            pod: "t-shard-1".into(),
            reason: "container loadgen Error (exit code 2)".into(),
        };
        assert_eq!(
            shard.to_string(),
            "shard 1 (pod t-shard-1) ended before the start: container loadgen Error (exit code 2)"
        );
    }

    #[test]
    fn shards_are_grouped_by_reason_and_the_reasons_bounded() {
        let why = |i: u32, w: &str| (i, w.to_string());
        assert_eq!(
            by_reason(&[why(2, "a, b"), why(3, "c"), why(4, "a, b")]),
            "shards 2, 4: a, b; shard 3: c"
        );
        let many: Vec<(u32, String)> = (0..6).map(|i| why(i, &format!("r{}", i % 5))).collect();
        assert_eq!(
            by_reason(&many),
            "shards 0, 5: r0; shard 1: r1; shard 2: r2; 2 more shards for other reasons"
        );
    }
}
