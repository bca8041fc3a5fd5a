//! openraft type configuration, and the snapshot's encoding on disk and on the wire.

use super::state_machine::{Request, Response};
pub use crate::peer::codec::{decode, encode};
use serde::Serialize;
use std::fmt;

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}@{}", self.command, self.now)
    }
}

openraft::declare_raft_types!(
    /// Switchboard's Raft types: mailbox/session commands, peer addresses as nodes.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
);

pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, Vec<u8>>;

pub fn io_error(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    std::io::Error::other(e)
}

/// A snapshot in its file (a follower is sent it in pieces: see `super::snapshot_stream`). The
/// state is one MessagePack binary: serde would otherwise write a byte vector as an array of
/// integers, one per byte.
#[derive(Serialize, serde::Deserialize)]
pub struct SnapshotBlob<'a> {
    /// Always `None`: it carried the leader's vote when snapshots were sent whole; kept so the
    /// file format does not change.
    pub vote: Option<Vote>,
    pub meta: SnapshotMeta,
    #[serde(borrow, with = "blob")]
    pub data: std::borrow::Cow<'a, [u8]>,
}

/// Serde for byte data as one MessagePack binary.
pub(crate) mod blob {
    use serde::{Deserializer, Serializer, de};
    use std::borrow::Cow;

    pub fn serialize<S: Serializer>(data: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(data)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Cow<'de, [u8]>, D::Error> {
        struct Bytes;
        impl<'de> de::Visitor<'de> for Bytes {
            type Value = Cow<'de, [u8]>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("binary snapshot data")
            }
            fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(v))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
                Ok(Cow::Owned(v))
            }
        }
        deserializer.deserialize_bytes(Bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_data_is_one_binary_not_an_array_of_integers() {
        let data: Vec<u8> = (0..=255).cycle().take(10_000).collect();
        let meta = SnapshotMeta::default();
        let bytes = encode(&SnapshotBlob { vote: None, meta: meta.clone(), data: data.as_slice().into() });
        assert!(bytes.len() < data.len() + 200, "{} bytes for {} of data", bytes.len(), data.len());
        let back: SnapshotBlob = decode(&bytes).unwrap();
        assert_eq!((back.meta, back.data.as_ref()), (meta, data.as_slice()));
    }
}
