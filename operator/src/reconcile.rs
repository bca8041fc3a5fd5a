//! One reconcile of an `McpServer`: validate → build → apply → status.
//!
//! - validate: [`crate::validate`]; an invalid spec is reported in conditions and a Warning
//!   event and nothing is applied (retrying cannot help; the next spec change reconciles again).
//! - build: [`crate::builders`], pure.
//! - apply: server-side apply with field manager [`crate::FIELD_MANAGER`], forced (the operator
//!   owns these fields). The generated Secret is the exception: it is created only when absent,
//!   never re-applied, so its random contents are never replaced.
//! - membership: [`crate::membership`] decides how many pods the StatefulSet may have now and
//!   which single Raft membership call (if any) goes first.
//! - status: replicas, readiness, leader and members, conditions; events on notable changes.
//!
//! Errors are returned to the controller, whose [`error_policy`] requeues the object.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::builders::{
    self, CLUSTER_SECRET_KEY, CONFIG_HASH_ANNOTATION, ENCRYPTION_KEY_KEY, INITIAL_MEMBERS_ANNOTATION, Rollout, SecretMaterial, Settings,
    Target,
};
#[cfg(test)]
use crate::crd::MemberRole;
use crate::crd::{McpServer, McpServerStatus, condition};
use crate::membership::{self, AdminApi};
use crate::{Error, FIELD_MANAGER, Result, validate};

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub settings: Settings,
    /// The node admin API; `None` leaves Raft membership alone (the StatefulSet follows
    /// `spec.replicas` directly).
    pub admin: Option<Arc<dyn AdminApi>>,
    /// How long to wait before looking again while something is in progress.
    pub progress_interval: Duration,
    /// How long to wait before looking again when all is settled.
    pub settled_interval: Duration,
}

impl Context {
    pub fn new(client: Client, recorder: Recorder, settings: Settings, admin: Option<Arc<dyn AdminApi>>) -> Self {
        Self { client, recorder, settings, admin, progress_interval: Duration::from_secs(5), settled_interval: Duration::from_secs(300) }
    }
}

/// The controller's error policy: log, and try again after a short wait.
pub fn error_policy(mcp: Arc<McpServer>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(mcpserver = %mcp.name_any(), namespace = ?mcp.namespace(), error = %error, kind = error.label(), "reconcile failed; requeued");
    Action::requeue(Duration::from_secs(15))
}

/// What the reconcile found before applying anything.
struct Existing {
    statefulset: Option<StatefulSet>,
}

impl Existing {
    fn initial_members(&self, mcp: &McpServer) -> i32 {
        self.statefulset
            .as_ref()
            .and_then(|s| s.metadata.annotations.as_ref()?.get(INITIAL_MEMBERS_ANNOTATION)?.parse().ok())
            .unwrap_or(mcp.spec.replicas)
    }

    fn replicas(&self) -> Option<i32> {
        self.statefulset.as_ref()?.spec.as_ref()?.replicas
    }

    fn config_hash(&self) -> Option<String> {
        self.statefulset.as_ref()?.spec.as_ref()?.template.metadata.as_ref()?.annotations.as_ref()?.get(CONFIG_HASH_ANNOTATION).cloned()
    }
}

/// Reconcile one `McpServer`.
pub async fn reconcile(mcp: Arc<McpServer>, ctx: Arc<Context>) -> Result<Action> {
    let target = Target::new(&mcp)?;
    let ns = target.namespace.clone();
    let client = &ctx.client;
    let now = Timestamp::now();

    if let Err(Error::InvalidSpec(message)) = validate::validate(&mcp) {
        publish(&ctx, &mcp, EventType::Warning, "InvalidSpec", "Validate", &message).await;
        let status = invalid_status(&mcp, &target, &message, now);
        patch_status(client, &mcp, &status).await?;
        return Ok(Action::await_change());
    }

    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let existing = Existing { statefulset: statefulsets.get_opt(&target.name).await? };

    // The Secret first: the pods mount it, and membership calls carry its cluster secret.
    let cluster_secret = match ensure_secret(&ctx, &mcp, &target).await? {
        Ok(secret) => secret,
        Err(problem) => {
            publish(&ctx, &mcp, EventType::Warning, "SecretMissing", "Validate", &problem).await;
            let status = problem_status(&mcp, &target, &existing, "SecretMissing", &problem, now);
            patch_status(client, &mcp, &status).await?;
            return Ok(Action::requeue(ctx.progress_interval));
        }
    };

    // How many pods the StatefulSet may have now, and the one membership call that goes first.
    let initial_members = existing.initial_members(&mcp);
    let mut rollout = Rollout { initial_members, replicas: mcp.spec.replicas };
    let mut cluster = None;
    let mut membership_note = None;
    if let (Some(admin), Some(current)) = (&ctx.admin, existing.replicas()) {
        let addresses: Vec<(u64, String)> =
            (0..current.max(mcp.spec.replicas)).map(|i| (i as u64, target.peer_address(i, &ctx.settings))).collect();
        match membership::observe(admin.as_ref(), &addresses, &cluster_secret).await {
            Ok(status) => {
                let plan = membership::plan(mcp.spec.replicas, current, &status);
                rollout.replicas = plan.statefulset_replicas;
                // Related to the member's pod, so events about different members stay apart.
                let pod = plan.step.as_ref().map(|s| format!("{}-{}", target.name, s.id()));
                let executed = membership::execute(admin.as_ref(), &plan, &status, &addresses, &cluster_secret).await;
                if let Err(e) = executed {
                    // A refused call (a learner fell behind again, a leader change) is retried on
                    // the next pass; the children are still applied on this one.
                    let note = e.to_string();
                    publish_about(&ctx, &mcp, EventType::Warning, "MembershipCallFailed", "Membership", &note, pod).await;
                    membership_note = Some(("MembershipCallFailed".to_string(), note));
                } else if let Ok(Some((reason, note))) = executed {
                    publish_about(&ctx, &mcp, EventType::Normal, &reason, "Membership", &note, pod).await;
                    membership_note = Some(("Scaling".to_string(), note));
                } else if let Some(refusal) = &plan.refusal {
                    publish(&ctx, &mcp, EventType::Warning, "ScaleRefused", "Membership", refusal).await;
                    membership_note = Some(("ScaleRefused".to_string(), refusal.clone()));
                } else if let Some(waiting) = &plan.waiting {
                    membership_note = Some(("Scaling".to_string(), waiting.clone()));
                }
                cluster = Some((status, plan));
            }
            Err(e) => {
                // No member answers: keep the StatefulSet where it is rather than guess.
                tracing::info!(mcpserver = %target.name, error = %e, "cluster status unavailable; holding replicas");
                rollout.replicas = current;
                if current != mcp.spec.replicas {
                    membership_note = Some(("WaitingForCluster".to_string(), format!("cannot scale to {} yet: {e}", mcp.spec.replicas)));
                }
            }
        }
    }

    let settings = &ctx.settings;
    apply(client, &ns, &builders::config::config_map(&target)).await?;
    apply(client, &ns, &builders::services::peer_service(&target)).await?;
    apply(client, &ns, &builders::services::client_service(&target)).await?;
    apply(client, &ns, &builders::policy::pod_disruption_budget(&target)).await?;
    apply(client, &ns, &builders::policy::network_policy(&target, settings)).await?;
    let desired = builders::statefulset::statefulset(&target, settings, rollout);
    let applied: StatefulSet = apply(client, &ns, &desired).await?;

    match (existing.replicas(), existing.config_hash()) {
        (None, _) => {
            let note = format!("created the cluster with {} members", rollout.replicas);
            publish(&ctx, &mcp, EventType::Normal, "Created", "Apply", &note).await;
        }
        (Some(before), hash) => {
            if before != rollout.replicas {
                let note = format!("StatefulSet scaled from {before} to {} pods", rollout.replicas);
                publish(&ctx, &mcp, EventType::Normal, "Scaled", "Apply", &note).await;
            }
            let new_hash = builders::config::config_hash(&target);
            if hash.as_deref() != Some(new_hash.as_str()) {
                publish(&ctx, &mcp, EventType::Normal, "ConfigChanged", "Apply", "configuration changed; rolling the pods").await;
            }
        }
    }

    let observed = Observed::from_statefulset(&applied, mcp.spec.replicas, membership_note);
    let mut status = McpServerStatus {
        replicas: observed.replicas,
        ready_replicas: observed.ready,
        selector: Some(target.selector_string()),
        observed_generation: mcp.metadata.generation,
        conditions: conditions(&observed, previous_conditions(&mcp), mcp.metadata.generation, now),
        ..McpServerStatus::default()
    };
    if let Some((cluster_status, _)) = &cluster {
        status.leader = cluster_status.leader.map(|id| format!("{}-{id}", target.name));
        status.members = membership::members(cluster_status, &target.name);
    } else if let Some(previous) = &mcp.status {
        // Keep what the admin API said last rather than blank it when it cannot be asked.
        status.leader = previous.leader.clone();
        status.members = previous.members.clone();
    }
    patch_status(client, &mcp, &status).await?;

    let settled = observed.settled() && cluster.as_ref().is_none_or(|(_, plan)| plan.is_done());
    Ok(Action::requeue(if settled { ctx.settled_interval } else { ctx.progress_interval }))
}

/// Server-side apply of one child (forced: these fields are the operator's).
pub async fn apply<K>(client: &Client, ns: &str, object: &K) -> Result<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = object.meta().name.clone().ok_or(Error::MissingObjectKey("child metadata.name"))?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    Ok(api.patch(&name, &params, &Patch::Apply(object)).await?)
}

/// Make sure the Secret the pods mount exists and holds both keys; returns its cluster secret.
/// The generated one is created once and never touched again. The inner `Err` is a problem
/// the user has to fix (a referenced Secret that is missing or incomplete).
async fn ensure_secret(ctx: &Context, mcp: &McpServer, target: &Target<'_>) -> Result<Result<String, String>> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &target.namespace);
    let name = target.secret_name();
    if let Some(found) = secrets.get_opt(&name).await? {
        return Ok(secret_keys(&found).map_err(|missing| format!("Secret {name} has no {missing} key")));
    }
    if mcp.spec.secret_ref.is_some() {
        return Ok(Err(format!("Secret {name} (spec.secretRef) does not exist")));
    }
    let material = SecretMaterial::generate();
    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
    match secrets.create(&params, &builders::config::secret(target, &material)).await {
        Ok(_) => {
            publish(ctx, mcp, EventType::Normal, "SecretGenerated", "Apply", &format!("generated Secret {name}")).await;
            Ok(Ok(material.cluster_secret))
        }
        // Created between our read and our create: read it back, never replace it.
        Err(kube::Error::Api(s)) if s.is_already_exists() => {
            let found = secrets.get(&name).await?;
            Ok(secret_keys(&found).map_err(|missing| format!("Secret {name} has no {missing} key")))
        }
        Err(e) => Err(e.into()),
    }
}

/// The cluster secret of a Secret that has both keys, or the name of the missing key.
fn secret_keys(secret: &Secret) -> Result<String, &'static str> {
    let data = secret.data.clone().unwrap_or_default();
    let value = |key: &'static str| {
        data.get(key)
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
            .or_else(|| secret.string_data.as_ref()?.get(key).map(|s| s.trim().to_string()))
            .filter(|s| !s.is_empty())
            .ok_or(key)
    };
    value(ENCRYPTION_KEY_KEY)?;
    value(CLUSTER_SECRET_KEY)
}

async fn patch_status(client: &Client, mcp: &McpServer, status: &McpServerStatus) -> Result<()> {
    let api: Api<McpServer> = Api::namespaced(client.clone(), &mcp.namespace().unwrap_or_default());
    let patch = json!({ "apiVersion": McpServer::api_version(&()), "kind": McpServer::kind(&()), "status": status });
    api.patch_status(&mcp.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await?;
    Ok(())
}

/// Publish an event about the McpServer; a failure to publish is logged, never fatal.
async fn publish(ctx: &Context, mcp: &McpServer, type_: EventType, reason: &str, action: &str, note: &str) {
    publish_about(ctx, mcp, type_, reason, action, note, None).await
}

/// Publish an event about the McpServer, related to one of its pods.
async fn publish_about(ctx: &Context, mcp: &McpServer, type_: EventType, reason: &str, action: &str, note: &str, pod: Option<String>) {
    let secondary = pod.map(|name| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name),
        namespace: mcp.namespace(),
        ..ObjectReference::default()
    });
    let event = Event { type_, reason: reason.into(), note: Some(note.chars().take(1000).collect()), action: action.into(), secondary };
    if let Err(e) = ctx.recorder.publish(&event, &mcp.object_ref(&())).await {
        tracing::warn!(reason, error = %e, "could not publish event");
    }
}

fn previous_conditions(mcp: &McpServer) -> &[Condition] {
    mcp.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default()
}

/// What the StatefulSet reports, reduced to what the conditions need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// `spec.replicas` of the McpServer.
    pub desired: i32,
    /// Pods the StatefulSet has.
    pub replicas: i32,
    /// Pods that are ready.
    pub ready: i32,
    /// Every pod runs the current template and the StatefulSet controller has seen the latest spec.
    pub updated: bool,
    /// A problem the user has to fix: (reason, message).
    pub problem: Option<(String, String)>,
    /// A membership step under way, waited for or refused: (reason, message).
    pub membership: Option<(String, String)>,
}

impl Observed {
    pub fn from_statefulset(sts: &StatefulSet, desired: i32, membership: Option<(String, String)>) -> Self {
        let spec_replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let status = sts.status.clone().unwrap_or_default();
        let seen = status.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(0);
        let revisions_match = status.update_revision.is_none() || status.current_revision == status.update_revision;
        let updated = seen && revisions_match && status.updated_replicas.unwrap_or(0) >= spec_replicas && status.replicas == spec_replicas;
        Self { desired, replicas: status.replicas, ready: status.ready_replicas.unwrap_or(0), updated, problem: None, membership }
    }

    /// Nothing left to do: all desired pods exist, run the current template and are ready.
    pub fn settled(&self) -> bool {
        self.problem.is_none() && self.membership.is_none() && self.updated && self.replicas == self.desired && self.ready >= self.desired
    }
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
    previous: &[Condition],
) -> Condition {
    let status = if status { "True" } else { "False" }.to_string();
    // The transition time moves only when the status does.
    let last_transition_time =
        previous.iter().find(|c| c.type_ == type_ && c.status == status).map(|c| c.last_transition_time.clone()).unwrap_or(Time(now));
    Condition { type_: type_.into(), status, reason: reason.into(), message, observed_generation: generation, last_transition_time }
}

/// Ready, Progressing and Degraded from what was observed.
pub fn conditions(o: &Observed, previous: &[Condition], generation: Option<i64>, now: Timestamp) -> Vec<Condition> {
    let ready = o.problem.is_none() && o.ready >= o.desired && o.replicas == o.desired;
    let (ready_reason, ready_message) = match &o.problem {
        Some((reason, message)) => (reason.as_str(), message.clone()),
        None if ready => ("AllMembersReady", format!("{}/{} pods ready", o.ready, o.desired)),
        None => ("MembersNotReady", format!("{}/{} pods ready", o.ready, o.desired)),
    };
    let progressing = o.problem.is_none() && !o.settled();
    let (progress_reason, progress_message) = if o.problem.is_some() {
        ("Blocked", "waiting for the problem to be fixed".to_string())
    } else if let Some((reason, message)) = &o.membership {
        (reason.as_str(), message.clone())
    } else if o.replicas != o.desired {
        ("Scaling", format!("{} pods, {} wanted", o.replicas, o.desired))
    } else if !o.updated {
        ("RollingUpdate", "pods are being replaced with the current template".to_string())
    } else if o.ready < o.desired {
        ("Starting", format!("{}/{} pods ready", o.ready, o.desired))
    } else {
        ("Complete", "the cluster matches the spec".to_string())
    };
    let quorum = o.replicas / 2 + 1;
    let (degraded, degraded_reason, degraded_message) = match &o.problem {
        Some((reason, message)) => (true, reason.as_str(), message.clone()),
        None if o.replicas > 0 && o.ready < quorum && o.updated => {
            (true, "QuorumLost", format!("{}/{} pods ready; a Raft majority needs {quorum}", o.ready, o.replicas))
        }
        None => (false, "AsExpected", "no problems".to_string()),
    };
    vec![
        condition(condition::READY, ready, ready_reason, ready_message, generation, now, previous),
        condition(condition::PROGRESSING, progressing, progress_reason, progress_message, generation, now, previous),
        condition(condition::DEGRADED, degraded, degraded_reason, degraded_message, generation, now, previous),
    ]
}

/// Status of an McpServer whose spec is invalid: nothing is applied.
fn invalid_status(mcp: &McpServer, target: &Target, message: &str, now: Timestamp) -> McpServerStatus {
    let previous = mcp.status.clone().unwrap_or_default();
    let observed = Observed {
        desired: mcp.spec.replicas,
        replicas: previous.replicas,
        ready: previous.ready_replicas,
        problem: Some(("InvalidSpec".into(), message.into())),
        ..Observed::default()
    };
    McpServerStatus {
        selector: Some(target.selector_string()),
        observed_generation: mcp.metadata.generation,
        conditions: conditions(&observed, &previous.conditions, mcp.metadata.generation, now),
        ..previous
    }
}

/// Status while a problem outside the spec (a missing Secret) blocks the reconcile.
fn problem_status(mcp: &McpServer, target: &Target, existing: &Existing, reason: &str, message: &str, now: Timestamp) -> McpServerStatus {
    let previous = mcp.status.clone().unwrap_or_default();
    let mut observed = existing
        .statefulset
        .as_ref()
        .map(|s| Observed::from_statefulset(s, mcp.spec.replicas, None))
        .unwrap_or(Observed { desired: mcp.spec.replicas, ..Observed::default() });
    observed.problem = Some((reason.into(), message.into()));
    McpServerStatus {
        replicas: observed.replicas,
        ready_replicas: observed.ready,
        selector: Some(target.selector_string()),
        observed_generation: mcp.metadata.generation,
        conditions: conditions(&observed, &previous.conditions, mcp.metadata.generation, now),
        ..previous
    }
}

#[cfg(test)]
mod tests;
