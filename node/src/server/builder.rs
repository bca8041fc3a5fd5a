//! Building a [`Server`]: identity, settings, offerings, and the stores it correlates through.

use super::config::ServerConfig;
use super::correlation::IdSealer;
use super::handle::{Inner, Server};
use super::link::ClusterLink;
use super::offerings::Offerings;
use super::rendezvous::Rendezvous;
use super::{PromptDef, ResourceDef, ToolDef};
use crate::mailbox::Mailbox;
use crate::mcp_tasks::{InMemoryTaskStore, TaskStore};
use crate::metrics::Metrics;
use crate::protocol::types::Implementation;
use crate::session::SessionStore;
use std::sync::{Arc, RwLock};

/// Builds a [`Server`]: identity, offerings, and the stores it correlates through.
pub struct ServerBuilder {
    cluster: Option<Arc<dyn ClusterLink>>,
    info: Implementation,
    sealer: Option<Arc<IdSealer>>,
    instructions: Option<String>,
    config: ServerConfig,
    offerings: Offerings,
    metrics: Option<Arc<Metrics>>,
    tasks: Option<Arc<dyn TaskStore>>,
}

impl ServerBuilder {
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        ServerBuilder {
            info: Implementation { name: name.into(), version: version.into(), title: None },
            cluster: None,
            sealer: None,
            instructions: None,
            config: ServerConfig::default(),
            offerings: Offerings::default(),
            metrics: None,
            tasks: None,
        }
    }
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }
    /// The key ids are sealed with; every replica of a cluster must share it. Without one, a
    /// random key is used (fine for a single process).
    pub fn id_sealer(mut self, sealer: Arc<IdSealer>) -> Self {
        self.sealer = Some(sealer);
        self
    }
    /// Reach the other replicas (cross-node cancellation).
    pub fn cluster(mut self, link: Arc<dyn ClusterLink>) -> Self {
        self.cluster = Some(link);
        self
    }
    /// Where task records live (Tasks extension): in a cluster, the replicated store. Without
    /// one, this process's memory.
    pub fn task_store(mut self, tasks: Arc<dyn TaskStore>) -> Self {
        self.tasks = Some(tasks);
        self
    }
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }
    pub fn tool(mut self, tool: ToolDef) -> Self {
        self.offerings.tools.push(Arc::new(tool));
        self
    }
    pub fn prompt(mut self, prompt: PromptDef) -> Self {
        self.offerings.prompts.push(Arc::new(prompt));
        self
    }
    pub fn resource(mut self, resource: ResourceDef) -> Self {
        self.offerings.resources.push(Arc::new(resource));
        self
    }
    /// Build the server. Inside a tokio runtime this also starts its periodic sweep of idle
    /// node-local session state (it ends with the last handle on the server).
    pub fn build(self, mailbox: Arc<dyn Mailbox>, sessions: Arc<dyn SessionStore>) -> Server {
        let (announcements, announced) = tokio::sync::mpsc::unbounded_channel();
        let server = Server {
            inner: Arc::new(Inner {
                cluster: self.cluster,
                info: self.info,
                rendezvous: Arc::new(Rendezvous {
                    node_id: self.config.node_id,
                    mailbox,
                    sealer: self.sealer.unwrap_or_else(|| Arc::new(IdSealer::random())),
                    metrics: self.metrics.unwrap_or_default(),
                    elicitation_timeout: self.config.elicitation_timeout,
                    schemas: Default::default(),
                    sampling_timeout: self.config.sampling_timeout,
                    announcements,
                    stopping: Default::default(),
                }),
                instructions: self.instructions,
                config: self.config,
                offerings: RwLock::new(self.offerings),
                sessions,
                tasks: self.tasks.unwrap_or_else(|| Arc::new(InMemoryTaskStore::new())),
                local: Default::default(),
                in_flight: Default::default(),
                modern_calls: Default::default(),
                listeners: Default::default(),
                next_listener: Default::default(),
                session_end_hooks: Default::default(),
            }),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            server.spawn_local_sweep();
            server.spawn_announcements(announced);
        }
        server
    }
}
