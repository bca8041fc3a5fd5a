//! JSON text known to parse.

use serde::{Deserialize, Serialize};

/// JSON text known to parse: a delivered answer, kept as text in the log and the state (compact,
/// compared byte for byte) and decoded when it wakes its waiter. Text that does not parse is
/// refused when a command is decoded, so it never reaches the log or the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JsonText(String);

/// Text that is not JSON.
#[derive(Debug, thiserror::Error)]
#[error("not JSON: {0}")]
pub struct NotJson(#[source] serde_json::Error);

impl JsonText {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value. Cannot fail: the text was checked when this was built.
    pub fn decode(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).expect("JsonText holds valid JSON")
    }
}

impl From<&serde_json::Value> for JsonText {
    /// Without the spare capacity writing leaves: a text may be kept for minutes.
    fn from(value: &serde_json::Value) -> Self {
        JsonText(kept(value.to_string()))
    }
}

/// `text` in an allocation of its own size, for text kept a long time (a parked call's
/// request, a delivered answer). Written text has up to as much again in spare capacity, and a
/// shrink does not reliably give it back: mimalloc leaves a block shrunk to half its size or
/// more where it is. A copy when there is spare capacity does.
pub fn kept(text: String) -> String {
    if text.len() == text.capacity() { text } else { text.as_str().to_owned() }
}

impl TryFrom<String> for JsonText {
    type Error = NotJson;

    fn try_from(text: String) -> Result<Self, NotJson> {
        serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(NotJson)?;
        Ok(JsonText(text))
    }
}

impl From<JsonText> for String {
    fn from(text: JsonText) -> String {
        text.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_text_has_no_spare_capacity_and_an_exact_one_is_not_copied() {
        let mut written = String::with_capacity(4096);
        written.push_str("{\"action\":\"accept\"}");
        let kept_text = kept(written.clone());
        assert_eq!((kept_text.as_str(), kept_text.capacity()), (written.as_str(), written.len()));
        let exact = String::from("{}");
        let at = exact.as_ptr();
        let same = kept(exact);
        assert_eq!(same.as_ptr(), at, "already its own size: the same allocation");
        let text = JsonText::from(&serde_json::json!({"a": "b".repeat(1000)}));
        assert_eq!(text.0.capacity(), text.0.len());
    }
}
