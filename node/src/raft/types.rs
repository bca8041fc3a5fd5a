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

impl SnapshotBlob<'_> {
    /// The meta and data of a snapshot file's `bytes`, the data left in the file's own buffer:
    /// under load it is tens of megabytes, and a copy would be held beside the file for a
    /// moment, at a snapshot build's peak of memory.
    pub fn split_file(mut bytes: Vec<u8>) -> Result<(SnapshotMeta, Vec<u8>), rmp_serde::decode::Error> {
        let (meta, data) = {
            let SnapshotBlob { meta, data, .. } = decode(&bytes)?;
            let data = match data {
                std::borrow::Cow::Borrowed(slice) => {
                    let start = slice.as_ptr() as usize - bytes.as_ptr() as usize;
                    Ok(start..start + slice.len())
                }
                std::borrow::Cow::Owned(data) => Err(data),
            };
            (meta, data)
        };
        match data {
            Ok(range) => {
                bytes.truncate(range.end);
                bytes.drain(..range.start);
                Ok((meta, bytes))
            }
            Err(data) => Ok((meta, data)),
        }
    }
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

    #[test]
    fn a_snapshot_file_is_split_into_meta_and_data_without_copying_the_data() {
        let data: Vec<u8> = (0..=255).cycle().take(100_000).collect();
        let meta = SnapshotMeta { last_log_id: Some(openraft::testing::log_id::<TypeConfig>(3, 1, 42)), ..Default::default() };
        let bytes = encode(&SnapshotBlob { vote: None, meta: meta.clone(), data: data.as_slice().into() });
        let buffer = bytes.as_ptr();
        let (split_meta, split_data) = SnapshotBlob::split_file(bytes).unwrap();
        assert_eq!((split_meta, &split_data), (meta, &data));
        assert_eq!(split_data.as_ptr(), buffer, "the data is the file's own buffer, not a copy");
        assert!(SnapshotBlob::split_file(vec![0x93, 0xc0]).is_err(), "a damaged file is an error");
    }
}
