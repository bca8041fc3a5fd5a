//! Leader election through a `coordination.k8s.io/v1` Lease, so two operator replicas can run:
//! one holds the lease and reconciles, the other waits and takes over when the holder stops
//! renewing (it crashed or lost the API server) or gives the lease up on shutdown.
//!
//! [`decide`] is pure: from the Lease as read, who we are and the time, what to do.
//! [`LeaderElection`] does it against the API server, with optimistic concurrency (a write
//! carries the `resourceVersion` it read, so of two replicas racing for an expired lease one
//! wins and the other sees a conflict and reads again).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use crate::{Error, Result};

/// What to do about the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nobody holds it, or its holder let it expire: take it.
    Take,
    /// We hold it: renew it.
    Renew,
    /// `holder` holds it for at most `for_at_most` more.
    Wait { holder: String, for_at_most: Duration },
}

/// Decide from the lease's spec (`None`: no Lease object yet).
pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else { return Decision::Take };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder.is_empty() {
        return Decision::Take;
    }
    if holder == me {
        return Decision::Renew;
    }
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()).map(|t| t.0);
    let expires = renewed.and_then(|at| at.checked_add(duration).ok());
    match expires {
        Some(expires) if expires > now => {
            let left = Duration::try_from(expires.duration_since(now)).unwrap_or_default();
            Decision::Wait { holder, for_at_most: left }
        }
        _ => Decision::Take,
    }
}

/// One replica's side of the election.
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaderElection {
    pub fn new(api: Api<Lease>, name: impl Into<String>, identity: impl Into<String>, duration: Duration) -> Self {
        Self { api, name: name.into(), identity: identity.into(), duration }
    }

    /// How often the holder renews: three chances before the lease would expire.
    fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// One attempt: take or renew the lease if we may. `Ok(true)` when we hold it afterwards.
    pub async fn try_acquire(&self) -> Result<bool> {
        let now = Timestamp::now();
        let found = self.api.get_opt(&self.name).await?;
        let decision = decide(found.as_ref().and_then(|l| l.spec.as_ref()), &self.identity, now);
        let transitions = found.as_ref().and_then(|l| l.spec.as_ref()?.lease_transitions).unwrap_or(0);
        let spec = |acquire_time: Option<MicroTime>, transitions: i32| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs() as i32),
            acquire_time,
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        let lease = match (decision, found) {
            (Decision::Wait { .. }, _) => return Ok(false),
            (Decision::Take, None) => {
                let lease = Lease {
                    metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                    spec: Some(spec(Some(MicroTime(now)), 0)),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
                    Err(e) => Err(e.into()),
                };
            }
            (Decision::Take, Some(mut lease)) => {
                lease.spec = Some(spec(Some(MicroTime(now)), transitions + 1));
                lease
            }
            (Decision::Renew, Some(mut lease)) => {
                let acquired = lease.spec.as_ref().and_then(|s| s.acquire_time.clone());
                lease.spec = Some(spec(acquired, transitions));
                lease
            }
            (Decision::Renew, None) => unreachable!("only a Lease we hold is renewed"),
        };
        // The resourceVersion read goes back with the write: a conflict means another replica
        // wrote in between.
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Wait until this replica holds the lease.
    pub async fn acquire(&self) -> Result<()> {
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "holding the leader lease");
                    return Ok(());
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "could not read or take the leader lease; trying again"),
            }
            tokio::time::sleep(self.renew_every()).await;
        }
    }

    /// Keep renewing; returns once the lease could not be renewed before it would expire (another
    /// replica may hold it now: the caller must stop reconciling).
    pub async fn hold(&self) -> Error {
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.renew_every()).await;
            match self.try_acquire().await {
                Ok(true) => renewed = tokio::time::Instant::now(),
                Ok(false) => return Error::Startup(format!("lost the leader lease {} to another replica", self.name)),
                Err(e) if renewed.elapsed() + self.renew_every() >= self.duration => {
                    return Error::Startup(format!("could not renew the leader lease {} in time: {e}", self.name));
                }
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "leader lease renewal failed; retrying"),
            }
        }
    }

    /// Give the lease up (on shutdown), so another replica takes over at once.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else { return };
        let Some(spec) = lease.spec.as_mut() else { return };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        if let Err(e) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
            tracing::warn!(lease = %self.name, error = %e, "could not release the leader lease; it expires on its own");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::FakeApi;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn held_by(holder: &str, renewed: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(MicroTime(at(renewed))),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_free_or_expired_lease_is_taken_ours_renewed_anothers_waited_for() {
        assert_eq!(decide(None, "a", at(0)), Decision::Take);
        assert_eq!(decide(Some(&LeaseSpec::default()), "a", at(0)), Decision::Take, "no holder");
        assert_eq!(decide(Some(&held_by("a", 0, 15)), "a", at(100)), Decision::Renew, "ours, even if late");
        assert_eq!(
            decide(Some(&held_by("b", 0, 15)), "a", at(10)),
            Decision::Wait { holder: "b".into(), for_at_most: Duration::from_secs(5) }
        );
        assert_eq!(decide(Some(&held_by("b", 0, 15)), "a", at(15)), Decision::Take, "expired at renew + duration");
        let never_renewed = LeaseSpec { renew_time: None, ..held_by("b", 0, 15) };
        assert_eq!(decide(Some(&never_renewed), "a", at(0)), Decision::Take, "no time to count from");
    }

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/switchboard-operator";

    fn election(client: &kube::Client, identity: &str, seconds: u64) -> LeaderElection {
        LeaderElection::new(Api::namespaced(client.clone(), "ops"), "switchboard-operator", identity, Duration::from_secs(seconds))
    }

    #[tokio::test]
    async fn one_replica_holds_the_lease_and_the_other_takes_over_when_it_is_released() {
        let (fake, client) = FakeApi::start();
        let (a, b) = (election(&client, "operator-a", 15), election(&client, "operator-b", 15));
        assert!(a.try_acquire().await.unwrap(), "a creates the lease");
        assert!(!b.try_acquire().await.unwrap(), "b waits");
        assert!(a.try_acquire().await.unwrap(), "a renews");
        assert_eq!(fake.object(LEASE).unwrap()["spec"]["holderIdentity"], "operator-a");
        a.release().await;
        assert!(b.try_acquire().await.unwrap(), "b takes the released lease at once");
        let lease = fake.object(LEASE).unwrap();
        assert_eq!((lease["spec"]["holderIdentity"].as_str(), lease["spec"]["leaseTransitions"].as_i64()), (Some("operator-b"), Some(1)));
        assert!(!a.try_acquire().await.unwrap(), "now a waits");
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_and_its_old_holder_learns_it_lost() {
        let (fake, client) = FakeApi::start();
        let (a, b) = (election(&client, "operator-a", 3), election(&client, "operator-b", 3));
        assert!(a.try_acquire().await.unwrap());
        // a stops renewing (it hangs); three seconds later b takes over.
        let mut lease = fake.object(LEASE).unwrap();
        lease["spec"]["renewTime"] = serde_json::to_value(MicroTime(Timestamp::now() - Duration::from_secs(4))).unwrap();
        fake.put(LEASE, lease);
        assert!(b.try_acquire().await.unwrap());
        let lost = a.hold().await;
        assert!(lost.to_string().contains("lost the leader lease"), "{lost}");
    }

    #[tokio::test]
    async fn of_two_writes_from_the_same_read_one_wins() {
        let (fake, client) = FakeApi::start();
        let a = election(&client, "operator-a", 15);
        assert!(a.try_acquire().await.unwrap());
        // A write carrying an old resourceVersion is refused (409): the replica reads again.
        let mut stale: Lease = serde_json::from_value(fake.object(LEASE).unwrap()).unwrap();
        assert!(a.try_acquire().await.unwrap(), "a renews; the version moves on");
        stale.spec.as_mut().unwrap().holder_identity = Some("operator-b".into());
        let refused = a.api.replace("switchboard-operator", &PostParams::default(), &stale).await.unwrap_err();
        assert!(matches!(refused, kube::Error::Api(s) if s.code == 409));
        assert_eq!(fake.object(LEASE).unwrap()["spec"]["holderIdentity"], "operator-a");
    }
}
