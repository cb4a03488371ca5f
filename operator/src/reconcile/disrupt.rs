//! `spec.disruptions` that act on the managed server's pods. At each one's offset from a
//! cell's measured phase (`measureAtMillis` plus the warm-up: whenever the server is disrupted
//! the shards wait for that instant, a lone shard too), a kill deletes the pods of the first
//! `replicas` ready replicas at once with no grace period (the API object goes at once, the
//! endpoints with it; the kubelet stops the container as it stops any, so the server may
//! still close what it holds) and, `restartAfter` later, creates them again; a rolling
//! restart deletes one replica's pod as a deploy does (its grace period: wsload-server closes
//! its connections with 1001 and drains), creates it again, waits for it ready and `pause`,
//! then the next. Each step is in the cell's status (`disruptions`) before its pods are
//! deleted, so an operator restarted later carries on from there and never deletes a replica
//! twice. Replicas a disruption holds down are not lost (`server_lost`); once the cell is done
//! every replica is created again, and the next cell is released only once all are ready
//! (`server_down`).

use super::cells::replay;
use super::view::{View, humantime};
use crate::Result;
use crate::names;
use crate::pods::{self, PodHealth};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::DeleteParams;
use std::collections::BTreeSet;
use std::time::Duration;
use wsload_spec::reconnect::{Disruption, on_server};
use wsload_spec::status::{DisruptionStatus, MAX_MEASURE_CELLS};

/// How soon to look again while a deleted replica's pod goes or its new one starts.
const LOOK: Duration = Duration::from_millis(250);

/// The replicas a done cell's disruption keeps listed in status: a kill of hundreds would
/// otherwise list them all in every cell.
const MAX_KEPT_REPLICAS: usize = 16;

impl View<'_> {
    /// Runs the server disruptions of the cell under way that are due, carries on those
    /// begun, and once the cell is done creates again every replica they left down. How soon
    /// to look again; `None` when nothing is due.
    pub(super) async fn disrupt(&mut self) -> Result<Option<Duration>> {
        let spec = &self.lt.spec;
        // The managed server's kills and restarts, and the user's Deployment rolled.
        if !on_server(&spec.disruptions) {
            return Ok(None);
        }
        let Some(cell) = self.st.cells.last() else {
            return Ok(None);
        };
        if cell.done {
            self.watch_replicas(None);
            // A Deployment still rolling is waited for: the next cell must not measure it.
            if let Some(soon) = self.rolls_left().await? {
                return Ok(Some(soon));
            }
            self.cut_short();
            // After the last cell nothing is measured: its replicas stay as they are.
            if replay(spec, &self.st.cells).next.is_none() {
                return Ok(None);
            }
            return self.restore().await;
        }
        // The measured phase begins the warm-up after the measure instant: `at` counts from
        // there, as the shards' reconnect windows do.
        let measured_from = cell
            .measure_at_millis
            .map(|m| m.saturating_add(millis(spec.warmup.get())));
        self.watch_replicas(measured_from);
        let Some(measure_at) = measured_from else {
            return Ok(None);
        };
        let now = clock_millis();
        let mut soon: Option<Duration> = None;
        let disruptions = spec.disruptions.clone();
        for (i, d) in disruptions.iter().enumerate() {
            if d.kill.is_none() && d.restart.is_none() {
                continue;
            }
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            let at = measure_at.saturating_add(millis(d.at.get()));
            let next = match self.entry(index).cloned() {
                None if now < at => Some(Duration::from_millis(at - now)),
                None => {
                    match d.restart.as_ref().and_then(|r| r.deployment.clone()) {
                        Some(name) => self.begin_roll(index, &name, at, now - at).await?,
                        None => self.begin_disruption(index, d, now - at).await?,
                    }
                    Some(LOOK)
                }
                Some(e) if e.ended_at_millis.is_none() => self.carry_on(e, d, now).await?,
                Some(_) => None,
            };
            soon = match (soon, next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(soon)
    }

    /// Whether replica `r`'s state is a disruption's doing, not a loss: its pod gone, or one
    /// a disruption of the last cell deleted, while that disruption is under way (or its cell
    /// done and the replica not yet created again). A pod created again that fails is lost,
    /// as is a replica a finished disruption left.
    pub(super) fn disrupted(&self, r: u32, pod: Option<&Pod>) -> bool {
        let Some(cell) = self.st.cells.last() else {
            return false;
        };
        let holding = cell
            .disruptions
            .iter()
            .filter(|e| e.ended_at_millis.is_none() || cell.done)
            .any(|e| e.replicas.contains(&r));
        holding
            && pod.is_none_or(|p| {
                p.metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| cell.disruptions.iter().any(|e| e.deleted_pods.contains(u)))
            })
    }

    /// Whether a replica of the managed server is not ready, or is still a pod a disruption
    /// deleted: the next cell waits for it.
    pub(super) fn server_down(&self) -> bool {
        if self.rolling() {
            return true;
        }
        let Some(server) = &self.lt.spec.target.server else {
            return false;
        };
        if !on_server(&self.lt.spec.disruptions) {
            return false;
        }
        let deleted = self.deleted_pods();
        (0..server.replicas.max(1)).any(|r| !self.back(r, &deleted))
    }

    fn entry(&self, index: u32) -> Option<&DisruptionStatus> {
        self.st
            .cells
            .last()?
            .disruptions
            .iter()
            .find(|e| e.index == index)
    }

    pub(super) fn entry_mut(&mut self, index: u32) -> Option<&mut DisruptionStatus> {
        self.st
            .cells
            .last_mut()?
            .disruptions
            .iter_mut()
            .find(|e| e.index == index)
    }

    /// The UIDs of every pod the last cell's disruptions deleted.
    fn deleted_pods(&self) -> BTreeSet<String> {
        self.st
            .cells
            .last()
            .map(|c| {
                c.disruptions
                    .iter()
                    .flat_map(|e| e.deleted_pods.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether replica `r` is up: a ready pod that is none of those deleted.
    fn back(&self, r: u32, deleted: &BTreeSet<String>) -> bool {
        self.world.servers.get(&r).is_some_and(|pod| {
            matches!(pods::health(pod), PodHealth::Ready { .. })
                && pod
                    .metadata
                    .uid
                    .as_ref()
                    .is_none_or(|u| !deleted.contains(u))
        })
    }

    /// Begins disruption `index`, `late` milliseconds after its instant.
    async fn begin_disruption(&mut self, index: u32, d: &Disruption, late: u64) -> Result<()> {
        let mut entry = DisruptionStatus {
            index,
            began_at_millis: clock_millis(),
            ..Default::default()
        };
        let deleted = self.deleted_pods();
        let (chosen, grace): (Vec<(u32, Pod)>, _) = if let Some(kill) = &d.kill {
            // Ready, and none a disruption deleted (the cache may still show one).
            let ready = self
                .world
                .servers
                .iter()
                .filter(|(r, _)| self.back(**r, &deleted))
                .take(kill.replicas as usize)
                .map(|(r, p)| (*r, p.clone()))
                .collect();
            (ready, Some(0))
        } else {
            let first = self.world.servers.get(&0).cloned();
            (first.into_iter().map(|p| (0, p)).collect(), None)
        };
        entry.replicas = if d.restart.is_some() {
            vec![0]
        } else {
            chosen.iter().map(|(r, _)| *r).collect()
        };
        entry.deleted_pods = chosen
            .iter()
            .filter_map(|(_, p)| p.metadata.uid.clone())
            .collect();
        entry.message = if d.kill.is_some() {
            format!(
                "replicas {:?} deleted with no grace period {late} ms after the instant",
                entry.replicas
            )
        } else {
            format!("rolling restart began {late} ms after the instant")
        };
        tracing::info!(disruption = index, replicas = ?entry.replicas, late_ms = late, "disruption began");
        // In status before any pod goes: whatever fails below, the next reconcile knows
        // these replicas are this disruption's and deletes none of them again.
        if let Some(c) = self.st.cells.last_mut() {
            c.disruptions.push(entry);
        }
        // All deleted before any is waited for, as a crash of several takes them at once.
        for (r, pod) in &chosen {
            self.delete_replica(*r, pod, grace).await?;
        }
        Ok(())
    }

    /// The next step of a disruption under way; how soon to look again.
    async fn carry_on(
        &mut self,
        e: DisruptionStatus,
        d: &Disruption,
        now: u64,
    ) -> Result<Option<Duration>> {
        if let Some(name) = d.restart.as_ref().and_then(|r| r.deployment.clone()) {
            return self.carry_on_roll(e, &name, now).await;
        }
        let deleted: BTreeSet<String> = e.deleted_pods.iter().cloned().collect();
        if let Some(kill) = &d.kill {
            // Without `restartAfter` the replicas stay down for the rest of the cell.
            let Some(after) = kill.restart_after else {
                return Ok(None);
            };
            let due = e.began_at_millis.saturating_add(millis(after.get()));
            if now < due {
                return Ok(Some(Duration::from_millis(due - now)));
            }
            if !self.recreate(&e.replicas, &deleted).await? {
                return Ok(Some(LOOK));
            }
            if let Some(entry) = self.entry_mut(e.index) {
                entry.ended_at_millis = Some(now);
                entry.deleted_pods.clear();
                entry.message.push_str(&format!(
                    "; created again and ready {} after",
                    humantime(Duration::from_millis(now.saturating_sub(e.began_at_millis)))
                ));
            }
            return Ok(None);
        }
        let Some(restart) = &d.restart else {
            return Ok(None);
        };
        let replicas = self
            .lt
            .spec
            .target
            .server
            .as_ref()
            .map_or(1, |s| s.replicas.max(1));
        let r = e.replicas.last().copied().unwrap_or(0);
        if !self.recreate(&[r], &deleted).await? {
            return Ok(Some(LOOK));
        }
        let ready_at = e.ready_at_millis.unwrap_or(now);
        if r + 1 >= replicas {
            if let Some(entry) = self.entry_mut(e.index) {
                entry.ready_at_millis = Some(ready_at);
                entry.ended_at_millis = Some(now);
                entry.deleted_pods.clear();
                entry.message = format!(
                    "rolling restart of {replicas} replicas done in {}",
                    humantime(Duration::from_millis(now.saturating_sub(e.began_at_millis)))
                );
            }
            tracing::info!(disruption = e.index, "disruption: rolling restart done");
            return Ok(None);
        }
        let resume = ready_at.saturating_add(restart.pause.map_or(0, |p| millis(p.get())));
        if now < resume {
            if let Some(entry) = self.entry_mut(e.index) {
                entry.ready_at_millis = Some(ready_at);
            }
            return Ok(Some(Duration::from_millis(resume - now)));
        }
        let next = r + 1;
        let pod = self.world.servers.get(&next).cloned();
        if let Some(entry) = self.entry_mut(e.index) {
            entry.replicas = vec![next];
            // The replicas restarted before are back: their pods are theirs again.
            entry.deleted_pods = pod.iter().filter_map(|p| p.metadata.uid.clone()).collect();
            entry.ready_at_millis = None;
        }
        if let Some(pod) = &pod {
            self.delete_replica(next, pod, None).await?;
        }
        Ok(Some(LOOK))
    }

    /// The cell ended with a disruption still under way: said, and nothing more of it runs
    /// (its replicas are created again before the next cell).
    fn cut_short(&mut self) {
        let spec = &self.lt.spec;
        let Some(cell) = self.st.cells.last_mut() else {
            return;
        };
        for e in cell
            .disruptions
            .iter_mut()
            .filter(|e| e.ended_at_millis.is_none())
        {
            // A kill without `restartAfter` was meant to last the cell.
            let for_good = spec
                .disruptions
                .get(e.index as usize)
                .and_then(|d| d.kill.as_ref())
                .is_some_and(|k| k.restart_after.is_none());
            let note = if for_good {
                "; down for the rest of the cell"
            } else {
                "; the cell ended first"
            };
            if !e.message.ends_with(note) {
                e.message.push_str(note);
            }
        }
    }

    /// Every replica created again and ready after the last cell's disruptions: how soon to
    /// look again while one is not.
    async fn restore(&mut self) -> Result<Option<Duration>> {
        let Some(server) = &self.lt.spec.target.server else {
            return Ok(None);
        };
        let all: Vec<u32> = (0..server.replicas.max(1)).collect();
        let deleted = self.deleted_pods();
        Ok((!self.recreate(&all, &deleted).await?).then_some(LOOK))
    }

    /// Forgets the deleted pods of every cell before the one released now, all but the first
    /// [`MAX_KEPT_REPLICAS`] replicas of each disruption there (its message names them), and
    /// the disruptions of cells past the first [`MAX_MEASURE_CELLS`]: status stays bounded.
    pub(super) fn forget_disruptions(&mut self) {
        self.cut_short();
        for c in &mut self.st.cells {
            for e in &mut c.disruptions {
                e.replicas.truncate(MAX_KEPT_REPLICAS);
            }
            if usize::try_from(c.index).unwrap_or(usize::MAX) >= MAX_MEASURE_CELLS {
                c.disruptions.clear();
            }
            for e in &mut c.disruptions {
                e.deleted_pods.clear();
            }
        }
    }

    /// Creates again each of `replicas` whose pod is gone; whether all are back (ready, and
    /// none of the `deleted` pods).
    async fn recreate(&self, replicas: &[u32], deleted: &BTreeSet<String>) -> Result<bool> {
        let Some(server) = &self.lt.spec.target.server else {
            return Ok(true);
        };
        let mut all = true;
        for &r in replicas {
            if self.back(r, deleted) {
                continue;
            }
            all = false;
            // Gone from the cache: its name is free (a pod still terminating keeps it).
            if !self.world.servers.contains_key(&r) {
                self.apply_server_replica(server, r).await?;
                tracing::info!(replica = r, "disruption: server replica created again");
            }
        }
        Ok(all)
    }

    /// Deletes replica `r`'s pod, with `grace` seconds (`None`: the pod's own period).
    async fn delete_replica(&self, r: u32, pod: &Pod, grace: Option<u32>) -> Result<()> {
        let name = names::server_replica(&self.test(), r);
        let dp = DeleteParams {
            grace_period_seconds: grace,
            // This pod and no later one of the same name.
            preconditions: pod
                .metadata
                .uid
                .clone()
                .map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
            ..Default::default()
        };
        match self.apis.pods.delete(&name, &dp).await {
            Ok(_) => Ok(()),
            // Gone already, or already another: nothing of this one to delete.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The operator's clock now, Unix milliseconds: a reconcile's own instant (`View::now`) was
/// read before it polled the shards, which takes a while.
pub(super) fn clock_millis() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
