//! The `switchboard` command line. Every flag has a `SWITCHBOARD_*` environment twin.

use crate::mailbox::InMemoryMailbox;
use crate::metrics::Metrics;
use crate::server::{Server, ServerBuilder, ServerConfig};
use crate::session::InMemorySessionStore;
use crate::tools::ToolSet;
use crate::transport::{http, stdio};
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "switchboard", version, about = "Clustered MCP server runtime")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one node over Streamable HTTP.
    Serve(ServeArgs),
    /// Run the same server over stdin/stdout (one process, in-memory stores).
    Stdio(CommonArgs),
}

/// Settings shared by every way of running a server.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Built-in tool set to register.
    #[arg(long, env = "SWITCHBOARD_TOOLS", value_enum, default_value = "default")]
    pub tools: ToolSet,
    /// How long a tool waits for the user to answer an elicitation.
    #[arg(long, env = "SWITCHBOARD_ELICITATION_TIMEOUT", value_parser = parse_duration, default_value = "5m")]
    pub elicitation_timeout: Duration,
    /// How long a tool waits for the client's LLM to answer a sampling request.
    #[arg(long, env = "SWITCHBOARD_SAMPLING_TIMEOUT", value_parser = parse_duration, default_value = "10m")]
    pub sampling_timeout: Duration,
    /// How long an idle session stays valid.
    #[arg(long, env = "SWITCHBOARD_SESSION_TTL", value_parser = parse_duration, default_value = "1h")]
    pub session_ttl: Duration,
    /// Items per page in list results.
    #[arg(long, env = "SWITCHBOARD_PAGE_SIZE", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub page_size: u32,
    /// Log format on stderr.
    #[arg(long, env = "SWITCHBOARD_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// This node's id; defaults to the ordinal at the end of the hostname (`name-2` is 2).
    #[arg(long, env = "SWITCHBOARD_NODE_ID")]
    pub node_id: Option<u64>,
    /// Address of the MCP endpoint.
    #[arg(long, env = "SWITCHBOARD_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "SWITCHBOARD_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// Host names accepted in Host/Origin (DNS-rebinding protection); `*` accepts any.
    #[arg(long, env = "SWITCHBOARD_ALLOWED_HOSTS", value_delimiter = ',', default_value = "localhost,127.0.0.1,[::1]")]
    pub allowed_hosts: Vec<String>,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "SWITCHBOARD_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Refuse GET (405) instead of opening a standalone server-to-client stream.
    #[arg(long, env = "SWITCHBOARD_NO_STANDALONE_STREAM")]
    pub no_standalone_stream: bool,
}

/// Errors that stop the command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("could not listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Parse `250ms`, `30s`, `5m`, `1h` (or a bare number of seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("invalid duration {text:?}: expected a number and a unit such as 30s or 5m"))?;
    let millis = match unit {
        "ms" => n,
        "" | "s" => n.saturating_mul(1000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => return Err(format!("invalid duration {text:?}: unit must be ms, s, m or h")),
    };
    if millis == 0 {
        return Err(format!("invalid duration {text:?}: must be greater than zero"));
    }
    Ok(Duration::from_millis(millis))
}

/// The ordinal at the end of a StatefulSet pod's hostname.
pub fn ordinal_from_hostname(hostname: &str) -> Option<u64> {
    hostname.rsplit_once('-').and_then(|(_, n)| n.parse().ok())
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHBOARD_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

fn build_server(common: &CommonArgs, node_id: u64, metrics: Arc<Metrics>) -> Server {
    let config = ServerConfig {
        node_id,
        elicitation_timeout: common.elicitation_timeout,
        sampling_timeout: common.sampling_timeout,
        page_size: common.page_size as usize,
    };
    let builder = ServerBuilder::new("switchboard", env!("CARGO_PKG_VERSION")).config(config).metrics(metrics);
    common.tools.register(builder).build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(common.session_ttl)))
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, CliError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|source| CliError::Listen { addr, source })
}

/// The metrics and health endpoints.
pub fn metrics_router(metrics: Arc<Metrics>) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/metrics", get(move || { let m = metrics.clone(); async move { m.encode() } }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
}

async fn serve(args: ServeArgs) -> Result<(), CliError> {
    let node_id = match args.node_id {
        Some(id) => id,
        None => {
            let host = std::env::var("HOSTNAME").ok().or_else(|| std::fs::read_to_string("/etc/hostname").ok()).unwrap_or_default();
            // A lone node needs no particular id; cluster members get theirs from the pod name.
            ordinal_from_hostname(host.trim()).unwrap_or_else(|| {
                tracing::info!(hostname = host.trim(), "hostname has no ordinal; running as node 0");
                0
            })
        }
    };
    let metrics = Arc::new(Metrics::new());
    let server = build_server(&args.common, node_id, metrics.clone());
    let config = http::HttpConfig {
        max_body_bytes: args.max_body_bytes,
        allowed_hosts: args.allowed_hosts.clone(),
        standalone_stream: !args.no_standalone_stream,
        ..Default::default()
    };
    let mcp = bind(args.listen).await?;
    let metrics_listener = bind(args.metrics_listen).await?;
    tracing::info!(node_id, listen = %mcp.local_addr()?, metrics = %metrics_listener.local_addr()?, "switchboard node serving MCP at /mcp");
    let metrics_task = tokio::spawn(http::serve(metrics_listener, metrics_router(metrics), shutdown_signal()));
    http::serve(mcp, http::router(server, config), shutdown_signal()).await?;
    metrics_task.abort();
    Ok(())
}

async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve(args) => {
            init_tracing(args.common.log_format);
            serve(args).await
        }
        Command::Stdio(common) => {
            init_tracing(common.log_format);
            let server = build_server(&common, 0, Arc::new(Metrics::new()));
            let stdin = tokio::io::BufReader::new(tokio::io::stdin());
            Ok(stdio::run(server, stdin, tokio::io::stdout()).await?)
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchboard: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        for bad in ["", "m", "5x", "-1s", "0s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn ordinals() {
        assert_eq!(ordinal_from_hostname("demo-2"), Some(2));
        assert_eq!(ordinal_from_hostname("my-server-10"), Some(10));
        assert_eq!(ordinal_from_hostname("laptop"), None);
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
