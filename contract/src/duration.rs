//! The one duration format of the node's flags and the `McpServer` spec: a whole number of at
//! most [`MAX_DIGITS`] digits followed by `ms`, `s`, `m` or `h`, or a bare whole number of
//! seconds (`7` is seven seconds); always greater than zero. No sign, no fraction, no spaces, one
//! unit only (`1h30m` is refused: write `90m`).
//!
//! The operator's CRD says the same in CEL; a test there compares the two on a table.

use std::time::Duration;

/// Most digits a duration may have (what the CRD's CEL rule allows, and far more than any
/// timeout needs: `999999999h` still fits a [`Duration`]).
pub const MAX_DIGITS: usize = 9;

/// Why a text is not a duration. Each message names the text and says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("a duration cannot be empty: write a whole number followed by ms, s, m or h (such as 30s or 5m)")]
    Empty,
    #[error("{0:?} is negative: a duration must be greater than zero")]
    Negative(String),
    #[error("{0:?} has a fraction: write a whole number of a smaller unit (1500ms, not 1.5s)")]
    Fraction(String),
    #[error("{0:?} does not start with a number: write a whole number followed by ms, s, m or h (such as 30s or 5m)")]
    NoNumber(String),
    #[error("{text:?} has an unknown unit {unit:?}: use ms, s, m or h (one unit only)")]
    UnknownUnit { text: String, unit: String },
    #[error("{0:?} has more than {MAX_DIGITS} digits")]
    TooLong(String),
    #[error("{0:?} must be greater than zero")]
    Zero(String),
}

/// Parse `250ms`, `30s`, `5m`, `1h`, or a bare number of seconds (`30`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.starts_with('-') {
        return Err(DurationError::Negative(text.into()));
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(DurationError::NoNumber(text.into()));
    }
    if unit.starts_with('.') && unit[1..].starts_with(|c: char| c.is_ascii_digit()) {
        return Err(DurationError::Fraction(text.into()));
    }
    if digits.len() > MAX_DIGITS {
        return Err(DurationError::TooLong(text.into()));
    }
    // At most nine digits: no overflow below, even in hours.
    let n: u64 = digits.parse().map_err(|_| DurationError::NoNumber(text.into()))?;
    let millis = match unit {
        "ms" => n,
        "" | "s" => n * 1_000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return Err(DurationError::UnknownUnit { text: text.into(), unit: unit.into() }),
    };
    if millis == 0 {
        return Err(DurationError::Zero(text.into()));
    }
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_a_bare_number_of_seconds_parse() {
        let cases = [
            ("1ms", Duration::from_millis(1)),
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("5m", Duration::from_secs(300)),
            ("1h", Duration::from_secs(3600)),
            ("7", Duration::from_secs(7)),
            ("01s", Duration::from_secs(1)),
            ("999999999ms", Duration::from_millis(999_999_999)),
            ("999999999h", Duration::from_secs(999_999_999 * 3600)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
        }
    }

    #[test]
    fn what_is_not_a_duration_is_refused_with_the_reason() {
        let cases = [
            ("", DurationError::Empty),
            ("-1s", DurationError::Negative("-1s".into())),
            ("1.5s", DurationError::Fraction("1.5s".into())),
            ("1.5", DurationError::Fraction("1.5".into())),
            ("m", DurationError::NoNumber("m".into())),
            ("+5s", DurationError::NoNumber("+5s".into())),
            (" 5s", DurationError::NoNumber(" 5s".into())),
            ("5d", DurationError::UnknownUnit { text: "5d".into(), unit: "d".into() }),
            ("5 m", DurationError::UnknownUnit { text: "5 m".into(), unit: " m".into() }),
            ("1h30m", DurationError::UnknownUnit { text: "1h30m".into(), unit: "h30m".into() }),
            ("1e3s", DurationError::UnknownUnit { text: "1e3s".into(), unit: "e3s".into() }),
            ("5s ", DurationError::UnknownUnit { text: "5s ".into(), unit: "s ".into() }),
            ("1234567890s", DurationError::TooLong("1234567890s".into())),
            ("0", DurationError::Zero("0".into())),
            ("0s", DurationError::Zero("0s".into())),
            ("000ms", DurationError::Zero("000ms".into())),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Err(expected), "{text:?}");
        }
    }

    #[test]
    fn messages_say_what_to_write() {
        let message = |text: &str| parse_duration(text).unwrap_err().to_string();
        assert_eq!(message(""), "a duration cannot be empty: write a whole number followed by ms, s, m or h (such as 30s or 5m)");
        assert_eq!(message("5d"), r#""5d" has an unknown unit "d": use ms, s, m or h (one unit only)"#);
        assert_eq!(message("0h"), r#""0h" must be greater than zero"#);
        assert_eq!(message("1.5s"), r#""1.5s" has a fraction: write a whole number of a smaller unit (1500ms, not 1.5s)"#);
        assert_eq!(message("-1s"), r#""-1s" is negative: a duration must be greater than zero"#);
        assert_eq!(message("1234567890s"), r#""1234567890s" has more than 9 digits"#);
    }
}
