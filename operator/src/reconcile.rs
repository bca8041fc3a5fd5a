//! One reconcile of an `McpServer`, as a sequence of steps, each a function below:
//!
//! - validate ([`crate::validate`]): an invalid spec is reported in conditions and a Warning
//!   event and nothing is applied (retrying cannot help; the next spec change reconciles again);
//! - secret: the Secret the pods mount is read for its cluster secret; when the spec references
//!   none and it does not exist yet, its material is generated (the apply step creates it). A
//!   referenced Secret that is missing or incomplete blocks the reconcile with a condition;
//! - membership ([`crate::membership`]): how many pods the StatefulSet may have now, and the
//!   single Raft membership call (if any) that goes first;
//! - build ([`crate::builders::Children`]): every child, once, pure;
//! - apply: server-side apply with field manager [`crate::FIELD_MANAGER`], forced (the operator
//!   owns these fields). The generated Secret is the exception: it is created only when absent,
//!   never re-applied, so its random contents are never replaced. Events for what changed;
//! - status: replicas, readiness, leader and members, conditions; when to look again.
//!
//! Errors are returned to the controller, whose [`error_policy`] requeues the object.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use switchboard_contract::admin::ClusterStatus;

use crate::builders::{
    CLUSTER_SECRET_KEY, CONFIG_HASH_ANNOTATION, Children, ENCRYPTION_KEY_KEY, INITIAL_MEMBERS_ANNOTATION, Rollout, SECRET_HASH_ANNOTATION,
    SecretMaterial, Settings, Target, config,
};
#[cfg(test)]
use crate::crd::MemberRole;
use crate::crd::{McpServer, McpServerStatus, condition};
use crate::membership::{self, AdminApi, Plan};
use crate::metrics::Metrics;
use crate::{Error, FIELD_MANAGER, Note, Result, validate};

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub settings: Settings,
    /// The node admin API, through which every scale changes Raft membership first.
    pub admin: Arc<dyn AdminApi>,
    pub metrics: Arc<Metrics>,
    /// How long to wait before looking again while something is in progress.
    pub progress_interval: Duration,
    /// How long to wait before looking again when all is settled.
    pub settled_interval: Duration,
    /// Failed reconciles in a row, per McpServer (`namespace/name`): the backoff's exponent.
    failures: Mutex<HashMap<String, u32>>,
    /// When each reconcile under way started (`namespace/name`): one running for too long means
    /// the controller is stuck (see [`Context::stuck`]).
    running: Mutex<HashMap<String, Instant>>,
}

impl Context {
    pub fn new(client: Client, recorder: Recorder, settings: Settings, admin: Arc<dyn AdminApi>, metrics: Arc<Metrics>) -> Self {
        Self {
            client,
            recorder,
            settings,
            admin,
            metrics,
            progress_interval: Duration::from_secs(5),
            settled_interval: Duration::from_secs(300),
            failures: Mutex::default(),
            running: Mutex::default(),
        }
    }

    /// A reconcile that has run for longer than `limit`, if any: `(namespace/name, how long)`.
    pub fn stuck(&self, limit: Duration) -> Option<(String, Duration)> {
        let running = self.running.lock().unwrap();
        running
            .iter()
            .map(|(key, started)| (key.clone(), started.elapsed()))
            .filter(|(_, took)| *took > limit)
            .max_by_key(|(_, took)| *took)
    }
}

/// The first wait after a failure of `kind`, doubled after each further failure in a row, up to
/// [`MAX_BACKOFF`]: an API server hiccup is retried soon, a node that refuses a membership call a
/// little later, anything else (a bug, a serialization failure) slowly.
pub fn backoff(kind: &str, failures_in_a_row: u32) -> Duration {
    let first = match kind {
        "kube" => Duration::from_secs(2),
        "admin" => Duration::from_secs(5),
        _ => Duration::from_secs(15),
    };
    first.saturating_mul(1 << failures_in_a_row.saturating_sub(1).min(10)).min(MAX_BACKOFF)
}

/// The longest wait between two attempts at a failing McpServer.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

fn key_of(mcp: &McpServer) -> String {
    format!("{}/{}", mcp.namespace().unwrap_or_default(), mcp.name_any())
}

/// The controller's error policy: log, and try again after a backoff that grows with each
/// failure in a row (see [`backoff`]).
pub fn error_policy(mcp: Arc<McpServer>, error: &Error, ctx: Arc<Context>) -> Action {
    let failures = {
        let mut failures = ctx.failures.lock().unwrap();
        let n = failures.entry(key_of(&mcp)).or_insert(0);
        *n += 1;
        *n
    };
    let wait = backoff(error.label(), failures);
    tracing::warn!(mcpserver = %mcp.name_any(), namespace = ?mcp.namespace(), error = %error, kind = error.label(), failures, retry_in_s = wait.as_secs(), "reconcile failed; requeued");
    Action::requeue(wait)
}

/// Reconcile one `McpServer`: one pass of the steps above, timed and counted, watched for
/// getting stuck.
pub async fn reconcile(mcp: Arc<McpServer>, ctx: Arc<Context>) -> Result<Action> {
    let key = key_of(&mcp);
    let started = Instant::now();
    ctx.running.lock().unwrap().insert(key.clone(), started);
    let result = reconcile_once(mcp, ctx.clone()).await;
    ctx.running.lock().unwrap().remove(&key);
    match &result {
        Ok(_) => {
            ctx.failures.lock().unwrap().remove(&key);
            ctx.metrics.reconciled("ok", started.elapsed());
        }
        Err(e) => ctx.metrics.reconciled(e.label(), started.elapsed()),
    }
    result
}

async fn reconcile_once(mcp: Arc<McpServer>, ctx: Arc<Context>) -> Result<Action> {
    let target = Target::new(&mcp)?;
    let now = Timestamp::now();
    if let Err(Error::InvalidSpec(message)) = validate::validate(&mcp) {
        return refuse_invalid_spec(&ctx, &mcp, &target, message, now).await;
    }
    let existing = Existing::read(&ctx.client, &target).await?;
    let secret = match read_secret(&ctx, &mcp, &target).await? {
        Ok(secret) => secret,
        Err(problem) => return wait_for_secret(&ctx, &mcp, &target, &existing, problem, now).await,
    };
    let target = target.with_secret_hash(secret.hash());
    let membership = scale_membership(&ctx, &mcp, &target, &existing, secret.cluster_secret()).await;
    let children = Children::build(&target, &ctx.settings, membership.rollout, secret.to_generate());
    let applied = apply_children(&ctx, &mcp, &target, children).await?;
    announce_changes(&ctx, &mcp, &target, &existing, membership.rollout).await;
    write_status(&ctx, &mcp, &target, &applied, membership, now).await
}

/// Validate step, when the spec is invalid: say why, apply nothing, wait for a spec change.
async fn refuse_invalid_spec(ctx: &Context, mcp: &McpServer, target: &Target<'_>, message: String, now: Timestamp) -> Result<Action> {
    let problem = Note::new("InvalidSpec", message);
    publish(ctx, mcp, EventType::Warning, "Validate", &problem).await;
    patch_status(&ctx.client, mcp, &invalid_status(mcp, target, problem, now)).await?;
    Ok(Action::await_change())
}

/// Secret step, when the Secret is missing or incomplete: say why, apply nothing, look again soon.
async fn wait_for_secret(
    ctx: &Context,
    mcp: &McpServer,
    target: &Target<'_>,
    existing: &Existing,
    problem: Note,
    now: Timestamp,
) -> Result<Action> {
    publish(ctx, mcp, EventType::Warning, "Validate", &problem).await;
    patch_status(&ctx.client, mcp, &problem_status(mcp, target, existing, problem, now)).await?;
    Ok(Action::requeue(ctx.progress_interval))
}

/// What the reconcile found before applying anything.
struct Existing {
    statefulset: Option<StatefulSet>,
    pods: Vec<Pod>,
}

impl Existing {
    async fn read(client: &Client, target: &Target<'_>) -> Result<Self> {
        let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &target.namespace);
        let statefulset = statefulsets.get_opt(&target.name).await?;
        let pods = match &statefulset {
            Some(_) => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &target.namespace);
                pods.list(&ListParams::default().labels(&target.selector_string())).await?.items
            }
            None => Vec::new(),
        };
        Ok(Self { statefulset, pods })
    }

    /// Ordinals of the pods that exist and are not ready (a pod not created yet is the node
    /// status's business).
    fn not_ready_members(&self, name: &str) -> std::collections::BTreeSet<u64> {
        self.pods
            .iter()
            .filter_map(|pod| {
                let ordinal: u64 = pod.metadata.name.as_deref()?.strip_prefix(name)?.strip_prefix('-')?.parse().ok()?;
                let ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                (!ready).then_some(ordinal)
            })
            .collect()
    }

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
        self.template_annotation(CONFIG_HASH_ANNOTATION)
    }

    fn template_annotation(&self, key: &str) -> Option<String> {
        self.statefulset.as_ref()?.spec.as_ref()?.template.metadata.as_ref()?.annotations.as_ref()?.get(key).cloned()
    }
}

/// The Secret the pods mount, as the secret step found it.
enum PodSecret {
    /// It exists and holds both keys; `hash` is [`config::secret_hash`] of what the pods read.
    Present { cluster_secret: String, hash: String },
    /// It does not exist and the spec references none: the apply step creates it from this.
    ToGenerate(SecretMaterial),
}

impl PodSecret {
    /// The secret every admin call carries.
    fn cluster_secret(&self) -> &str {
        match self {
            PodSecret::Present { cluster_secret, .. } => cluster_secret,
            PodSecret::ToGenerate(material) => &material.cluster_secret,
        }
    }

    /// What the pods will read, hashed: a change of it rolls them.
    fn hash(&self) -> String {
        match self {
            PodSecret::Present { hash, .. } => hash.clone(),
            PodSecret::ToGenerate(material) => material.hash(),
        }
    }

    /// Material of a Secret to generate, if one is to be.
    fn to_generate(&self) -> Option<&SecretMaterial> {
        match self {
            PodSecret::Present { .. } => None,
            PodSecret::ToGenerate(material) => Some(material),
        }
    }
}

/// Secret step: read the Secret the pods mount. The inner `Err` is a problem the user has to fix
/// (a referenced Secret that is missing, or a Secret without both keys).
async fn read_secret(ctx: &Context, mcp: &McpServer, target: &Target<'_>) -> Result<Result<PodSecret, Note>> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &target.namespace);
    let name = target.secret_name();
    if let Some(found) = secrets.get_opt(&name).await? {
        return Ok(secret_keys(&found)
            .map(|cluster_secret| PodSecret::Present { cluster_secret, hash: config::secret_hash(|key| secret_value(&found, key)) })
            .map_err(|missing| Note::new("SecretMissing", format!("Secret {name} has no {missing} key"))));
    }
    if mcp.spec.secret_ref.is_some() {
        return Ok(Err(Note::new("SecretMissing", format!("Secret {name} (spec.secretRef) does not exist"))));
    }
    Ok(Ok(PodSecret::ToGenerate(SecretMaterial::generate())))
}

/// The raw value of `key` in a Secret (`data`, else `stringData`).
fn secret_value(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| secret.string_data.as_ref()?.get(key).map(|s| s.clone().into_bytes()))
}

/// The cluster secret of a Secret that has both keys, or the name of the missing key.
fn secret_keys(secret: &Secret) -> Result<String, &'static str> {
    let value = |key: &'static str| {
        secret_value(secret, key).map(|v| String::from_utf8_lossy(&v).trim().to_string()).filter(|s| !s.is_empty()).ok_or(key)
    };
    value(ENCRYPTION_KEY_KEY)?;
    value(CLUSTER_SECRET_KEY)
}

/// What the membership step decided.
struct Membership {
    /// What the StatefulSet is built with.
    rollout: Rollout,
    /// The leader's view and the plan made from it, when a member answered.
    cluster: Option<(ClusterStatus, Plan)>,
    /// A membership step under way, waited for or refused.
    note: Option<Note>,
}

/// Membership step: how many pods the StatefulSet may have now, and the one membership call that
/// goes first. Before the StatefulSet exists, the spec is followed (its pods found the cluster).
async fn scale_membership(ctx: &Context, mcp: &McpServer, target: &Target<'_>, existing: &Existing, cluster_secret: &str) -> Membership {
    let mut rollout = Rollout { initial_members: existing.initial_members(mcp), replicas: mcp.spec.replicas };
    let admin = &ctx.admin;
    let Some(current) = existing.replicas() else {
        return Membership { rollout, cluster: None, note: None };
    };
    let addresses: Vec<(u64, String)> =
        (0..current.max(mcp.spec.replicas)).map(|i| (i as u64, target.peer_address(i, &ctx.settings))).collect();
    match membership::observe(admin.as_ref(), &addresses, cluster_secret).await {
        Ok(mut status) => {
            // A member whose pod is not ready is not counted on, whatever the leader last heard.
            status.not_ready = existing.not_ready_members(&target.name);
            let plan = membership::plan(mcp.spec.replicas, current, &status);
            rollout.replicas = plan.statefulset_replicas;
            let executed = membership::execute(admin.as_ref(), &plan, &status, &addresses, cluster_secret).await;
            let note = report_membership(ctx, mcp, target, &plan, executed).await;
            Membership { rollout, cluster: Some((status, plan)), note }
        }
        Err(e) => {
            // No member answers: keep the StatefulSet where it is rather than guess.
            tracing::info!(mcpserver = %target.name, error = %e, "cluster status unavailable; holding replicas");
            rollout.replicas = current;
            let note = (current != mcp.spec.replicas)
                .then(|| Note::new("WaitingForCluster", format!("cannot scale to {} yet: {e}", mcp.spec.replicas)));
            Membership { rollout, cluster: None, note }
        }
    }
}

/// Publish what the plan's call did (or why there was none), and return the note for the
/// conditions.
async fn report_membership(
    ctx: &Context,
    mcp: &McpServer,
    target: &Target<'_>,
    plan: &Plan,
    executed: Result<Option<Note>>,
) -> Option<Note> {
    // Related to the member's pod, so events about different members stay apart.
    let pod = plan.step.as_ref().map(|s| format!("{}-{}", target.name, s.id()));
    match executed {
        Err(e) => {
            ctx.metrics.membership_step("failed");
            // A refused call (a learner fell behind again, a leader change) is retried on the
            // next pass; the children are still applied on this one.
            let failed = Note::new("MembershipCallFailed", e.to_string());
            publish_about(ctx, mcp, EventType::Warning, "Membership", &failed, pod).await;
            Some(failed)
        }
        Ok(Some(done)) => {
            if let Some(step) = &plan.step {
                ctx.metrics.membership_step(step.label());
            }
            publish_about(ctx, mcp, EventType::Normal, "Membership", &done, pod).await;
            Some(Note::new("Scaling", done.message))
        }
        Ok(None) => match (&plan.refusal, &plan.waiting) {
            (Some(refusal), _) => {
                ctx.metrics.membership_step("refused");
                let refused = Note::new("ScaleRefused", refusal.clone());
                publish(ctx, mcp, EventType::Warning, "Membership", &refused).await;
                Some(refused)
            }
            (None, Some(waiting)) => Some(Note::new("Scaling", waiting.clone())),
            (None, None) => None,
        },
    }
}

/// Apply step: every child, in order; returns the StatefulSet as the API server holds it now.
async fn apply_children(ctx: &Context, mcp: &McpServer, target: &Target<'_>, children: Children) -> Result<StatefulSet> {
    let Children { secret, config_map, peer_service, client_service, pod_disruption_budget, network_policy, statefulset } = children;
    let (client, ns) = (&ctx.client, target.namespace.as_str());
    // The Secret first: the pods mount it.
    if let Some(secret) = secret {
        create_secret(ctx, mcp, target, &secret).await?;
    }
    apply(client, ns, &config_map).await?;
    apply(client, ns, &peer_service).await?;
    apply(client, ns, &client_service).await?;
    apply(client, ns, &pod_disruption_budget).await?;
    apply(client, ns, &network_policy).await?;
    apply(client, ns, &statefulset).await
}

/// Create the generated Secret. It is never applied again, so its random contents are never
/// replaced.
async fn create_secret(ctx: &Context, mcp: &McpServer, target: &Target<'_>, secret: &Secret) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &target.namespace);
    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
    match secrets.create(&params, secret).await {
        Ok(_) => {
            let generated = Note::new("SecretGenerated", format!("generated Secret {}", target.generated_secret_name()));
            publish(ctx, mcp, EventType::Normal, "Apply", &generated).await;
            Ok(())
        }
        // Created between our read and our create: keep it, never replace it (the secret step
        // of the next pass checks its keys).
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
        Err(e) => Err(e.into()),
    }
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

/// Events for what the apply step changed: a new cluster, a scale, a configuration change.
async fn announce_changes(ctx: &Context, mcp: &McpServer, target: &Target<'_>, existing: &Existing, rollout: Rollout) {
    let Some(before) = existing.replicas() else {
        let created = Note::new("Created", format!("created the cluster with {} members", rollout.replicas));
        return publish(ctx, mcp, EventType::Normal, "Apply", &created).await;
    };
    if before != rollout.replicas {
        let scaled = Note::new("Scaled", format!("StatefulSet scaled from {before} to {} pods", rollout.replicas));
        publish(ctx, mcp, EventType::Normal, "Apply", &scaled).await;
    }
    if existing.config_hash().as_deref() != Some(config::config_hash(target).as_str()) {
        let changed = Note::new("ConfigChanged", "configuration changed; rolling the pods");
        publish(ctx, mcp, EventType::Normal, "Apply", &changed).await;
    }
    if existing.template_annotation(SECRET_HASH_ANNOTATION).as_deref() != target.secret_hash.as_deref() {
        let changed = Note::new("SecretChanged", format!("Secret {} changed; rolling the pods", target.secret_name()));
        publish(ctx, mcp, EventType::Normal, "Apply", &changed).await;
    }
}

/// Status step: what the applied StatefulSet and the cluster report; look again soon while
/// anything is still under way.
async fn write_status(
    ctx: &Context,
    mcp: &McpServer,
    target: &Target<'_>,
    applied: &StatefulSet,
    membership: Membership,
    now: Timestamp,
) -> Result<Action> {
    let Membership { cluster, note, rollout: _ } = membership;
    ctx.metrics.cluster(&target.namespace, &target.name, cluster.as_ref().map(|(status, _)| status));
    let mut observed = Observed::from_statefulset(applied, mcp.spec.replicas, note);
    if let Some((status, _)) = &cluster {
        // Only the leader's view knows who acknowledges it; a follower's would call all down.
        if status.leader == Some(status.node_id) {
            observed.unhealthy_voters = status.voters.iter().filter_map(|id| status.health(*id).err()).collect();
        }
    }
    let status = running_status(mcp, target, &observed, cluster.as_ref().map(|(status, _)| status), now);
    patch_status(&ctx.client, mcp, &status).await?;
    let settled = observed.settled() && cluster.as_ref().is_none_or(|(_, plan)| plan.is_done());
    Ok(Action::requeue(if settled { ctx.settled_interval } else { ctx.progress_interval }))
}

async fn patch_status(client: &Client, mcp: &McpServer, status: &McpServerStatus) -> Result<()> {
    let api: Api<McpServer> = Api::namespaced(client.clone(), &mcp.namespace().unwrap_or_default());
    let patch = json!({ "apiVersion": McpServer::api_version(&()), "kind": McpServer::kind(&()), "status": status });
    api.patch_status(&mcp.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await?;
    Ok(())
}

/// Publish an event about the McpServer; a failure to publish is logged, never fatal.
async fn publish(ctx: &Context, mcp: &McpServer, type_: EventType, action: &str, note: &Note) {
    publish_about(ctx, mcp, type_, action, note, None).await
}

/// Publish an event about the McpServer, related to one of its pods.
async fn publish_about(ctx: &Context, mcp: &McpServer, type_: EventType, action: &str, note: &Note, pod: Option<String>) {
    let secondary = pod.map(|name| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name),
        namespace: mcp.namespace(),
        ..ObjectReference::default()
    });
    let event = Event {
        type_,
        reason: note.reason.into(),
        note: Some(note.message.chars().take(1000).collect()),
        action: action.into(),
        secondary,
    };
    if let Err(e) = ctx.recorder.publish(&event, &mcp.object_ref(&())).await {
        tracing::warn!(reason = note.reason, error = %e, "could not publish event");
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
    /// A problem the user has to fix.
    pub problem: Option<Note>,
    /// A membership step under way, waited for or refused.
    pub membership: Option<Note>,
    /// Why each voter the leader cannot count on is unhealthy (silent or far behind).
    pub unhealthy_voters: Vec<String>,
}

impl Observed {
    pub fn from_statefulset(sts: &StatefulSet, desired: i32, membership: Option<Note>) -> Self {
        let spec_replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let status = sts.status.clone().unwrap_or_default();
        let seen = status.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(0);
        let revisions_match = status.update_revision.is_none() || status.current_revision == status.update_revision;
        let updated = seen && revisions_match && status.updated_replicas.unwrap_or(0) >= spec_replicas && status.replicas == spec_replicas;
        Self {
            desired,
            replicas: status.replicas,
            ready: status.ready_replicas.unwrap_or(0),
            updated,
            problem: None,
            membership,
            unhealthy_voters: Vec::new(),
        }
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
        Some(problem) => (problem.reason, problem.message.clone()),
        None if ready => ("AllMembersReady", format!("{}/{} pods ready", o.ready, o.desired)),
        None => ("MembersNotReady", format!("{}/{} pods ready", o.ready, o.desired)),
    };
    let progressing = o.problem.is_none() && !o.settled();
    let (progress_reason, progress_message) = if o.problem.is_some() {
        ("Blocked", "waiting for the problem to be fixed".to_string())
    } else if let Some(note) = &o.membership {
        (note.reason, note.message.clone())
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
        Some(problem) => (true, problem.reason, problem.message.clone()),
        None if o.replicas > 0 && o.ready < quorum && o.updated => {
            (true, "QuorumLost", format!("{}/{} pods ready; a Raft majority needs {quorum}", o.ready, o.replicas))
        }
        // Quorum holds but a failure tolerated is a failure spent: say which members are down.
        None if !o.unhealthy_voters.is_empty() => {
            (true, "MembersUnhealthy", format!("voters the leader cannot count on: {}", o.unhealthy_voters.join("; ")))
        }
        None => (false, "AsExpected", "no problems".to_string()),
    };
    let tolerated = crate::builders::policy::tolerated_failures(o.desired);
    let (tolerant, tolerance_reason, tolerance_message) = if tolerated == 0 {
        (
            false,
            "NoFaultTolerance",
            format!("{} replicas: one failure stops writes, and the disruption budget blocks every drain; use 3 or more", o.desired),
        )
    } else if o.desired % 2 == 0 {
        (
            false,
            "EvenReplicas",
            format!("{} replicas tolerate {tolerated} failure(s), no more than {}; an odd count is better", o.desired, o.desired - 1),
        )
    } else {
        (true, "MajoritySurvives", format!("{} replicas tolerate {tolerated} failure(s) or voluntary disruption(s)", o.desired))
    };
    vec![
        condition(condition::READY, ready, ready_reason, ready_message, generation, now, previous),
        condition(condition::PROGRESSING, progressing, progress_reason, progress_message, generation, now, previous),
        condition(condition::DEGRADED, degraded, degraded_reason, degraded_message, generation, now, previous),
        condition(condition::FAULT_TOLERANT, tolerant, tolerance_reason, tolerance_message, generation, now, previous),
    ]
}

/// Status of an McpServer whose spec is invalid: nothing is applied.
fn invalid_status(mcp: &McpServer, target: &Target, problem: Note, now: Timestamp) -> McpServerStatus {
    let previous = mcp.status.clone().unwrap_or_default();
    let observed = Observed {
        desired: mcp.spec.replicas,
        replicas: previous.replicas,
        ready: previous.ready_replicas,
        problem: Some(problem),
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
fn problem_status(mcp: &McpServer, target: &Target, existing: &Existing, problem: Note, now: Timestamp) -> McpServerStatus {
    let previous = mcp.status.clone().unwrap_or_default();
    let mut observed = existing
        .statefulset
        .as_ref()
        .map(|s| Observed::from_statefulset(s, mcp.spec.replicas, None))
        .unwrap_or(Observed { desired: mcp.spec.replicas, ..Observed::default() });
    observed.problem = Some(problem);
    McpServerStatus {
        replicas: observed.replicas,
        ready_replicas: observed.ready,
        selector: Some(target.selector_string()),
        observed_generation: mcp.metadata.generation,
        conditions: conditions(&observed, &previous.conditions, mcp.metadata.generation, now),
        ..previous
    }
}

/// Status of a cluster that was applied: what the StatefulSet reports, and the leader and members
/// the admin API reported (or, when it could not be asked, what it reported last).
fn running_status(
    mcp: &McpServer,
    target: &Target,
    observed: &Observed,
    cluster: Option<&ClusterStatus>,
    now: Timestamp,
) -> McpServerStatus {
    let mut status = McpServerStatus {
        replicas: observed.replicas,
        ready_replicas: observed.ready,
        selector: Some(target.selector_string()),
        observed_generation: mcp.metadata.generation,
        conditions: conditions(observed, previous_conditions(mcp), mcp.metadata.generation, now),
        ..McpServerStatus::default()
    };
    if let Some(cluster) = cluster {
        status.leader = cluster.leader.map(|id| format!("{}-{id}", target.name));
        status.members = membership::members(cluster, &target.name);
    } else if let Some(previous) = &mcp.status {
        // Keep what the admin API said last rather than blank it when it cannot be asked.
        status.leader = previous.leader.clone();
        status.members = previous.members.clone();
    }
    status
}

#[cfg(test)]
mod tests;
