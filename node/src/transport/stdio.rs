//! stdio transport: newline-delimited JSON-RPC on stdin/stdout. Logs go to stderr only.

use crate::protocol::jsonrpc::{self, ErrorObject, INVALID_REQUEST, Message};
use crate::server::{Outbound, Outgoing, Server};
use crate::session::SessionRecord;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Serve one client until `input` ends. The single session lives as long as the process.
pub async fn run(
    server: Server,
    input: impl AsyncBufRead + Unpin,
    mut output: impl AsyncWrite + Unpin + Send + 'static,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
    let out = Outbound::new(tx);
    let writer = tokio::spawn(async move {
        while let Some(outgoing) = rx.recv().await {
            if let Outgoing::Message(message) = outgoing {
                let mut line = message.to_json();
                line.push('\n');
                output.write_all(line.as_bytes()).await?;
                output.flush().await?;
            }
        }
        Ok::<_, std::io::Error>(())
    });
    let send = |message: Message| {
        let _ = out.send(Outgoing::Message(Box::new(message)));
    };
    let mut session: Option<SessionRecord> = None;
    let mut lines = input.lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let message = match jsonrpc::parse_message(line.as_bytes()) {
            Ok(m) => m,
            Err(e) => {
                send(e.to_message());
                continue;
            }
        };
        match (message, &session) {
            (Message::Request { id, method, params }, _) if method == "initialize" => match server.initialize(params).await {
                Ok((record, result)) => {
                    server.attach_notifier(&record.id, out.clone());
                    session = Some(record);
                    send(Message::response(id, result));
                }
                Err(error) => send(Message::error(Some(id), error)),
            },
            (Message::Request { id, method, params }, Some(s)) => server.spawn_request(s.clone(), id, method, params, out.clone()),
            (Message::Request { id, .. }, None) => {
                send(Message::error(Some(id), ErrorObject::new(INVALID_REQUEST, "send initialize first")));
            }
            (Message::Notification { method, params }, Some(s)) => server.handle_notification(s, &method, params),
            (answer @ (Message::Response { .. } | Message::Error { .. }), Some(s)) => {
                let (server, s) = (server.clone(), s.clone());
                // One process, an in-memory mailbox: a delivery cannot be refused for want of a quorum.
                tokio::spawn(async move { drop(server.handle_client_response(&s, answer).await) });
            }
            (_, None) => tracing::debug!("ignoring a message before initialize"),
        }
    }
    if let Some(s) = &session {
        let _ = server.terminate(&s.id).await;
    }
    drop(out);
    writer.await.map_err(std::io::Error::other)?
}
