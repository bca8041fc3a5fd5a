//! Server notifications not tied to a request (`list_changed`, `resources/updated`), fanned
//! out to the standalone streams of every replica, and what the server asks of the other
//! replicas.

use super::handle::Server;
use super::link::Notice;
use super::listeners::Listener;
use super::local::LocalSession;
use super::outbound::Outgoing;
use crate::protocol::jsonrpc::Message;
use crate::session::SessionId;
use serde_json::json;
use std::sync::Arc;
use tokio::sync::mpsc;

impl Server {
    /// Tell subscribed sessions that a resource changed (`notifications/resources/updated`),
    /// on every replica.
    pub fn notify_resource_updated(&self, uri: &str) {
        self.publish(Notice::ResourceUpdated { uri: uri.to_string() });
    }

    pub(super) fn notify_all(&self, method: &str) {
        self.publish(Notice::ListChanged { method: method.to_string() });
    }

    fn publish(&self, notice: Notice) {
        if let Some(cluster) = &self.inner.cluster {
            cluster.notify_elsewhere(&notice);
        }
        self.deliver_notice(notice);
    }

    /// Deliver a notice to the standalone streams attached to this node.
    pub fn deliver_notice(&self, notice: Notice) {
        // Listen streams: a closed one is dropped here.
        self.inner.listeners.lock().unwrap().retain(|(_, listener)| match listener.message(&notice) {
            Some(message) => listener.out.send(Outgoing::Message(Box::new(message))).is_ok(),
            None => true,
        });
        let attached: Vec<(SessionId, Arc<LocalSession>)> = self.inner.local.with_notifier();
        if attached.is_empty() {
            return;
        }
        let server = self.clone();
        tokio::spawn(async move {
            for (id, local) in attached {
                let message = match &notice {
                    Notice::ListChanged { method } => Message::notification(method.clone(), json!({})),
                    Notice::ResourceUpdated { uri } => match server.inner.sessions.get(&id).await {
                        Ok(Some(record)) if record.subscriptions.contains(uri) => {
                            Message::notification("notifications/resources/updated", json!({"uri": uri}))
                        }
                        _ => continue,
                    },
                };
                notify(&local, message);
            }
        });
    }
}

impl Server {
    /// Publish what handlers announce ([`crate::server::RequestContext::announce`]). Holds the
    /// server weakly: the task ends with it.
    pub(super) fn spawn_announcements(&self, mut announced: mpsc::UnboundedReceiver<Notice>) {
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some(notice) = announced.recv().await {
                let Some(inner) = inner.upgrade() else { return };
                Server { inner }.publish(notice);
            }
        });
    }

    /// Open a `subscriptions/listen` stream on `out`: its acknowledgement first, then every
    /// notice it asked for, from any replica, until the stream closes. The listener stays
    /// registered while the returned handle lives: the transport drops it with the stream.
    pub fn listen(&self, listener: Listener) -> ListenHandle {
        let id = self.inner.next_listener.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if listener.out.send(Outgoing::Message(Box::new(listener.acknowledgement()))).is_ok() {
            self.inner.listeners.lock().unwrap().push((id, listener));
        }
        ListenHandle { inner: Arc::downgrade(&self.inner), id }
    }

    /// Open listen streams on this node.
    pub fn listeners(&self) -> usize {
        self.inner.listeners.lock().unwrap().len()
    }
}

/// Keeps a listen stream registered; dropped with the stream (the client closed it).
pub struct ListenHandle {
    inner: std::sync::Weak<super::handle::Inner>,
    id: u64,
}

impl Drop for ListenHandle {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.listeners.lock().unwrap().retain(|(id, _)| *id != self.id);
        }
    }
}

fn notify(session: &LocalSession, message: Message) {
    if let Some(out) = session.notifier.lock().unwrap().as_ref() {
        let _ = out.send(Outgoing::Message(Box::new(message)));
    }
}
