//! Where a request's (or a session's standalone stream's) messages go. Each transport brings
//! its own sink: an SSE stream's log, a channel to stdout.

use crate::protocol::jsonrpc::Message;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Something the server sends towards the client while handling one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// Boxed: a parked request's channel preallocates slots, and a bare `Message` is large.
    Message(Box<Message>),
    /// End the current HTTP response now and let the client resume with `Last-Event-ID`
    /// (SSE polling). Transports without streams ignore it.
    Disconnect,
}

/// Where a request's (or a session's) outgoing messages go. Dropping the last clone tells the
/// sink its producer is done.
#[derive(Clone)]
pub struct Outbound(Arc<dyn OutboundSink>);

/// What an [`Outbound`] writes to; each transport brings its own.
pub trait OutboundSink: Send + Sync + 'static {
    fn send(&self, outgoing: Outgoing) -> Result<(), StreamClosed>;
}

/// The client can no longer be reached through this outbound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the client's stream is closed")]
pub struct StreamClosed;

impl Outbound {
    pub fn new(sink: impl OutboundSink) -> Self {
        Outbound(Arc::new(sink))
    }
    pub fn send(&self, outgoing: Outgoing) -> Result<(), StreamClosed> {
        self.0.send(outgoing)
    }
}

impl<S: OutboundSink> From<Arc<S>> for Outbound {
    fn from(sink: Arc<S>) -> Self {
        Outbound(sink)
    }
}

/// A channel, for transports that write from a task of their own (stdio).
impl OutboundSink for mpsc::UnboundedSender<Outgoing> {
    fn send(&self, outgoing: Outgoing) -> Result<(), StreamClosed> {
        mpsc::UnboundedSender::send(self, outgoing).map_err(|_| StreamClosed)
    }
}
