//! Reconcile tests against the fake API server (kube's `tower-test` mock service) and, for
//! scaling, a recorded node admin API.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::*;
use crate::builders::PREVIOUS_ENCRYPTION_KEY_KEY;
use crate::builders::statefulset::statefulset;
use crate::crd::McpServer;
use crate::fixtures::{FakeApi, RecordedAdmin};

const STS: &str = "/apis/apps/v1/namespaces/tools/statefulsets/demo";
const SECRET: &str = "/api/v1/namespaces/tools/secrets/demo-secret";

fn store(fake: &FakeApi, mcp: &McpServer) {
    fake.put(&mcp.api_path(), serde_json::to_value(mcp).unwrap());
}

/// The McpServer as the fake API server now holds it (with the status the operator wrote).
fn stored(fake: &FakeApi, mcp: &McpServer) -> McpServer {
    serde_json::from_value(fake.object(&mcp.api_path()).unwrap()).unwrap()
}

fn condition<'a>(mcp: &'a McpServer, type_: &str) -> &'a Condition {
    mcp.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == type_).unwrap()
}

/// Requests other than events, as `METHOD path`.
fn api_lines(fake: &FakeApi) -> Vec<String> {
    fake.calls().iter().filter(|c| !c.path.contains("/events")).map(|c| c.line()).collect()
}

/// A StatefulSet in the fake with the status a settled cluster of `n` ready pods reports.
fn settle(fake: &FakeApi, n: i32) {
    let mut sts = fake.object(STS).unwrap();
    sts["metadata"]["generation"] = json!(1);
    sts["status"] = json!({
        "replicas": n, "readyReplicas": n, "updatedReplicas": n, "availableReplicas": n,
        "currentRevision": "demo-1", "updateRevision": "demo-1", "observedGeneration": 1
    });
    fake.put(STS, sts);
}

fn sts_replicas(fake: &FakeApi) -> i64 {
    fake.object(STS).unwrap()["spec"]["replicas"].as_i64().unwrap()
}

fn config_hash_of(fake: &FakeApi) -> String {
    fake.object(STS).unwrap()["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION].as_str().unwrap().to_string()
}

#[tokio::test]
async fn create_applies_every_child_with_server_side_apply_then_writes_status() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test();
    store(&fake, &mcp);

    let action = reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(ctx.progress_interval), "pods are still starting");

    assert_eq!(
        api_lines(&fake),
        vec![
            "GET /apis/apps/v1/namespaces/tools/statefulsets/demo",
            "GET /api/v1/namespaces/tools/secrets/demo-secret",
            "POST /api/v1/namespaces/tools/secrets",
            "PATCH /api/v1/namespaces/tools/configmaps/demo-config",
            "PATCH /api/v1/namespaces/tools/services/demo-peers",
            "PATCH /api/v1/namespaces/tools/services/demo",
            "PATCH /apis/policy/v1/namespaces/tools/poddisruptionbudgets/demo",
            "PATCH /apis/networking.k8s.io/v1/namespaces/tools/networkpolicies/demo-peers",
            "PATCH /apis/apps/v1/namespaces/tools/statefulsets/demo",
            "PATCH /apis/switchboard.dev/v1alpha1/namespaces/tools/mcpservers/demo/status",
        ]
    );
    for call in fake.calls().iter().filter(|c| c.method == Method::PATCH) {
        assert!(call.query.contains("fieldManager=switchboard-operator"), "{}: {}", call.line(), call.query);
        assert!(call.query.contains("force=true"), "{}: {}", call.line(), call.query);
    }
    // The StatefulSet applied is exactly what the builder makes, with the hash of the Secret
    // its pods read.
    let secret: Secret = serde_json::from_value(fake.object(SECRET).unwrap()).unwrap();
    let hash = config::secret_hash(|key| secret.data.as_ref()?.get(key).map(|b| b.0.clone()));
    let target = Target::new(&mcp).unwrap().with_secret_hash(hash.clone());
    let expected = serde_json::to_value(statefulset(&target, &Settings::default(), Rollout::initial(&mcp))).unwrap();
    let applied = fake.calls().into_iter().find(|c| c.method == Method::PATCH && c.path == STS).unwrap().body;
    assert_eq!(applied, expected);
    assert_eq!(applied["spec"]["template"]["metadata"]["annotations"][SECRET_HASH_ANNOTATION], hash.as_str());

    // A generated Secret with both keys.
    let data = secret.data.unwrap();
    assert_eq!(data[CLUSTER_SECRET_KEY].0.len(), 64);
    assert_eq!(data[ENCRYPTION_KEY_KEY].0.len(), 64);
    assert_eq!(secret.metadata.owner_references.unwrap()[0].name, "demo");

    assert_eq!(fake.event_reasons(), vec!["SecretGenerated", "Created"]);

    let status = stored(&fake, &mcp);
    let s = status.status.as_ref().unwrap();
    assert_eq!(s.selector.as_deref(), Some("app.kubernetes.io/instance=demo,app.kubernetes.io/name=switchboard"));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!((s.replicas, s.ready_replicas), (0, 0));
    assert_eq!(condition(&status, "Ready").status, "False");
    assert_eq!(condition(&status, "Ready").reason, "MembersNotReady");
    assert_eq!(condition(&status, "Progressing").status, "True");
    assert_eq!(condition(&status, "Degraded").status, "False");
}

#[tokio::test]
async fn a_settled_cluster_is_ready_and_looked_at_less_often() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test();
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    settle(&fake, 3);
    fake.clear_calls();

    let action = reconcile(Arc::new(stored(&fake, &mcp)), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(ctx.settled_interval));
    let now = stored(&fake, &mcp);
    let s = now.status.as_ref().unwrap();
    assert_eq!((s.replicas, s.ready_replicas), (3, 3));
    assert_eq!(condition(&now, "Ready").status, "True");
    assert_eq!(condition(&now, "Ready").message, "3/3 pods ready");
    assert_eq!(condition(&now, "Progressing").status, "False");
    assert_eq!(condition(&now, "Progressing").reason, "Complete");
    assert_eq!(condition(&now, "Degraded").status, "False");
    assert!(fake.event_reasons().is_empty(), "nothing notable: {:?}", fake.event_reasons());
}

#[tokio::test]
async fn an_existing_secret_is_never_replaced() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test();
    store(&fake, &mcp);
    let original = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": "demo-secret", "namespace": "tools" },
        "data": { "cluster-secret": "b2xkLXNlY3JldA==", "encryption-key": "b2xkLWtleQ==" }
    });
    fake.put(SECRET, original.clone());

    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    reconcile(Arc::new(stored(&fake, &mcp)), ctx).await.unwrap();

    assert_eq!(fake.object(SECRET).unwrap(), original);
    assert!(!fake.calls().iter().any(|c| c.path.contains("/secrets") && c.method != Method::GET), "only read");
    assert!(!fake.event_reasons().contains(&"SecretGenerated".to_string()));
}

#[tokio::test]
async fn a_missing_referenced_secret_blocks_the_rollout_with_a_condition() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test().secret_ref("mcp-keys");
    store(&fake, &mcp);

    let action = reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(ctx.progress_interval));
    assert_eq!(
        api_lines(&fake),
        vec![
            "GET /apis/apps/v1/namespaces/tools/statefulsets/demo",
            "GET /api/v1/namespaces/tools/secrets/mcp-keys",
            "PATCH /apis/switchboard.dev/v1alpha1/namespaces/tools/mcpservers/demo/status",
        ]
    );
    assert_eq!(fake.event_reasons(), vec!["SecretMissing"]);
    let now = stored(&fake, &mcp);
    let degraded = condition(&now, "Degraded");
    assert_eq!((degraded.status.as_str(), degraded.reason.as_str()), ("True", "SecretMissing"));
    assert_eq!(degraded.message, "Secret mcp-keys (spec.secretRef) does not exist");

    // Once it exists, the rollout goes ahead and mounts it.
    fake.put(
        "/api/v1/namespaces/tools/secrets/mcp-keys",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mcp-keys"}, "data": {"cluster-secret": "YQ==", "encryption-key": "Yg=="}}),
    );
    reconcile(Arc::new(now), ctx).await.unwrap();
    assert_eq!(fake.object(STS).unwrap()["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], "mcp-keys");
}

#[tokio::test]
async fn an_incomplete_referenced_secret_is_reported() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test().secret_ref("mcp-keys");
    store(&fake, &mcp);
    fake.put(
        "/api/v1/namespaces/tools/secrets/mcp-keys",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mcp-keys"}, "data": {"cluster-secret": "YQ=="}}),
    );
    reconcile(Arc::new(mcp.clone()), ctx).await.unwrap();
    assert_eq!(condition(&stored(&fake, &mcp), "Degraded").message, "Secret mcp-keys has no encryption-key key");
    assert!(fake.object(STS).is_none());
}

#[tokio::test]
async fn an_invalid_spec_applies_nothing_and_says_why() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test().timeouts("1.5m", "10m", "1h");
    store(&fake, &mcp);

    let action = reconcile(Arc::new(mcp.clone()), ctx).await.unwrap();
    assert_eq!(action, Action::await_change(), "retrying cannot help; a spec change reconciles again");
    assert_eq!(api_lines(&fake), vec!["PATCH /apis/switchboard.dev/v1alpha1/namespaces/tools/mcpservers/demo/status"]);
    assert_eq!(fake.event_reasons(), vec!["InvalidSpec"]);
    let now = stored(&fake, &mcp);
    for (type_, status) in [("Ready", "False"), ("Progressing", "False"), ("Degraded", "True")] {
        assert_eq!(condition(&now, type_).status, status, "{type_}");
    }
    let degraded = condition(&now, "Degraded");
    assert_eq!(degraded.reason, "InvalidSpec");
    assert!(degraded.message.contains(r#"spec.timeouts.elicitation: "1.5m" has a fraction"#), "{}", degraded.message);
    assert_eq!(degraded.observed_generation, Some(1));
}

#[tokio::test]
async fn a_timeout_change_changes_the_config_hash_and_rolls_the_pods() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test();
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    settle(&fake, 3);
    let before = config_hash_of(&fake);
    let template_before = fake.object(STS).unwrap()["spec"]["template"].clone();
    fake.clear_calls();

    let changed = stored(&fake, &mcp).timeouts("7m", "10m", "1h").generation(2);
    store(&fake, &changed);
    reconcile(Arc::new(changed.clone()), ctx).await.unwrap();

    let after = config_hash_of(&fake);
    assert_ne!(before, after);
    let cm = fake.object("/api/v1/namespaces/tools/configmaps/demo-config").unwrap();
    assert_eq!(cm["data"]["elicitation-timeout"], "7m");
    assert_eq!(fake.event_reasons(), vec!["ConfigChanged"]);
    // Only the hash annotation differs in the template: the env reads the ConfigMap.
    let mut template_after = fake.object(STS).unwrap()["spec"]["template"].clone();
    template_after["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] = Value::String(before);
    assert_eq!(template_after, template_before);
    assert_eq!(stored(&fake, &changed).status.unwrap().observed_generation, Some(2));
}

#[tokio::test]
async fn api_errors_are_returned_so_the_controller_requeues() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test();
    store(&fake, &mcp);
    fake.fail(Method::PATCH, STS, 500);

    let error = reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap_err();
    assert!(matches!(error, Error::Kube(_)), "{error:?}");
    assert_eq!(error.label(), "kube");
    // Backoff: 2 s for an API failure, doubling with each failure in a row.
    let mcp = Arc::new(mcp);
    assert_eq!(error_policy(mcp.clone(), &error, ctx.clone()), Action::requeue(Duration::from_secs(2)));
    assert_eq!(error_policy(mcp.clone(), &error, ctx.clone()), Action::requeue(Duration::from_secs(4)));
    assert_eq!(error_policy(mcp.clone(), &error, ctx.clone()), Action::requeue(Duration::from_secs(8)));
    assert!(ctx.metrics.encode().contains("switchboard_operator_reconcile_errors_total{kind=\"kube\"} 1"));
    // A success starts the count again.
    fake.clear_failures();
    reconcile(mcp.clone(), ctx.clone()).await.unwrap();
    assert_eq!(error_policy(mcp, &error, ctx), Action::requeue(Duration::from_secs(2)));
}

#[test]
fn backoff_depends_on_the_kind_and_grows_to_a_cap() {
    assert_eq!(backoff("kube", 1), Duration::from_secs(2));
    assert_eq!(backoff("admin", 1), Duration::from_secs(5));
    assert_eq!(backoff("admin", 3), Duration::from_secs(20));
    assert_eq!(backoff("serialization", 1), Duration::from_secs(15));
    assert_eq!(backoff("kube", 30), MAX_BACKOFF);
    assert_eq!(backoff("kube", 0), Duration::from_secs(2), "the first failure");
}

#[tokio::test]
async fn a_reconcile_that_runs_too_long_is_reported_stuck() {
    let admin = RecordedAdmin::formed("demo", 3);
    let (ctx, fake) = Context::test(admin.clone());
    let mcp = McpServer::test();
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    assert_eq!(ctx.stuck(Duration::ZERO), None, "nothing runs between reconciles");
    // A reconcile blocked in a call that never returns.
    settle(&fake, 3);
    *admin.hang.lock().unwrap() = true;
    let hung = tokio::spawn(reconcile(Arc::new(stored(&fake, &mcp)), ctx.clone()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (key, took) = ctx.stuck(Duration::from_millis(20)).expect("reported");
    assert_eq!(key, "tools/demo");
    assert!(took >= Duration::from_millis(20));
    assert_eq!(ctx.stuck(Duration::from_secs(60)), None, "not yet past a longer limit");
    hung.abort();
}

#[tokio::test]
async fn an_object_without_namespace_is_an_error() {
    let (ctx, _fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mut mcp = McpServer::test();
    mcp.metadata.namespace = None;
    assert!(matches!(reconcile(Arc::new(mcp), ctx).await, Err(Error::MissingObjectKey(_))));
}

/// Reconcile until the membership plan has nothing left to do (at most `max` times), settling
/// the StatefulSet after each pass; returns the StatefulSet's replicas after each pass.
async fn drive(ctx: &Arc<Context>, fake: &FakeApi, mcp: &McpServer, max: usize) -> Vec<i64> {
    let mut seen = Vec::new();
    for _ in 0..max {
        let action = reconcile(Arc::new(stored(fake, mcp)), ctx.clone()).await.unwrap();
        let n = sts_replicas(fake);
        seen.push(n);
        settle(fake, n as i32);
        if action == Action::requeue(ctx.settled_interval) {
            break;
        }
    }
    seen
}

/// A 3-member cluster, created and settled, with a recorded admin API.
async fn formed() -> (Arc<Context>, FakeApi, Arc<RecordedAdmin>, McpServer) {
    let admin = RecordedAdmin::formed("demo", 3);
    let (ctx, fake) = Context::test(admin.clone());
    let mcp = McpServer::test();
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    settle(&fake, 3);
    reconcile(Arc::new(stored(&fake, &mcp)), ctx.clone()).await.unwrap();
    assert!(admin.calls().is_empty(), "a cluster at its size needs no membership call");
    (ctx, fake, admin, mcp)
}

#[tokio::test]
async fn scale_up_adds_learners_then_promotes_them() {
    let (ctx, fake, admin, mcp) = formed().await;
    let status = stored(&fake, &mcp).status.unwrap();
    assert_eq!(status.leader.as_deref(), Some("demo-0"));
    assert_eq!(status.members.len(), 3);

    let scaled = stored(&fake, &mcp).replicas(5).generation(2);
    store(&fake, &scaled);
    fake.clear_calls();
    let replicas = drive(&ctx, &fake, &scaled, 10).await;

    let leader = RecordedAdmin::addr("demo", 0);
    assert_eq!(
        admin.calls(),
        vec![
            format!("add_learner 3 {} via {leader}", RecordedAdmin::addr("demo", 3)),
            format!("add_learner 4 {} via {leader}", RecordedAdmin::addr("demo", 4)),
            format!("promote 3 via {leader}"),
            format!("promote 4 via {leader}"),
        ]
    );
    assert!(replicas.iter().all(|r| *r == 5), "the StatefulSet grows first: {replicas:?}");
    let reasons = fake.event_reasons();
    assert_eq!(reasons.iter().filter(|r| *r == "MemberAdded").count(), 2, "{reasons:?}");
    assert_eq!(reasons.iter().filter(|r| *r == "MemberPromoted").count(), 2, "{reasons:?}");
    assert!(reasons.contains(&"Scaled".to_string()));
    let done = stored(&fake, &scaled);
    let roles: Vec<(u64, MemberRole)> = done.status.as_ref().unwrap().members.iter().map(|m| (m.id, m.role)).collect();
    assert_eq!(roles, (0..5).map(|id| (id, MemberRole::Voter)).collect::<Vec<_>>());
    assert_eq!(condition(&done, "Ready").status, "True");
    // The pod template did not change: scaling never rolls the pods.
    let peers = &fake.object(STS).unwrap()["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(peers.to_string().contains("2=demo-2.demo-peers.tools.svc.cluster.local:7070\""), "still the 3 founders");
}

#[tokio::test]
async fn a_lagging_learner_is_not_promoted_and_the_wait_shows_in_progressing() {
    let (ctx, fake, admin, mcp) = formed().await;
    let scaled = stored(&fake, &mcp).replicas(4).generation(2);
    store(&fake, &scaled);
    // The learner is added, then falls far behind.
    reconcile(Arc::new(stored(&fake, &scaled)), ctx.clone()).await.unwrap();
    admin.cluster.lock().unwrap().replication_lag.insert(3, 5000);
    reconcile(Arc::new(stored(&fake, &scaled)), ctx.clone()).await.unwrap();
    assert_eq!(admin.calls().len(), 1, "{:?}", admin.calls());
    assert!(admin.calls()[0].starts_with("add_learner 3 "));
    let now = stored(&fake, &scaled);
    let progressing = condition(&now, "Progressing");
    assert_eq!(progressing.status, "True");
    assert_eq!(progressing.message, "waiting for member 3: 5000 entries behind");
    let roles: Vec<(u64, MemberRole)> = now.status.as_ref().unwrap().members.iter().map(|m| (m.id, m.role)).collect();
    assert_eq!(roles.last(), Some(&(3, MemberRole::Learner)));
}

#[tokio::test]
async fn scale_down_removes_members_highest_first_before_their_pods_go() {
    let admin = RecordedAdmin::formed("demo", 5);
    let (ctx, fake) = Context::test(admin.clone());
    let mcp = McpServer::test().replicas(5);
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    settle(&fake, 5);

    let smaller = stored(&fake, &mcp).replicas(3).generation(2);
    store(&fake, &smaller);
    fake.clear_calls();
    let replicas = drive(&ctx, &fake, &smaller, 10).await;

    assert_eq!(
        admin.calls(),
        vec![format!("remove 4 via {}", RecordedAdmin::addr("demo", 0)), format!("remove 3 via {}", RecordedAdmin::addr("demo", 0))]
    );
    // Pod 4 stays until node 4 is out, pod 3 until node 3 is out.
    assert_eq!(replicas.first(), Some(&5));
    assert_eq!(replicas.last(), Some(&3));
    assert!(replicas.windows(2).all(|w| w[0] >= w[1]), "{replicas:?}");
    assert!(replicas.contains(&4), "{replicas:?}");
    assert_eq!(fake.event_reasons().iter().filter(|r| *r == "MemberRemoved").count(), 2);
    let done = stored(&fake, &smaller);
    assert_eq!(done.status.as_ref().unwrap().members.len(), 3);
    assert_eq!(condition(&done, "Ready").status, "True");
}

#[tokio::test]
async fn a_scale_down_that_would_lose_quorum_is_refused_visibly() {
    let admin = RecordedAdmin::formed("demo", 3);
    // The worked case: an idle cluster (every lag 0) whose node 1 died a minute ago.
    admin.cluster.lock().unwrap().last_contact_ms.insert(1, 60_000);
    let (ctx, fake) = Context::test(admin.clone());
    let mcp = McpServer::test();
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    settle(&fake, 3);

    let smaller = stored(&fake, &mcp).replicas(2).generation(2);
    store(&fake, &smaller);
    reconcile(Arc::new(stored(&fake, &smaller)), ctx).await.unwrap();

    assert!(admin.calls().is_empty(), "{:?}", admin.calls());
    assert_eq!(sts_replicas(&fake), 3, "no pod goes");
    assert!(fake.event_reasons().contains(&"ScaleRefused".to_string()));
    let now = stored(&fake, &smaller);
    let progressing = condition(&now, "Progressing");
    assert_eq!(progressing.reason, "ScaleRefused");
    assert_eq!(
        progressing.message,
        "removing member 2 is unsafe: the new voters {0, 1} would have 1 healthy, and a majority needs 2 \
         (member 1: last heard 60000 ms ago)"
    );
    let degraded = condition(&now, "Degraded");
    assert_eq!((degraded.status.as_str(), degraded.reason.as_str()), ("True", "MembersUnhealthy"));
    assert_eq!(degraded.message, "voters the leader cannot count on: member 1: last heard 60000 ms ago");
}

#[tokio::test]
async fn a_refused_membership_call_is_reported_and_the_children_still_applied() {
    let (ctx, fake, admin, mcp) = formed().await;
    let scaled = stored(&fake, &mcp).replicas(4).generation(2);
    store(&fake, &scaled);
    reconcile(Arc::new(stored(&fake, &scaled)), ctx.clone()).await.unwrap(); // learner 3 added
    *admin.refuse.lock().unwrap() = Some("node 3 is not caught up: 900 entries behind".into());
    fake.clear_calls();

    let action = reconcile(Arc::new(stored(&fake, &scaled)), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(ctx.progress_interval));
    assert!(api_lines(&fake).contains(&format!("PATCH {STS}")), "children applied: {:?}", api_lines(&fake));
    assert_eq!(fake.event_reasons(), vec!["MembershipCallFailed"]);
    let progressing = condition(&stored(&fake, &scaled), "Progressing").clone();
    assert_eq!(progressing.reason, "MembershipCallFailed");
    assert!(progressing.message.contains("409 Conflict: node 3 is not caught up"), "{}", progressing.message);

    // Once the node accepts, the promotion goes through.
    *admin.refuse.lock().unwrap() = None;
    reconcile(Arc::new(stored(&fake, &scaled)), ctx).await.unwrap();
    assert_eq!(admin.calls().last().unwrap(), &format!("promote 3 via {}", RecordedAdmin::addr("demo", 0)));
}

#[tokio::test]
async fn when_no_member_answers_the_statefulset_is_held() {
    let admin = RecordedAdmin::formed("demo", 3);
    let (ctx, fake) = Context::test(admin.clone());
    let mcp = McpServer::test();
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    settle(&fake, 3);
    admin.down.lock().unwrap().extend((0..5).map(|i| RecordedAdmin::addr("demo", i)));

    let scaled = stored(&fake, &mcp).replicas(5).generation(2);
    store(&fake, &scaled);
    reconcile(Arc::new(stored(&fake, &scaled)), ctx).await.unwrap();
    assert_eq!(sts_replicas(&fake), 3);
    let now = stored(&fake, &scaled);
    assert_eq!(condition(&now, "Progressing").reason, "WaitingForCluster");
}

#[test]
fn transition_times_move_only_when_a_condition_flips() {
    let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
    let starting = Observed { desired: 3, replicas: 3, ready: 1, updated: false, ..Observed::default() };
    let first = conditions(&starting, &[], Some(1), t0);
    let still = conditions(&Observed { ready: 2, ..starting.clone() }, &first, Some(1), t1);
    for (a, b) in first.iter().zip(&still) {
        assert_eq!(a.last_transition_time, b.last_transition_time, "{} did not flip", a.type_);
    }
    let ready = conditions(&Observed { ready: 3, updated: true, ..starting }, &still, Some(1), t1);
    assert_eq!(ready[0].type_, "Ready");
    assert_eq!(ready[0].status, "True");
    assert_eq!(ready[0].last_transition_time, Time(t1));
    assert_eq!(ready[2].type_, "Degraded");
    assert_eq!(ready[2].last_transition_time, Time(t0), "Degraded stayed False");
}

#[test]
fn a_lost_majority_is_degraded() {
    let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let o = Observed { desired: 3, replicas: 3, ready: 1, updated: true, ..Observed::default() };
    let c = conditions(&o, &[], Some(1), now);
    assert_eq!((c[2].type_.as_str(), c[2].status.as_str(), c[2].reason.as_str()), ("Degraded", "True", "QuorumLost"));
    assert_eq!(c[2].message, "1/3 pods ready; a Raft majority needs 2");
    let healthy = conditions(&Observed { ready: 2, ..o }, &[], Some(1), now);
    assert_eq!(healthy[2].status, "False");
}

#[test]
fn replica_counts_that_tolerate_no_failure_or_are_even_are_flagged() {
    let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let tolerance = |replicas: i32| {
        let o = Observed { desired: replicas, replicas, ready: replicas, updated: true, ..Observed::default() };
        let c = conditions(&o, &[], Some(1), now);
        let t = c.iter().find(|c| c.type_ == "FaultTolerant").expect("FaultTolerant is reported").clone();
        (t.status, t.reason)
    };
    assert_eq!(tolerance(1), ("False".to_string(), "NoFaultTolerance".to_string()));
    assert_eq!(tolerance(2), ("False".to_string(), "NoFaultTolerance".to_string()));
    assert_eq!(tolerance(3), ("True".to_string(), "MajoritySurvives".to_string()));
    assert_eq!(tolerance(4), ("False".to_string(), "EvenReplicas".to_string()));
    assert_eq!(tolerance(5), ("True".to_string(), "MajoritySurvives".to_string()));
}

#[tokio::test]
async fn a_changed_secret_rolls_the_pods_and_an_unchanged_one_does_not() {
    let (ctx, fake) = Context::test(RecordedAdmin::formed("demo", 3));
    let mcp = McpServer::test();
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    settle(&fake, 3);
    let template_hash =
        |fake: &FakeApi| fake.object(STS).unwrap()["spec"]["template"]["metadata"]["annotations"][SECRET_HASH_ANNOTATION].clone();
    let before = template_hash(&fake);
    reconcile(Arc::new(stored(&fake, &mcp)), ctx.clone()).await.unwrap();
    assert_eq!(template_hash(&fake), before, "the same Secret: the template stays");

    // Step 1 of a rotation: the new key is added as the previous one (accepted, not used).
    let mut secret = fake.object(SECRET).unwrap();
    secret["data"][PREVIOUS_ENCRYPTION_KEY_KEY] = json!("MDAwMA==");
    fake.put(SECRET, secret);
    reconcile(Arc::new(stored(&fake, &mcp)), ctx).await.unwrap();
    assert_ne!(template_hash(&fake), before, "the pods roll to read it");
    assert!(fake.event_reasons().contains(&"SecretChanged".to_string()), "{:?}", fake.event_reasons());
}

#[tokio::test]
async fn a_member_whose_pod_is_not_ready_does_not_count_for_a_scale_down() {
    let admin = RecordedAdmin::formed("demo", 3);
    let (ctx, fake) = Context::test(admin.clone());
    let mcp = McpServer::test();
    store(&fake, &mcp);
    reconcile(Arc::new(mcp.clone()), ctx.clone()).await.unwrap();
    settle(&fake, 3);
    // The leader still hears from node 1, but its pod is not ready (it is catching up, or
    // draining).
    for (i, ready) in [(0, "True"), (1, "False"), (2, "True")] {
        fake.put(
            &format!("/api/v1/namespaces/tools/pods/demo-{i}"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("demo-{i}"), "namespace": "tools",
                "labels": {"app.kubernetes.io/name": "switchboard", "app.kubernetes.io/instance": "demo"}},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}}),
        );
    }
    let smaller = stored(&fake, &mcp).replicas(2).generation(2);
    store(&fake, &smaller);
    reconcile(Arc::new(stored(&fake, &smaller)), ctx.clone()).await.unwrap();
    assert!(admin.calls().is_empty(), "{:?}", admin.calls());
    let now = stored(&fake, &smaller);
    let progressing = condition(&now, "Progressing");
    assert_eq!(progressing.reason, "ScaleRefused");
    assert!(progressing.message.ends_with("(member 1: pod not ready)"), "{}", progressing.message);
    assert!(ctx.metrics.encode().contains("switchboard_operator_membership_steps_total{step=\"refused\"} 1"));
}
