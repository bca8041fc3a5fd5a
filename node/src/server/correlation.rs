//! The ids of server-to-client requests, and the mailbox each one answers to.
//!
//! The id carries the mailbox key, so the node that receives the answer needs nothing but the
//! id to deliver it.

use crate::mailbox::MailboxKey;
use crate::protocol::jsonrpc::RequestId;

const PREFIX: &str = "sb:";

pub fn request_id(key: &MailboxKey) -> RequestId {
    RequestId::String(format!("{PREFIX}{key}"))
}

/// The mailbox an answer is for, or why it can't be one of ours.
pub fn mailbox_key(id: &RequestId) -> Result<MailboxKey, &'static str> {
    match id {
        RequestId::String(s) => match s.strip_prefix(PREFIX) {
            Some(key) if key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(MailboxKey(key.to_string())),
            _ => Err("foreign_id"),
        },
        RequestId::Number(_) => Err("foreign_id"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_foreign_ids_are_refused() {
        let key = MailboxKey::random();
        assert_eq!(mailbox_key(&request_id(&key)), Ok(key));
        assert!(mailbox_key(&RequestId::Number(3)).is_err());
        assert!(mailbox_key(&RequestId::String("sb:zz".into())).is_err());
    }
}
