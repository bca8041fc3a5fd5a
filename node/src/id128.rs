//! 128 random bits as an id (mailbox keys, task ids), written as 32 hex digits.

use std::fmt;

/// The bits as two halves rather than a `u128`: a `u128` is aligned to 16 bytes, and every
/// record, log entry and future that holds an id would pad around it. Ordered as the number
/// (high half first).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Id128 {
    high: u64,
    low: u64,
}

impl Id128 {
    pub(crate) fn random() -> Self {
        Id128::from_bits(rand::random())
    }

    pub(crate) fn from_bits(bits: u128) -> Self {
        Id128 { high: (bits >> 64) as u64, low: bits as u64 }
    }

    pub(crate) fn bits(self) -> u128 {
        (u128::from(self.high) << 64) | u128::from(self.low)
    }

    /// Exactly 32 hex digits (no sign, no prefix), or nothing.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(text, 16).ok().map(Id128::from_bits)
    }
}

impl fmt::Display for Id128 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.bits())
    }
}

impl fmt::Debug for Id128 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id128({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_the_order_and_bits_of_their_number_without_its_alignment() {
        let numbers = [0, 1, u128::from(u64::MAX), u128::from(u64::MAX) + 1, 1 << 100, u128::MAX - 1, u128::MAX];
        for pair in numbers.windows(2) {
            assert!(Id128::from_bits(pair[0]) < Id128::from_bits(pair[1]), "{pair:?}");
            assert_eq!(Id128::from_bits(pair[1]).bits(), pair[1]);
        }
        assert_eq!(std::mem::size_of::<Id128>(), 16);
        assert!(std::mem::align_of::<Id128>() <= 8, "an id must not make its holders pad to 16 bytes");
    }

    #[test]
    fn ids_are_exactly_32_hex_digits() {
        let id = Id128::from_bits(1 << 64);
        assert_eq!(id.to_string(), "00000000000000010000000000000000");
        assert_eq!(Id128::parse(&id.to_string()), Some(id));
        assert_eq!(Id128::parse("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF"), Some(Id128::from_bits(u128::MAX)));
        for bad in ["", "abc", "g0000000000000000000000000000000", "+0000000000000000000000000000000", "0000000000000000000000000000000000"]
        {
            assert_eq!(Id128::parse(bad), None, "{bad:?}");
        }
    }
}
