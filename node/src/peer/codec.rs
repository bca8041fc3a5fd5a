//! The binary codec of the peer port and of the Raft log on disk.

use serde::Serialize;

/// MessagePack with field names: compact, self-describing (so `serde_json::Value` and optional
/// fields survive), and stable across field reordering.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("in-memory values always encode")
}

pub fn decode<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, rmp_serde::decode::Error> {
    rmp_serde::from_slice(bytes)
}
