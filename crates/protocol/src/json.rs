//! `-j` output in the schema of OpenZFS 2.3's `zpool ... -j` and `zfs ... -j`, shared by every
//! verb that prints JSON.
//!
//! # Schema
//! Every document opens with the version of its shape, then the verb's objects, keyed by name
//! (never arrays of rows), so that a script reads `.pools.tank` or `.datasets["tank/a"]`:
//! ```text
//! {
//!   "output_version": {"command": "tarn pool list", "vers_major": 0, "vers_minor": 1},
//!   "pools": {
//!     "tank": {"name": "tank", "type": "POOL", "state": "ONLINE", "guid": "123", "txg": "45",
//!              "properties": {"size": {"value": "1.88G", "source": {"type": "NONE", "data": "-"}}}}
//!   }
//! }
//! ```
//! A property is a value/source pair: `source.type` is `NONE` (a read-only statistic),
//! `DEFAULT`, `LOCAL`, `TEMPORARY`, `RECEIVED` or `INHERITED`, and `source.data` names the
//! dataset inherited from (`-` for the others), as `zfs get -j` prints them.
//!
//! Numbers are strings as people read them (`"1.88G"`, `"27%"`), as OpenZFS prints them
//! without `--json-int`; with `-p` they are exact, and a value that is a whole number is a JSON
//! integer (`1984036864`), as OpenZFS prints them with `-p --json-int`. tarn's `-p` plays both
//! parts: exact values are only useful to a script as numbers.
//!
//! `command` is `tarn VERB` (`tarn pool status`, `tarn list`). `vers_major`/`vers_minor` are
//! those of the OpenZFS schema the verb follows (0.1); a verb that OpenZFS has no `-j` for
//! (`tarn stat`, `tarn debug metaslabs`, ...) keeps its own objects under the same header, so
//! every document tarn prints starts the same way. Keys of objects are sorted.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::units::{human_bytes, utc_time};

/// The version of the OpenZFS 2.3 schema tarn's documents follow.
pub const OUTPUT_VERSION_MAJOR: u32 = 0;
pub const OUTPUT_VERSION_MINOR: u32 = 1;

/// `output_version`: which command printed the document, and the version of its shape.
#[derive(Clone, Debug, Serialize)]
struct OutputVersion<'a> {
    command: &'a str,
    vers_major: u32,
    vers_minor: u32,
}

/// The header first, then the verb's objects (serde_json sorts a map's keys, which would put
/// `datasets` before `output_version`).
#[derive(Serialize)]
struct Framed<'a> {
    output_version: OutputVersion<'a>,
    #[serde(flatten)]
    objects: &'a Map<String, Value>,
}

/// One JSON document: `output_version`, then the objects added to it.
#[derive(Clone, Debug)]
pub struct Document {
    command: String,
    objects: Map<String, Value>,
}

impl Document {
    /// A document of `command` (`tarn pool list`) with no objects yet.
    pub fn new(command: &str) -> Document {
        Document {
            command: command.to_string(),
            objects: Map::new(),
        }
    }

    /// A document of `command` holding the members of `objects` (a JSON object; anything else
    /// goes under `value`).
    pub fn of(command: &str, objects: Value) -> Document {
        let objects = match objects {
            Value::Object(objects) => objects,
            other => Map::from_iter([("value".to_string(), other)]),
        };
        Document {
            command: command.to_string(),
            objects,
        }
    }

    /// Add (or replace) the top-level object `key` (`pools`, `datasets`, ...).
    pub fn insert(&mut self, key: &str, value: Value) {
        self.objects.insert(key.to_string(), value);
    }

    /// The document as pretty-printed text, header first.
    pub fn to_text(&self) -> String {
        let framed = Framed {
            output_version: OutputVersion {
                command: &self.command,
                vers_major: OUTPUT_VERSION_MAJOR,
                vers_minor: OUTPUT_VERSION_MINOR,
            },
            objects: &self.objects,
        };
        serde_json::to_string_pretty(&framed).expect("a JSON value serializes")
    }

    /// Print the document on stdout (`out!`).
    pub fn print(&self) {
        out!("{}", self.to_text());
    }
}

/// Where a property's value comes from (OpenZFS's `zprop_source_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A read-only statistic.
    None,
    Default,
    Local,
    Temporary,
    Received,
    /// Inherited from the dataset named.
    Inherited(String),
}

impl Source {
    /// The source as the SOURCE column prints it: `-`, `default`, `local`, `temporary`,
    /// `received`, `inherited from NAME`. Anything else is read as none.
    pub fn parse(text: &str) -> Source {
        match text {
            "default" => Source::Default,
            "local" => Source::Local,
            "temporary" => Source::Temporary,
            "received" => Source::Received,
            other => match other.strip_prefix("inherited from ") {
                Some(parent) => Source::Inherited(parent.to_string()),
                None => Source::None,
            },
        }
    }

    /// `{"type": "INHERITED", "data": "tank"}`; `data` is `-` but for an inherited value.
    pub fn to_json(&self) -> Value {
        let (kind, data) = match self {
            Source::None => ("NONE", "-"),
            Source::Default => ("DEFAULT", "-"),
            Source::Local => ("LOCAL", "-"),
            Source::Temporary => ("TEMPORARY", "-"),
            Source::Received => ("RECEIVED", "-"),
            Source::Inherited(parent) => ("INHERITED", parent.as_str()),
        };
        serde_json::json!({ "type": kind, "data": data })
    }
}

/// One property: `{"value": VALUE, "source": {"type": ..., "data": ...}}`.
pub fn property(value: Value, source: &Source) -> Value {
    serde_json::json!({ "value": value, "source": source.to_json() })
}

/// A value given in both forms: the human one as a string, or (`exact`) the exact one, an
/// integer when it is a whole number (`-` and names stay strings).
pub fn value(human: &str, exact_text: &str, exact: bool) -> Value {
    if !exact {
        return Value::String(human.to_string());
    }
    match exact_text.parse::<u64>() {
        Ok(number) if !exact_text.is_empty() && exact_text.bytes().all(|b| b.is_ascii_digit()) => {
            Value::from(number)
        }
        _ => Value::String(exact_text.to_string()),
    }
}

/// A byte count: `"1.50M"`, or (`exact`) `1572864`.
pub fn bytes(count: u64, exact: bool) -> Value {
    if exact {
        Value::from(count)
    } else {
        Value::String(human_bytes(count))
    }
}

/// A count or an identifier (errors, a guid, a txg): `"12"`, or (`exact`) `12`.
pub fn number(count: u64, exact: bool) -> Value {
    if exact {
        Value::from(count)
    } else {
        Value::String(count.to_string())
    }
}

/// A time in seconds since the epoch: `"2026-11-22 02:39"` (UTC), or (`exact`) the seconds.
pub fn time(seconds: u64, exact: bool) -> Value {
    if exact {
        Value::from(seconds)
    } else {
        Value::String(utc_time(seconds))
    }
}

/// Objects keyed by name, from (name, object) pairs.
pub fn keyed(objects: impl IntoIterator<Item = (String, Value)>) -> Value {
    Value::Object(objects.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_comes_first_and_carries_the_command() {
        let mut document = Document::new("tarn list");
        document.insert("datasets", keyed([("tank".to_string(), Value::Null)]));
        let text = document.to_text();
        assert!(
            text.trim_start()
                .starts_with("{\n  \"output_version\": {\n    \"command\": \"tarn list\""),
            "{text}"
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["output_version"]["vers_major"], 0);
        assert_eq!(parsed["output_version"]["vers_minor"], 1);
        assert!(parsed["datasets"]["tank"].is_null());
    }

    #[test]
    fn sources_read_as_the_source_column_prints_them() {
        assert_eq!(Source::parse("-"), Source::None);
        assert_eq!(Source::parse("default"), Source::Default);
        assert_eq!(Source::parse("local"), Source::Local);
        assert_eq!(
            Source::parse("inherited from tank/a"),
            Source::Inherited("tank/a".into())
        );
        assert_eq!(
            Source::parse("inherited from tank").to_json(),
            serde_json::json!({"type": "INHERITED", "data": "tank"})
        );
        assert_eq!(
            Source::None.to_json(),
            serde_json::json!({"type": "NONE", "data": "-"})
        );
    }

    #[test]
    fn exact_values_are_integers_when_whole() {
        assert_eq!(value("128K", "131072", false), Value::from("128K"));
        assert_eq!(value("128K", "131072", true), Value::from(131072u64));
        assert_eq!(value("-", "-", true), Value::from("-"));
        assert_eq!(value("1.50x", "1.50", true), Value::from("1.50"));
        assert_eq!(value("lz4", "lz4", true), Value::from("lz4"));
        assert_eq!(bytes(1 << 20, false), Value::from("1M"));
        assert_eq!(bytes(1 << 20, true), Value::from(1u64 << 20));
        assert_eq!(number(7, false), Value::from("7"));
        assert_eq!(time(0, false), Value::from("1970-01-01 00:00"));
    }
}
