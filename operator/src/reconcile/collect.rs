//! After the load: every shard's result stored before the shard may exit, the merge judged
//! into status, cleanup and the TTL.

use super::cells;
use super::step::{Step, humantime};
use crate::Result;
use crate::names::SHARD_PORT;
use crate::names::{self};
use crate::pods::{self};
use crate::results;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use std::time::Duration;
use wsload_control::client::ShardClient;
use wsload_spec::Cleanup;
use wsload_spec::status::{Phase, ShardState};

impl Step<'_> {
    pub(super) async fn collecting(&mut self) -> Result<Action> {
        let test = self.test();
        let (_, _, collect_limit) = self.timeouts();
        let stored: Vec<String> = self
            .world
            .results
            .as_ref()
            .and_then(|cm| cm.data.as_ref())
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default();
        let done: Vec<u32> = self
            .st
            .shards
            .iter()
            .filter(|s| s.state == ShardState::Done)
            .map(|s| s.index)
            .collect();
        for i in done {
            let key = names::result_key(i);
            let ip = self.world.shards.get(&i).and_then(pods::ip);
            if !stored.contains(&key) {
                let Some(ip) = ip.clone() else {
                    self.shard_failed(
                        i,
                        ShardState::Lost,
                        "pod gone before its result was collected".into(),
                    );
                    continue;
                };
                match ShardClient::new(&ip, SHARD_PORT, self.ctx.config.http_timeout)
                    .result()
                    .await
                {
                    Ok(Some(json)) => self.store(&key, json).await?,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(loadtest = %test, shard = i, error = %e, "cannot fetch result");
                        continue;
                    }
                }
            }
            // Stored: the shard may go. A shard that is already gone needs no word.
            if let Some(ip) = ip
                && let Err(e) = ShardClient::new(&ip, SHARD_PORT, self.ctx.config.http_timeout)
                    .finish()
                    .await
            {
                tracing::debug!(loadtest = %test, shard = i, error = %e, "finish not delivered");
            }
            self.set_shard(i, ShardState::Collected, None);
        }
        let pending: Vec<u32> = self
            .st
            .shards
            .iter()
            .filter(|s| s.state == ShardState::Done)
            .map(|s| s.index)
            .collect();
        if !pending.is_empty() {
            if !self.deadline_passed(collect_limit) {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            for i in &pending {
                self.shard_failed(
                    *i,
                    ShardState::Lost,
                    format!("result not collected within {}", humantime(collect_limit)),
                );
            }
        }
        self.conclude().await
    }

    /// Merges every stored result, judges the thresholds and ends the test.
    pub(super) async fn conclude(&mut self) -> Result<Action> {
        let test = self.test();
        let cm = self
            .apis
            .config_maps
            .get_opt(&names::results(&test))
            .await?;
        let data = cm.and_then(|c| c.data).unwrap_or_default();
        let shard_results: Vec<(u32, &String)> = self
            .st
            .shards
            .iter()
            .filter_map(|s| data.get(&names::result_key(s.index)).map(|d| (s.index, d)))
            .collect();
        self.st.results_config_map = Some(names::results(&test));
        if shard_results.is_empty() {
            return self.fail("NoResults", "no shard delivered a result").await;
        }
        // The received counts and connectionLimit's probes are the conductor's: what the
        // cells recorded, replayed.
        let received = cells::received_per_cell(&self.st.cells);
        let conductor = cells::replay(&self.lt.spec, &self.st.cells).conductor;
        match results::summarize(&self.lt.spec, &shard_results, &received, &conductor) {
            Ok(summary) => {
                self.store(names::MERGED_KEY, summary.merged_json.clone())
                    .await?;
                summary.apply(self.st);
                let pass = self.st.verdict == Some(wsload_spec::status::Verdict::Pass);
                let verdict_message = summary.verdict_message.clone();
                self.condition(
                    "ThresholdsPassed",
                    pass,
                    if pass { "Pass" } else { "Fail" },
                    verdict_message,
                );
            }
            Err(e) => {
                self.mark_failed(
                    "MergeFailed",
                    format!("shard results cannot be merged: {e}"),
                );
            }
        }
        self.st.completion_time = Some(Time(self.now));
        if self.failing() {
            let m = self.failure_message();
            // The figures cover only what survived, so thresholds that held over them prove
            // nothing about the load asked for: a CI gate reading `verdict` must not pass.
            if self.st.verdict == Some(wsload_spec::status::Verdict::Pass) {
                self.st.verdict = Some(wsload_spec::status::Verdict::Fail);
                self.condition(
                    "ThresholdsPassed",
                    false,
                    "Incomplete",
                    format!("the thresholds held over what was measured, but the test failed: {m}"),
                );
            }
            self.enter(Phase::Failed, m);
        } else {
            let verdict = self.st.verdict.map_or("none", |v| match v {
                wsload_spec::status::Verdict::Pass => "Pass",
                wsload_spec::status::Verdict::Fail => "Fail",
            });
            let rate = self.st.achieved_rate.clone().unwrap_or_default();
            self.enter(Phase::Succeeded, format!("verdict {verdict}; {rate}"));
        }
        self.finished().await
    }

    pub(super) async fn finished(&mut self) -> Result<Action> {
        let spec = &self.lt.spec;
        if spec.run.cleanup == Cleanup::Delete {
            self.cleanup().await?;
        }
        if let (Some(ttl), Some(done)) = (
            spec.run.ttl_after_finished,
            self.st.completion_time.as_ref(),
        ) {
            let ttl = SignedDuration::try_from(ttl.get()).unwrap_or(SignedDuration::MAX);
            let left = ttl - self.now.duration_since(done.0);
            if left <= SignedDuration::ZERO {
                tracing::info!(loadtest = %self.test(), "ttlAfterFinished passed; deleting the LoadTest");
                self.apis
                    .lts
                    .delete(&self.test(), &DeleteParams::background())
                    .await?;
                return Ok(Action::await_change());
            }
            let left = Duration::try_from(left).unwrap_or(Duration::from_secs(60));
            return Ok(Action::requeue(left));
        }
        Ok(Action::await_change())
    }

    /// Deletes the pods (and the server's Service) once nothing more is needed from them;
    /// the results ConfigMap stays with the LoadTest.
    pub(super) async fn cleanup(&self) -> Result<()> {
        let test = self.test();
        let pods: Vec<String> = self
            .world
            .shards
            .values()
            .chain(self.world.servers.values())
            .map(ResourceExt::name_any)
            .collect();
        for name in pods {
            match self.apis.pods.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        if self.lt.spec.target.server.is_some() {
            match self
                .apis
                .services
                .delete(&names::server(&test), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Adds one key to the results ConfigMap; a merge patch leaves the other shards' keys alone.
    async fn store(&self, key: &str, value: String) -> Result<()> {
        let patch = serde_json::json!({ "data": { key: value } });
        self.apis
            .config_maps
            .patch(
                &names::results(&self.test()),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }
}
