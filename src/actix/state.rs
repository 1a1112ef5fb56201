//! actix-session's state (keys to JSON texts) as a JSON map the store
//! encodes compactly, and back, text for text.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::json_map::CodecError;

/// The key under which a record lists the keys whose texts it keeps
/// whole (as JSON strings holding the text), where parsing the text and
/// writing it back would not give the same text. No key of an app's state
/// may begin with its NUL byte.
pub const RAW_TEXTS: &str = "\0raw";

/// The state as a JSON map: each text parsed where that keeps it exactly,
/// kept whole otherwise.
pub(crate) fn values(state: HashMap<String, String>) -> Result<HashMap<String, Value>, CodecError> {
    let mut raw = Vec::new();
    let mut out = HashMap::with_capacity(state.len() + 1);
    for (key, text) in state {
        if key.starts_with('\0') {
            return Err(CodecError::new(format!(
                "session state key {key:?} begins with a NUL byte, which the store reserves"
            )));
        }
        let value = match serde_json::from_str::<Value>(&text) {
            Ok(value) if serde_json::to_string(&value).is_ok_and(|again| again == text) => value,
            _ => {
                raw.push(key.clone());
                Value::String(text)
            }
        };
        out.insert(key, value);
    }
    if !raw.is_empty() {
        // Sorted, so equal states encode to equal bytes.
        raw.sort_unstable();
        out.insert(
            RAW_TEXTS.to_owned(),
            Value::Array(raw.into_iter().map(Value::String).collect()),
        );
    }
    Ok(out)
}

/// The state a JSON map written by [`values`] holds.
pub(super) fn texts(mut data: HashMap<String, Value>) -> Result<HashMap<String, String>, String> {
    let raw: HashSet<String> = match data.remove(RAW_TEXTS) {
        None => HashSet::new(),
        Some(Value::Array(keys)) => keys
            .into_iter()
            .map(|k| match k {
                Value::String(k) => Ok(k),
                other => Err(format!("{RAW_TEXTS:?} lists {other}, not a key")),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("{RAW_TEXTS:?} holds {other}, not a list of keys")),
    };
    data.into_iter()
        .map(|(key, value)| {
            let text = if raw.contains(&key) {
                match value {
                    Value::String(text) => text,
                    other => return Err(format!("the text kept whole under {key:?} is {other}")),
                }
            } else {
                serde_json::to_string(&value).map_err(|e| e.to_string())?
            };
            Ok((key, text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn texts_come_back_exactly_parsed_or_whole() {
        let given = state(&[
            ("actix_identity.user_id", r#""42""#),
            ("actix_identity.logged_in_at", "1700000000"),
            ("counter", "7"),
            ("flash", r#"{"level":"info","text":"Saved"}"#),
            // Not what serde_json writes: kept whole.
            ("spaced", r#"{ "b": 1, "a": 2 }"#),
            ("float", "1.50"),
            ("not json", "hello"),
            ("empty", ""),
        ]);
        let values = values(given.clone()).unwrap();
        assert_eq!(values["counter"], Value::from(7));
        assert_eq!(
            values["spaced"],
            Value::String(r#"{ "b": 1, "a": 2 }"#.into())
        );
        let kept: Vec<&str> = values[RAW_TEXTS]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(kept, ["empty", "float", "not json", "spaced"]);
        assert_eq!(texts(values).unwrap(), given);
    }

    #[test]
    fn a_reserved_key_is_refused_and_a_bad_list_is_an_error() {
        assert!(values(state(&[("\0raw", "1")])).is_err());
        assert!(values(state(&[("\0x", "1")])).is_err());
        let mut data = HashMap::new();
        data.insert(RAW_TEXTS.to_owned(), Value::from(3));
        assert!(texts(data).is_err());
        let mut data = HashMap::new();
        data.insert(RAW_TEXTS.to_owned(), Value::Array(vec!["k".into()]));
        data.insert("k".to_owned(), Value::from(3));
        assert!(texts(data).is_err());
    }
}
