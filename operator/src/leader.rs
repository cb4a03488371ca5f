//! Leader election on a coordination.k8s.io Lease, so two replicas never reconcile the same
//! LoadTest (two operators would release shards twice and race on status).
//!
//! The lease is taken when it is free, expired or already ours; every write carries the
//! resourceVersion it read, so two candidates cannot both win: the loser gets a conflict and
//! reads again. A leader that cannot renew before its lease expires stops (the process exits
//! and its Deployment restarts it as a candidate), rather than risk acting beside a new leader.

use crate::{Error, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity: its pod name.
    pub identity: String,
    pub lease_duration: Duration,
    pub retry_every: Duration,
}

impl LeaderConfig {
    pub fn new(namespace: String, identity: String) -> Self {
        LeaderConfig {
            namespace,
            name: "wsload-operator".to_string(),
            identity,
            lease_duration: Duration::from_secs(15),
            retry_every: Duration::from_secs(2),
        }
    }

    fn renew_every(&self) -> Duration {
        self.lease_duration / 3
    }
}

/// Outcome of one attempt.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Held,
    HeldByOther(Holder),
}

/// Who holds the lease when this replica does not. A lost race tells only that someone
/// wrote first, not who: the lease is read again at the next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// The identity the lease names.
    Named(String),
    /// Another candidate created the lease between our read and our create.
    JustCreated,
    /// Another writer changed the lease between our read and our replace.
    ChangedConcurrently,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Named(identity) => f.pad(identity),
            Holder::JustCreated => f.pad("(just created by another)"),
            Holder::ChangedConcurrently => f.pad("(changed concurrently)"),
        }
    }
}

/// Why a leader stopped holding its lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaseLost {
    #[error("lease {lease} taken by {holder}")]
    Taken { lease: String, holder: Holder },
    /// Renewals failed for a whole lease duration: another replica may be leader by now.
    #[error("lease {lease} not renewed for {within:?}: {source}")]
    NotRenewed {
        lease: String,
        within: Duration,
        /// The last renewal's failure.
        #[source]
        source: Box<Error>,
    },
}

/// Waits until this replica holds the lease.
pub async fn acquire(api: &Api<Lease>, cfg: &LeaderConfig) -> Result<()> {
    let mut last_holder = None;
    loop {
        match try_take(api, cfg).await {
            Ok(Attempt::Held) => {
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became leader");
                return Ok(());
            }
            Ok(Attempt::HeldByOther(holder)) => {
                if last_holder.as_ref() != Some(&holder) {
                    tracing::info!(lease = %cfg.name, %holder, "waiting for the leader lease");
                    last_holder = Some(holder);
                }
            }
            Err(e) => tracing::warn!(error = %e, "leader lease attempt failed"),
        }
        tokio::time::sleep(cfg.retry_every).await;
    }
}

/// Renews the lease until it cannot: returns an error once it was lost or could not be renewed
/// within its duration.
pub async fn hold(api: &Api<Lease>, cfg: &LeaderConfig) -> Error {
    let mut last_renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(cfg.renew_every()).await;
        match try_take(api, cfg).await {
            Ok(Attempt::Held) => last_renewed = tokio::time::Instant::now(),
            Ok(Attempt::HeldByOther(holder)) => {
                return LeaseLost::Taken {
                    lease: cfg.name.clone(),
                    holder,
                }
                .into();
            }
            Err(e) => {
                tracing::warn!(error = %e, "leader lease renewal failed");
                if last_renewed.elapsed() >= cfg.lease_duration {
                    return LeaseLost::NotRenewed {
                        lease: cfg.name.clone(),
                        within: cfg.lease_duration,
                        source: Box::new(e),
                    }
                    .into();
                }
            }
        }
    }
}

/// Gives the lease up (on shutdown), so a successor need not wait for it to expire.
pub async fn release(api: &Api<Lease>, cfg: &LeaderConfig) -> Result<()> {
    let mut lease = api.get(&cfg.name).await?;
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() == Some(cfg.identity.as_str()) {
        spec.holder_identity = None;
        spec.renew_time = None;
        api.replace(&cfg.name, &PostParams::default(), &lease)
            .await?;
    }
    Ok(())
}

async fn try_take(api: &Api<Lease>, cfg: &LeaderConfig) -> Result<Attempt> {
    let now = Timestamp::now();
    let secs = i32::try_from(cfg.lease_duration.as_secs()).unwrap_or(i32::MAX);
    match api.get_opt(&cfg.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(cfg.identity.clone()),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_duration_seconds: Some(secs),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Held),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Ok(Attempt::HeldByOther(Holder::JustCreated))
                }
                Err(e) => Err(e.into()),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let ours = holder == cfg.identity;
            if !ours && !holder.is_empty() && !expired(spec, now) {
                return Ok(Attempt::HeldByOther(Holder::Named(holder)));
            }
            if !ours {
                spec.holder_identity = Some(cfg.identity.clone());
                spec.acquire_time = Some(MicroTime(now));
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.renew_time = Some(MicroTime(now));
            spec.lease_duration_seconds = Some(secs);
            // replace carries the resourceVersion we read: a concurrent writer makes this fail.
            match api.replace(&cfg.name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Held),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Ok(Attempt::HeldByOther(Holder::ChangedConcurrently))
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(renewed) = spec.renew_time.as_ref().map(|t| t.0) else {
        return true;
    };
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    now.as_second() - renewed.as_second() > secs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_after_its_duration_and_never_without_renew_time() {
        let now = Timestamp::now();
        let mut spec = LeaseSpec {
            holder_identity: Some("a".into()),
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(15),
            ..Default::default()
        };
        assert!(!expired(&spec, now));
        let later = Timestamp::from_second(now.as_second() + 16).expect("timestamp");
        assert!(expired(&spec, later));
        spec.renew_time = None;
        assert!(expired(&spec, now));
    }

    #[test]
    fn a_lost_lease_says_who_took_it_or_what_renewing_it_met() {
        let taken = |holder| {
            Error::from(LeaseLost::Taken {
                lease: "wsload-operator".into(),
                holder,
            })
            .to_string()
        };
        assert_eq!(
            taken(Holder::Named("wsload-operator-7f9c-2".into())),
            "leader election: lease wsload-operator taken by wsload-operator-7f9c-2"
        );
        assert_eq!(
            taken(Holder::JustCreated),
            "leader election: lease wsload-operator taken by (just created by another)"
        );
        assert_eq!(
            taken(Holder::ChangedConcurrently),
            "leader election: lease wsload-operator taken by (changed concurrently)"
        );
        let not_renewed = Error::from(LeaseLost::NotRenewed {
            lease: "wsload-operator".into(),
            within: Duration::from_secs(15),
            source: Box::new(Error::PodCache(crate::pod_cache::Dropped)),
        });
        assert_eq!(
            not_renewed.to_string(),
            "leader election: lease wsload-operator not renewed for 15s: the pod watch stopped before its first listing"
        );
        assert_eq!(not_renewed.metric_label(), "lease");
    }
}
