//! The running operator: the controller loop plus `/healthz`, `/readyz` and `/metrics`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::builders::{OperatorPods, Settings};
use crate::crd::McpServer;
use crate::membership::{AdminApi, HttpAdmin};
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

/// Reconcile counters, by outcome (`ok` or the error's label).
struct Metrics {
    registry: Registry,
    reconciles: Family<Outcome, Counter>,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("switchboard_operator");
        let reconciles = Family::<Outcome, Counter>::default();
        registry.register("reconciles", "McpServer reconciles by outcome", reconciles.clone());
        Self { registry, reconciles }
    }

    fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Run until SIGTERM or Ctrl-C.
pub async fn run(config: Config) -> Result<()> {
    let client = Client::try_default().await?;
    let mcps: Api<McpServer> = Api::all(client.clone());
    // Fail at start, with a clear message, when the CRD is not installed.
    mcps.list(&ListParams::default().limit(1))
        .await
        .map_err(|e| Error::Startup(format!("cannot list McpServers (is the CRD installed?): {e}")))?;

    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let server = serve_health(config.metrics_listen, metrics.clone(), ready.clone()).await?;

    let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
    // Always: a StatefulSet scaled without the matching Raft membership changes would delete
    // voting members' pods and volumes while the group still counts them (5 → 2 loses quorum
    // for good). There is deliberately no switch to turn this off.
    let admin: Arc<dyn AdminApi> = Arc::new(HttpAdmin::new(config.admin_timeout)?);
    let settings = Settings { cluster_domain: config.cluster_domain.clone(), operator: config.operator.clone() };
    let ctx = Arc::new(Context::new(client.clone(), Recorder::new(client.clone(), reporter), settings, admin));

    let owned = watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={FIELD_MANAGER}"));
    ready.store(true, Ordering::SeqCst);
    tracing::info!(listen = %config.metrics_listen, "switchboard-operator started");
    Controller::new(mcps, watcher::Config::default())
        .owns(Api::<StatefulSet>::all(client.clone()), owned.clone())
        .owns(Api::<Service>::all(client.clone()), owned.clone())
        .owns(Api::<ConfigMap>::all(client.clone()), owned.clone())
        .owns(Api::<PodDisruptionBudget>::all(client.clone()), owned.clone())
        .owns(Api::<NetworkPolicy>::all(client.clone()), owned)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            let outcome = match &result {
                Ok(_) => "ok",
                Err(kube::runtime::controller::Error::ReconcilerFailed(e, _)) => e.label(),
                Err(_) => "controller",
            };
            metrics.reconciles.get_or_create(&Outcome { outcome }).inc();
            async {}
        })
        .await;
    server.abort();
    tracing::info!("switchboard-operator stopped");
    Ok(())
}

async fn serve_health(addr: SocketAddr, metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> Result<tokio::task::JoinHandle<()>> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.load(Ordering::SeqCst);
                async move { if ready { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "starting") } }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let body = metrics.encode();
                async move { body }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| Error::Startup(format!("cannot listen on {addr}: {e}")))?;
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "health server stopped");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse() {
        let labels = parse_labels("app.kubernetes.io/name=switchboard-operator, app.kubernetes.io/instance=ops").unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!(labels["app.kubernetes.io/instance"], "ops");
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("").unwrap().is_empty());
    }
}
