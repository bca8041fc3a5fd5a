//! The binary codec of the peer port and of the Raft log on disk.

use serde::Serialize;

/// MessagePack with field names: compact, self-describing (so `serde_json::Value` and optional
/// fields survive), and stable across field reordering.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("in-memory values always encode")
}

/// [`encode`] appending to `out` (no buffer of its own, grown and copied per value).
pub fn encode_into<T: Serialize>(out: &mut Vec<u8>, value: &T) {
    write_encoded(out, value).expect("in-memory values always encode")
}

/// [`encode`] written to `writer` as it is made: a large value is never held encoded whole.
pub fn write_encoded<W: std::io::Write, T: Serialize>(writer: &mut W, value: &T) -> std::io::Result<()> {
    rmp_serde::encode::write_named(writer, value).map_err(std::io::Error::other)
}

pub fn decode<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, rmp_serde::decode::Error> {
    rmp_serde::from_slice(bytes)
}

/// How many bytes [`encode`] makes of `value`, counted without building them.
pub fn encoded_len<T: Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    rmp_serde::encode::write_named(&mut count, value).expect("in-memory values always encode");
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_into_appends_what_encode_makes() {
        let value = serde_json::json!({"answer": "x".repeat(300), "n": [1, 2.5, null, true]});
        let mut out = b"head".to_vec();
        encode_into(&mut out, &value);
        assert_eq!(&out[..4], b"head");
        assert_eq!(out[4..], encode(&value));
    }

    #[test]
    fn encoded_len_counts_what_encode_writes() {
        let value = serde_json::json!({"answer": "x".repeat(70_000), "n": [1, 2.5, null, true], "nested": {"k": "v"}});
        assert_eq!(encoded_len(&value), encode(&value).len());
    }
}
