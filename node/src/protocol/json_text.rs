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
        let mut text = value.to_string();
        text.shrink_to_fit();
        JsonText(text)
    }
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
