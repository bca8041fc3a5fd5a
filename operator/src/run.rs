//! The running operator: leader election, the controller loop, and `/healthz`, `/readyz` and
//! `/metrics`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::builders::{OperatorPods, Settings, Target};
use crate::crd::McpServer;
use crate::lease::LeaderElection;
use crate::membership::{AdminApi, HttpAdmin};
use crate::metrics::Metrics;
use crate::reconcile::{Context, error_policy, reconcile};
use crate::{Error, FIELD_MANAGER, Result};

/// How the operator runs (from its command line).
#[derive(Clone, Debug)]
pub struct Config {
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    pub metrics_listen: SocketAddr,
    /// The cluster's DNS domain.
    pub cluster_domain: String,
    /// The operator's namespace and pod labels, for the peer port's NetworkPolicy.
    pub operator: Option<OperatorPods>,
    /// Timeout of one admin API call.
    pub admin_timeout: Duration,
    /// The leader lease: its namespace and name, this replica's identity, its duration. `None`:
    /// a single replica that reconciles without electing (no namespace known).
    pub lease: Option<LeaseConfig>,
    /// `/healthz` fails when one reconcile has run for longer than this.
    pub stuck_after: Duration,
}

/// Where the replicas elect their leader.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

/// Parse `k=v,k=v` pod labels.
pub fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("label {pair:?} is not key=value"))
        })
        .collect()
}

/// Run until SIGTERM or Ctrl-C: serve health and metrics at once, wait for the leader lease
/// (a standby replica is ready and waits), then reconcile while holding it.
pub async fn run(config: Config) -> Result<()> {
    let client = Client::try_default().await?;
    let mcps: Api<McpServer> = Api::all(client.clone());
    // Fail at start, with a clear message, when the CRD is not installed.
    mcps.list(&ListParams::default().limit(1))
        .await
        .map_err(|e| Error::Startup(format!("cannot list McpServers (is the CRD installed?): {e}")))?;

    let metrics = Arc::new(Metrics::new());
    let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
    // Always: a StatefulSet scaled without the matching Raft membership changes would delete
    // voting members' pods and volumes while the group still counts them (5 → 2 loses quorum
    // for good). There is deliberately no switch to turn this off.
    let admin: Arc<dyn AdminApi> = Arc::new(HttpAdmin::new(config.admin_timeout)?);
    let settings = Settings { cluster_domain: config.cluster_domain.clone(), operator: config.operator.clone() };
    let ctx = Arc::new(Context::new(client.clone(), Recorder::new(client.clone(), reporter), settings, admin, metrics.clone()));
    let server = serve_health(config.metrics_listen, ctx.clone(), config.stuck_after).await?;

    let election = config
        .lease
        .as_ref()
        .map(|lease| LeaderElection::new(Api::namespaced(client.clone(), &lease.namespace), &lease.name, &lease.identity, lease.duration));
    if let Some(election) = &election {
        tracing::info!("waiting for the leader lease");
        tokio::select! {
            acquired = election.acquire() => acquired?,
            () = shutdown_signal() => {
                server.abort();
                return Ok(());
            }
        }
    }
    metrics.set_is_leader(true);
    tracing::info!(listen = %config.metrics_listen, "switchboard-operator reconciling");
    let controller = controller(client, mcps, ctx);
    let outcome = match &election {
        Some(election) => tokio::select! {
            () = controller => Ok(()),
            lost = election.hold() => Err(lost),
        },
        None => {
            controller.await;
            Ok(())
        }
    };
    metrics.set_is_leader(false);
    if let (Some(election), Ok(())) = (&election, &outcome) {
        // Stopping on a signal: hand over at once instead of after the lease's duration.
        election.release().await;
    }
    server.abort();
    tracing::info!("switchboard-operator stopped");
    outcome
}

/// The controller: McpServers, the children they own, and the pods and Secrets of managed
/// clusters (a pod turning ready or not changes what a scale may do; a Secret's content is
/// hashed into the pod template, so a rotation rolls the pods).
async fn controller(client: Client, mcps: Api<McpServer>, ctx: Arc<Context>) {
    let owned = watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={FIELD_MANAGER}"));
    let controller = Controller::new(mcps, watcher::Config::default());
    let store = controller.store();
    let by_secret = store.clone();
    controller
        .owns(Api::<StatefulSet>::all(client.clone()), owned.clone())
        .owns(Api::<Service>::all(client.clone()), owned.clone())
        .owns(Api::<ConfigMap>::all(client.clone()), owned.clone())
        .owns(Api::<PodDisruptionBudget>::all(client.clone()), owned.clone())
        .owns(Api::<NetworkPolicy>::all(client.clone()), owned)
        .watches(Api::<Pod>::all(client.clone()), watcher::Config::default().labels("app.kubernetes.io/name=switchboard"), move |pod| {
            pod_owner(&pod)
        })
        .watches(Api::<Secret>::all(client), watcher::Config::default(), move |secret| secret_users(&by_secret.state(), &secret))
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

/// The McpServer a node pod belongs to (its `app.kubernetes.io/instance` label).
fn pod_owner(pod: &Pod) -> Option<ObjectRef<McpServer>> {
    let name = pod.labels().get("app.kubernetes.io/instance")?;
    Some(ObjectRef::new(name).within(&pod.namespace()?))
}

/// The McpServers whose pods mount `secret`: the generated one or a `spec.secretRef`.
fn secret_users(mcps: &[Arc<McpServer>], secret: &Secret) -> Vec<ObjectRef<McpServer>> {
    let (Some(name), namespace) = (secret.metadata.name.as_deref(), secret.namespace()) else { return Vec::new() };
    mcps.iter()
        .filter(|mcp| mcp.namespace() == namespace)
        .filter(|mcp| Target::new(mcp).is_ok_and(|t| t.secret_name() == name))
        .map(|mcp| ObjectRef::from_obj(mcp.as_ref()))
        .collect()
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
    tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
}

/// `/healthz` fails while a reconcile has run for longer than `stuck_after` (the kubelet then
/// restarts the replica); `/readyz` is ready as soon as the server runs, leader or standby, so a
/// rolling update of the operator proceeds; `/metrics`.
async fn serve_health(addr: SocketAddr, ctx: Arc<Context>, stuck_after: Duration) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| Error::Startup(format!("cannot listen on {addr}: {e}")))?;
    let app = health_router(ctx, stuck_after);
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "health server stopped");
        }
    }))
}

fn health_router(ctx: Arc<Context>, stuck_after: Duration) -> axum::Router {
    use axum::http::StatusCode;
    use axum::routing::get;
    let metrics = ctx.metrics.clone();
    axum::Router::new()
        .route(
            "/healthz",
            get(move || {
                let stuck = ctx.stuck(stuck_after);
                async move {
                    match stuck {
                        Some((key, took)) => {
                            (StatusCode::INTERNAL_SERVER_ERROR, format!("stuck: the reconcile of {key} has run for {} s", took.as_secs()))
                        }
                        None => (StatusCode::OK, "ok".to_string()),
                    }
                }
            }),
        )
        .route("/readyz", get(|| async { "ready" }))
        .route(
            "/metrics",
            get(move || {
                let body = metrics.encode();
                async move { body }
            }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_pod_maps_to_its_mcpserver_and_a_secret_to_those_that_mount_it() {
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "demo-1", "namespace": "tools",
            "labels": {"app.kubernetes.io/name": "switchboard", "app.kubernetes.io/instance": "demo"}}}))
        .unwrap();
        assert_eq!(pod_owner(&pod), Some(ObjectRef::new("demo").within("tools")));
        let unlabelled: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "x", "namespace": "tools"}})).unwrap();
        assert_eq!(pod_owner(&unlabelled), None);

        let generated = Arc::new(McpServer::test());
        let referencing = Arc::new({
            let mut m = McpServer::test().secret_ref("shared-keys");
            m.metadata.name = Some("other".into());
            m.metadata.uid = Some("7d3c8a8e-0000-4000-8000-0000000000ff".into());
            m
        });
        let mcps = vec![generated, referencing];
        let secret = |name: &str, namespace: &str| -> Secret {
            serde_json::from_value(serde_json::json!({"metadata": {"name": name, "namespace": namespace}})).unwrap()
        };
        assert_eq!(secret_users(&mcps, &secret("demo-secret", "tools")), vec![ObjectRef::new("demo").within("tools")]);
        assert_eq!(secret_users(&mcps, &secret("shared-keys", "tools")), vec![ObjectRef::new("other").within("tools")]);
        assert!(secret_users(&mcps, &secret("shared-keys", "elsewhere")).is_empty(), "another namespace's Secret");
        assert!(secret_users(&mcps, &secret("unrelated", "tools")).is_empty());
    }

    #[test]
    fn labels_parse() {
        let labels = parse_labels("app.kubernetes.io/name=switchboard-operator, app.kubernetes.io/instance=ops").unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!(labels["app.kubernetes.io/instance"], "ops");
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("").unwrap().is_empty());
    }
}
