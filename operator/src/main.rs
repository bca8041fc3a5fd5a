//! `switchboard-operator`: `run` the controller, or print the `crd`.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use switchboard_operator::builders::OperatorPods;
use switchboard_operator::run::{Config, LeaseConfig, parse_labels, run};

#[derive(Parser)]
#[command(name = "switchboard-operator", version, about = "Kubernetes operator for switchboard McpServer clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Reconcile McpServer resources until stopped.
    Run(RunArgs),
    /// Print the McpServer CustomResourceDefinition as YAML.
    Crd,
    /// Print the objects the operator would create for an McpServer read from FILE (`-` for
    /// stdin), without a cluster.
    Render {
        /// The McpServer YAML.
        file: String,
        /// Namespace, when the file's metadata names none.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The cluster's DNS domain.
        #[arg(long, default_value = "cluster.local")]
        cluster_domain: String,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "SWITCHBOARD_OPERATOR_METRICS_LISTEN", default_value = "0.0.0.0:8080")]
    metrics_listen: SocketAddr,
    /// The cluster's DNS domain (peer addresses are `NAME-N.NAME-peers.NAMESPACE.svc.DOMAIN`).
    #[arg(long, env = "SWITCHBOARD_OPERATOR_CLUSTER_DOMAIN", default_value = "cluster.local")]
    cluster_domain: String,
    /// The operator's namespace, so the peer-port NetworkPolicy lets it reach the admin API.
    #[arg(long, env = "POD_NAMESPACE")]
    operator_namespace: Option<String>,
    /// The operator pods' labels (`k=v,k=v`), for the same NetworkPolicy.
    #[arg(long, env = "SWITCHBOARD_OPERATOR_POD_LABELS", value_parser = parse_labels)]
    operator_pod_labels: Option<std::collections::BTreeMap<String, String>>,
    /// Timeout of one node admin API call, in seconds (members are asked in parallel).
    #[arg(long, env = "SWITCHBOARD_OPERATOR_ADMIN_TIMEOUT_SECONDS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=300))]
    admin_timeout_seconds: u64,
    /// This replica's name, its identity in the leader lease.
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    /// Name of the leader-election Lease in the operator's namespace. Without a namespace
    /// (POD_NAMESPACE) the operator runs alone and elects nobody.
    #[arg(long, env = "SWITCHBOARD_OPERATOR_LEASE_NAME", default_value = "switchboard-operator")]
    lease_name: String,
    /// How long the leader lease lasts without renewal, in seconds: how soon a standby takes
    /// over from a replica that died.
    #[arg(long, env = "SWITCHBOARD_OPERATOR_LEASE_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(5..=300))]
    lease_seconds: u64,
    /// `/healthz` fails (and the kubelet restarts the replica) when one reconcile runs longer
    /// than this many seconds.
    #[arg(long, env = "SWITCHBOARD_OPERATOR_STUCK_AFTER_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(30..))]
    stuck_after_seconds: u64,
    /// Log format on stderr.
    #[arg(long, env = "SWITCHBOARD_OPERATOR_LOG_FORMAT", default_value = "json", value_parser = ["json", "text"])]
    log_format: String,
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHBOARD_OPERATOR_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if format == "json" { builder.json().try_init() } else { builder.try_init() };
}

fn render(file: &str, namespace: &str, cluster_domain: String) -> switchboard_operator::Result<()> {
    use std::io::Read;
    let mut yaml = String::new();
    let read =
        if file == "-" { std::io::stdin().read_to_string(&mut yaml).map(|_| ()) } else { std::fs::read_to_string(file).map(|s| yaml = s) };
    read.map_err(|e| switchboard_operator::Error::Startup(format!("cannot read {file}: {e}")))?;
    let settings = switchboard_operator::builders::Settings { cluster_domain, operator: None };
    print!("{}", switchboard_operator::render::render_yaml(&yaml, namespace, &settings)?);
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crd => switchboard_operator::crd::crd_yaml().map(|yaml| print!("{yaml}")),
        Command::Render { file, namespace, cluster_domain } => render(&file, &namespace, cluster_domain),
        Command::Run(args) => {
            init_tracing(&args.log_format);
            let lease = args.operator_namespace.clone().map(|namespace| LeaseConfig {
                namespace,
                name: args.lease_name.clone(),
                identity: args.pod_name.clone().unwrap_or_else(|| format!("switchboard-operator-{:016x}", rand::random::<u64>())),
                duration: std::time::Duration::from_secs(args.lease_seconds),
            });
            let operator = match (args.operator_namespace, args.operator_pod_labels) {
                (Some(namespace), Some(labels)) if !labels.is_empty() => Some(OperatorPods { namespace, labels }),
                _ => None,
            };
            let config = Config {
                metrics_listen: args.metrics_listen,
                cluster_domain: args.cluster_domain,
                operator,
                admin_timeout: std::time::Duration::from_secs(args.admin_timeout_seconds),
                lease,
                stuck_after: std::time::Duration::from_secs(args.stuck_after_seconds),
            };
            match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt.block_on(run(config)),
                Err(e) => Err(switchboard_operator::Error::Startup(format!("cannot start the runtime: {e}"))),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchboard-operator: {e}");
            ExitCode::FAILURE
        }
    }
}
