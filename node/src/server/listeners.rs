//! `subscriptions/listen` streams (2026-07-28): what each asked to hear. The notices that feed
//! them are the ones legacy sessions' standalone streams get, fanned out to every replica as
//! before (`super::notices`); a filter lives with its stream, on the node that holds it.

use super::link::Notice;
use super::outbound::Outbound;
use crate::protocol::era::META_SUBSCRIPTION_ID;
use crate::protocol::jsonrpc::Message;
use serde_json::{Map, Value, json};

/// What one listen stream asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListenFilter {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    /// Resources whose `notifications/resources/updated` it wants.
    pub uris: Vec<String>,
}

impl ListenFilter {
    /// The filter of `subscriptions/listen` params (`notifications: {toolsListChanged,
    /// promptsListChanged, resourcesListChanged, resourceSubscriptions}`); unknown members are
    /// ignored.
    pub fn from_params(params: Option<&Value>) -> Result<ListenFilter, String> {
        let Some(wanted) = params.and_then(|p| p.get("notifications")) else { return Ok(ListenFilter::default()) };
        let Some(wanted) = wanted.as_object() else { return Err("notifications must be an object".into()) };
        let flag = |name: &str| wanted.get(name).and_then(Value::as_bool).unwrap_or(false);
        let uris = match wanted.get("resourceSubscriptions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(uris)) => {
                uris.iter().map(|u| u.as_str().map(str::to_owned)).collect::<Option<_>>().ok_or("resourceSubscriptions must be URIs")?
            }
            Some(_) => return Err("resourceSubscriptions must be an array of URIs".into()),
        };
        Ok(ListenFilter {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged"),
            resources: flag("resourcesListChanged"),
            uris,
        })
    }

    /// The `notifications` member of the acknowledgement: what this stream will carry.
    pub fn honoured(&self) -> Value {
        let mut honoured = Map::new();
        for (name, on) in [("toolsListChanged", self.tools), ("promptsListChanged", self.prompts), ("resourcesListChanged", self.resources)]
        {
            if on {
                honoured.insert(name.into(), json!(true));
            }
        }
        if !self.uris.is_empty() {
            honoured.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(honoured)
    }

    pub fn admits(&self, notice: &Notice) -> bool {
        match notice {
            Notice::ListChanged { method } => match method.as_str() {
                "notifications/tools/list_changed" => self.tools,
                "notifications/prompts/list_changed" => self.prompts,
                "notifications/resources/list_changed" => self.resources,
                _ => false,
            },
            Notice::ResourceUpdated { uri } => self.uris.iter().any(|u| u == uri),
        }
    }
}

/// One open listen stream on this node.
pub struct Listener {
    /// The id of the listen request, which tags every notification on the stream.
    pub subscription: Value,
    pub filter: ListenFilter,
    pub out: Outbound,
}

impl Listener {
    /// `notice` as this stream sends it, if it asked for it.
    pub fn message(&self, notice: &Notice) -> Option<Message> {
        if !self.filter.admits(notice) {
            return None;
        }
        let meta = json!({META_SUBSCRIPTION_ID: self.subscription});
        Some(match notice {
            Notice::ListChanged { method } => Message::notification(method.clone(), json!({"_meta": meta})),
            Notice::ResourceUpdated { uri } => Message::notification("notifications/resources/updated", json!({"uri": uri, "_meta": meta})),
        })
    }

    /// The first frame of the stream: what it will carry, under its subscription id.
    pub fn acknowledgement(&self) -> Message {
        let params = json!({"_meta": {META_SUBSCRIPTION_ID: self.subscription}, "notifications": self.filter.honoured()});
        Message::notification("notifications/subscriptions/acknowledged", params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_carries_only_what_it_asked_for_tagged_with_its_id() {
        let params = json!({"notifications": {"promptsListChanged": true, "resourceSubscriptions": ["test://a"], "other": 1}});
        let filter = ListenFilter::from_params(Some(&params)).unwrap();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let listener = Listener { subscription: json!("listen-1"), filter, out: Outbound::new(tx) };
        assert!(listener.message(&Notice::ListChanged { method: "notifications/tools/list_changed".into() }).is_none());
        let prompts = listener.message(&Notice::ListChanged { method: "notifications/prompts/list_changed".into() }).unwrap();
        assert_eq!(prompts.to_value()["params"]["_meta"][META_SUBSCRIPTION_ID], "listen-1");
        assert!(listener.message(&Notice::ResourceUpdated { uri: "test://b".into() }).is_none());
        let updated = listener.message(&Notice::ResourceUpdated { uri: "test://a".into() }).unwrap().to_value();
        assert_eq!(updated["params"]["uri"], "test://a");
        let ack = listener.acknowledgement().to_value();
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["notifications"], json!({"promptsListChanged": true, "resourceSubscriptions": ["test://a"]}));
        assert!(ListenFilter::from_params(Some(&json!({"notifications": {"resourceSubscriptions": [1]}}))).is_err());
    }
}
