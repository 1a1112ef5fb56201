//! The key-per-session baselines, as the well-known session stores lay
//! sessions out: one top-level key per session, expired by Redis itself.
//!
//! - `json-setex`: `session:<40 hex>` -> `{"identity_id":..,"expires_at":..}`
//!   (with an `"attrs"` member holding the attributes as JSON when there are
//!   any), the usual store;
//! - `packed-setex`: the 20 id bytes -> the MessagePack record;
//! - `hash-per-session`: the 20 id bytes -> HASH `i` identity, `e` expiry,
//!   `a` attributes (MessagePack, left out when empty).
//!
//! Every operation is one script, like the bucketed layout's, so the
//! layouts differ only in what Redis holds.

use redis::{Script, ScriptInvocation};
use serde::{Deserialize, Serialize};

use super::scripts::{
    self, HASH_INSERT, HASH_REMOVE, HASH_REPLACE, HASH_TOUCH, PIPELINE_CHUNK, STRING_INSERT,
    STRING_REMOVE, STRING_REPLACE, STRING_TOUCH,
};
use sessionpack::SessionId;
use sessionpack::error::{Error, Result};
use sessionpack::identity::Identity;
use sessionpack::session::layout::{Inserted, Layout, Stored, Written};
use sessionpack::session::record;
use sessionpack::ttl::{Deadline, check_ttl};

/// How a key-per-session layout encodes a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    /// A JSON string under `session:<40 hex>`.
    JsonSetex,
    /// A MessagePack string under the binary id.
    PackedSetex,
    /// A HASH of identity, expiry and attributes under the binary id.
    HashPerSession,
}

impl Encoding {
    /// The layout's report name.
    pub fn name(self) -> &'static str {
        match self {
            Self::JsonSetex => "json-setex",
            Self::PackedSetex => "packed-setex",
            Self::HashPerSession => "hash-per-session",
        }
    }
}

/// One top-level key per session.
#[derive(Clone)]
pub struct KeyPerSession<C> {
    conn: C,
    encoding: Encoding,
    prefix: Vec<u8>,
}

impl<C> std::fmt::Debug for KeyPerSession<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPerSession")
            .field("encoding", &self.encoding)
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .finish_non_exhaustive()
    }
}

/// An identity as these JSON stores write it: a number, a string for a
/// name, `{"uuid": "…"}` for a UUID.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum JsonIdentity {
    Int(u64),
    Name(String),
    Uuid { uuid: String },
}

impl From<Identity> for JsonIdentity {
    fn from(identity: Identity) -> Self {
        match identity {
            Identity::Int(n) => Self::Int(n),
            Identity::Name(s) => Self::Name(s),
            uuid @ Identity::Uuid(_) => Self::Uuid {
                uuid: uuid.to_string(),
            },
        }
    }
}

impl TryFrom<JsonIdentity> for Identity {
    type Error = String;

    fn try_from(json: JsonIdentity) -> std::result::Result<Self, String> {
        match json {
            JsonIdentity::Int(n) => Ok(Self::Int(n)),
            JsonIdentity::Name(s) => Identity::name(s).map_err(|e| e.to_string()),
            JsonIdentity::Uuid { uuid } => {
                let hex: String = uuid.chars().filter(|&c| c != '-').collect();
                let bytes = hex::decode(&hex).map_err(|e| format!("identity: {e}"))?;
                Ok(Self::Uuid(bytes.try_into().map_err(|_| {
                    format!("identity: {uuid:?} is not a UUID")
                })?))
            }
        }
    }
}

/// A JSON value's head; the attributes, already JSON, follow it.
#[derive(Serialize)]
struct JsonOut {
    identity_id: JsonIdentity,
    expires_at: u64,
}

#[derive(Deserialize)]
struct JsonIn {
    identity_id: JsonIdentity,
    expires_at: u64,
    attrs: Option<Attrs>,
}

/// JSON attributes read straight into MessagePack, in the order written.
struct Attrs(Vec<u8>);

impl<'de> Deserialize<'de> for Attrs {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> std::result::Result<Self, D::Error> {
        let mut out = Vec::new();
        serde_transcode::transcode(de, &mut rmp_serde::Serializer::new(&mut out))
            .map_err(serde::de::Error::custom)?;
        Ok(Self(out))
    }
}

/// A HASH session's `i` field: an integer identity in decimal (as such
/// stores keep user ids), any other as its MessagePack head.
fn hash_identity(field: &[u8]) -> std::result::Result<Identity, String> {
    match field.first() {
        Some(b'0'..=b'9') => std::str::from_utf8(field)
            .ok()
            .and_then(|t| t.parse().ok())
            .map(Identity::Int)
            .ok_or_else(|| "identity: not a decimal integer".to_owned()),
        _ => {
            let mut rest = field;
            let identity = Identity::decode(&mut rest)?;
            if !rest.is_empty() {
                return Err("identity: trailing bytes".into());
            }
            Ok(identity)
        }
    }
}

/// A record as JSON, with `"expires_at":0` for the script to fill in.
fn record_to_json(bytes: &[u8]) -> std::result::Result<String, String> {
    let (identity_id, attrs) = record::split(bytes)?;
    let attrs_json = if attrs.is_empty() {
        None
    } else {
        let mut out = Vec::new();
        let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(attrs));
        serde_transcode::transcode(&mut de, &mut serde_json::Serializer::new(&mut out))
            .map_err(|e| format!("attributes: {e}"))?;
        if de.position() as usize != attrs.len() {
            return Err("trailing bytes after the attributes".into());
        }
        Some(String::from_utf8(out).map_err(|e| e.to_string())?)
    };
    let head = serde_json::to_string(&JsonOut {
        identity_id: identity_id.into(),
        expires_at: 0,
    })
    .map_err(|e| e.to_string())?;
    Ok(match attrs_json {
        // The head is an object; the attributes go in before its brace.
        Some(attrs) => format!("{},\"attrs\":{attrs}}}", &head[..head.len() - 1]),
        None => head,
    })
}

/// A stored JSON value back as a record and its expiry.
fn json_to_record(json: &[u8]) -> std::result::Result<(Vec<u8>, u64), String> {
    let parsed: JsonIn = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    let attrs = parsed.attrs.map(|a| a.0).unwrap_or_default();
    let identity = Identity::try_from(parsed.identity_id)?;
    Ok((record::join(&identity, &attrs), parsed.expires_at))
}

impl<C> KeyPerSession<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// A key-per-session layout with the encoding's usual key prefix
    /// (`session:` for JSON, none for the binary ones).
    pub fn new(conn: C, encoding: Encoding) -> Self {
        let prefix = match encoding {
            Encoding::JsonSetex => b"session:".to_vec(),
            Encoding::PackedSetex | Encoding::HashPerSession => Vec::new(),
        };
        Self {
            conn,
            encoding,
            prefix,
        }
    }

    /// Puts `prefix` before every key.
    pub fn with_prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// The key a session lives under.
    pub fn key(&self, id: &SessionId) -> Vec<u8> {
        let mut key = self.prefix.clone();
        match self.encoding {
            Encoding::JsonSetex => key.extend_from_slice(id.to_hex().as_bytes()),
            Encoding::PackedSetex | Encoding::HashPerSession => {
                key.extend_from_slice(id.as_bytes())
            }
        }
        key
    }

    fn is_json(&self) -> bool {
        self.encoding == Encoding::JsonSetex
    }

    fn corrupt(&self, id: &SessionId, reason: String) -> Error {
        Error::CorruptRecord {
            location: self.location(id),
            reason,
        }
    }

    /// The string value for a record (JSON with a zero expiry, or the record).
    fn string_value(&self, id: &SessionId, record: &[u8]) -> Result<Vec<u8>> {
        if self.is_json() {
            record_to_json(record)
                .map(String::into_bytes)
                .map_err(|reason| self.corrupt(id, reason))
        } else {
            Ok(record.to_vec())
        }
    }

    fn script(&self, string: &'static Script, hash: &'static Script) -> &'static Script {
        if self.encoding == Encoding::HashPerSession {
            hash
        } else {
            string
        }
    }

    fn insert_invocation(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: Deadline,
    ) -> Result<ScriptInvocation<'static>> {
        let (mode, secs) = match expiry.check()? {
            Deadline::In(secs) => ("in", secs),
            Deadline::At(at) => ("at", at),
        };
        let mut inv = self.script(&STRING_INSERT, &HASH_INSERT).prepare_invoke();
        inv.key(self.key(id));
        self.record_args(&mut inv, id, record)?;
        if self.encoding != Encoding::HashPerSession {
            inv.arg(scripts::flag(self.is_json()));
        }
        inv.arg(mode).arg(secs);
        Ok(inv)
    }

    /// Adds one id's read to a load pipeline: `GET` and `EXPIRETIME` for a
    /// string, `HMGET` of identity, attributes and expiry for a HASH. Redis
    /// expires the key itself, so nothing it returns has expired.
    fn queue_load(&self, pipe: &mut redis::Pipeline, id: &SessionId) {
        let key = self.key(id);
        if self.encoding == Encoding::HashPerSession {
            pipe.cmd("HMGET").arg(key).arg("i").arg("a").arg("e");
        } else {
            pipe.get(&key).cmd("EXPIRETIME").arg(&key);
        }
    }

    /// Replies per id of a load pipeline.
    fn replies_per_load(&self) -> usize {
        if self.encoding == Encoding::HashPerSession {
            1
        } else {
            2
        }
    }

    /// Turns one id's replies into a session.
    fn stored(&self, id: &SessionId, replies: &[redis::Value]) -> Result<Option<Stored>> {
        let bad = |e: redis::ParsingError| self.corrupt(id, e.to_string());
        if self.encoding == Encoding::HashPerSession {
            let (identity, attrs, expires_at): (Option<Vec<u8>>, Option<Vec<u8>>, Option<u64>) =
                redis::from_redis_value_ref(&replies[0]).map_err(bad)?;
            let Some(identity) = identity else {
                return Ok(None);
            };
            let identity = hash_identity(&identity).map_err(|e| self.corrupt(id, e))?;
            let expires_at =
                expires_at.ok_or_else(|| self.corrupt(id, "no expiry field".into()))?;
            return Ok(Some(Stored {
                record: record::join(&identity, &attrs.unwrap_or_default()),
                expires_at,
            }));
        }
        let value: Option<Vec<u8>> = redis::from_redis_value_ref(&replies[0]).map_err(bad)?;
        let expire_time: i64 = redis::from_redis_value_ref(&replies[1]).map_err(bad)?;
        let Some(value) = value else {
            return Ok(None);
        };
        let expires_at = match expire_time {
            -2 => return Ok(None), // expired between the two reads
            t if t < 0 => return Err(self.corrupt(id, "key has no expiry".into())),
            t => t as u64,
        };
        let record = if self.is_json() {
            json_to_record(&value).map_err(|r| self.corrupt(id, r))?.0
        } else {
            value
        };
        Ok(Some(Stored { record, expires_at }))
    }

    async fn load_chunk(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        let mut pipe = redis::pipe();
        for id in ids {
            self.queue_load(&mut pipe, id);
        }
        let per = self.replies_per_load();
        let replies: Vec<redis::Value> = pipe.query_async(&mut self.conn.clone()).await.map_err(
            sessionpack::session::layout::pipeline::pipeline_error(self, ids, per),
        )?;
        ids.iter()
            .zip(replies.chunks(per))
            .map(|(id, r)| self.stored(id, r))
            .collect()
    }

    /// A record as script arguments: identity and attributes for a HASH,
    /// the value for a string.
    fn record_args(
        &self,
        inv: &mut ScriptInvocation<'_>,
        id: &SessionId,
        record: &[u8],
    ) -> Result<()> {
        if self.encoding == Encoding::HashPerSession {
            let (identity, attrs) = record::split(record).map_err(|r| self.corrupt(id, r))?;
            match identity {
                Identity::Int(n) => inv.arg(n),
                other => {
                    let mut head = Vec::new();
                    other.encode(&mut head);
                    inv.arg(head)
                }
            };
            inv.arg(attrs);
        } else {
            inv.arg(self.string_value(id, record)?);
        }
        Ok(())
    }

    /// Arguments of a conditional write: the compare flag and the expected
    /// record (empty ones without a comparison).
    fn expected_args(
        &self,
        inv: &mut ScriptInvocation<'_>,
        id: &SessionId,
        expected: Option<&[u8]>,
    ) -> Result<()> {
        inv.arg(scripts::flag(expected.is_some()));
        match expected {
            Some(e) => self.record_args(inv, id, e)?,
            None if self.encoding == Encoding::HashPerSession => {
                inv.arg("").arg("");
            }
            None => {
                inv.arg("");
            }
        }
        Ok(())
    }

    async fn call<T: redis::FromRedisValue>(
        &self,
        id: &SessionId,
        inv: &ScriptInvocation<'_>,
    ) -> Result<T> {
        inv.invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || self.location(id)))
    }
}

impl<C> Layout for KeyPerSession<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    fn name(&self) -> &'static str {
        self.encoding.name()
    }

    async fn insert(&self, id: &SessionId, record: &[u8], expiry: Deadline) -> Result<Inserted> {
        let inv = self.insert_invocation(id, record, expiry)?;
        Ok(Inserted::from_code(self.call(id, &inv).await?))
    }

    async fn load(&self, id: &SessionId) -> Result<Option<Stored>> {
        Ok(self
            .load_chunk(std::slice::from_ref(id))
            .await?
            .pop()
            .flatten())
    }

    async fn touch(&self, id: &SessionId, ttl_secs: u64) -> Result<Option<u64>> {
        let mut inv = self.script(&STRING_TOUCH, &HASH_TOUCH).prepare_invoke();
        inv.key(self.key(id)).arg(check_ttl(ttl_secs)?);
        if !matches!(self.encoding, Encoding::HashPerSession) {
            inv.arg(scripts::flag(self.is_json()));
        }
        self.call(id, &inv).await
    }

    async fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> Result<Written> {
        let mut inv = self.script(&STRING_REPLACE, &HASH_REPLACE).prepare_invoke();
        inv.key(self.key(id));
        self.record_args(&mut inv, id, record)?;
        if self.encoding != Encoding::HashPerSession {
            inv.arg(scripts::flag(self.is_json()));
        }
        self.expected_args(&mut inv, id, expected)?;
        Ok(Written::from_code(self.call(id, &inv).await?))
    }

    async fn remove(&self, id: &SessionId, expected: Option<&Stored>) -> Result<Written> {
        let mut inv = self.script(&STRING_REMOVE, &HASH_REMOVE).prepare_invoke();
        inv.key(self.key(id));
        if self.encoding != Encoding::HashPerSession {
            inv.arg(scripts::flag(self.is_json()));
        }
        self.expected_args(&mut inv, id, expected.map(|e| e.record.as_slice()))?;
        inv.arg(expected.map_or(0, |e| e.expires_at));
        Ok(Written::from_code(self.call(id, &inv).await?))
    }

    async fn insert_many(
        &self,
        items: &[(SessionId, Vec<u8>)],
        ttl_secs: u64,
    ) -> Result<Vec<Inserted>> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(PIPELINE_CHUNK) {
            let invocations = chunk
                .iter()
                .map(|(id, record)| self.insert_invocation(id, record, Deadline::In(ttl_secs)))
                .collect::<Result<Vec<_>>>()?;
            let ids: Vec<_> = chunk.iter().map(|(id, _)| *id).collect();
            let script = self.script(&STRING_INSERT, &HASH_INSERT);
            let codes: Vec<i64> = sessionpack::session::layout::pipeline::pipelined(
                &self.conn,
                self,
                &ids,
                &invocations,
                script,
            )
            .await?;
            out.extend(codes.into_iter().map(Inserted::from_code));
        }
        Ok(out)
    }

    async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(PIPELINE_CHUNK) {
            out.extend(self.load_chunk(chunk).await?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips_records() {
        #[derive(Serialize)]
        struct A {
            n: u32,
            s: String,
            m: std::collections::BTreeMap<String, u8>,
        }
        let a = A {
            n: 3,
            s: "é\"".into(),
            m: [("z".to_owned(), 1), ("a".to_owned(), 2)].into(),
        };
        for bytes in [
            record::encode(&7u64, &a).unwrap(),
            record::encode(&u64::MAX, &()).unwrap(),
            record::encode(&Identity::Uuid([3; 16]), &a).unwrap(),
            record::encode(&Identity::name("ada@example.com").unwrap(), &()).unwrap(),
        ] {
            let json = record_to_json(&bytes).unwrap();
            assert!(json.starts_with("{\"identity_id\":"), "{json}");
            let (back, expires_at) = json_to_record(json.as_bytes()).unwrap();
            assert_eq!(back, bytes);
            assert_eq!(expires_at, 0);
        }
        assert_eq!(
            record_to_json(&record::encode(&42u64, &()).unwrap()).unwrap(),
            r#"{"identity_id":42,"expires_at":0}"#
        );
        assert_eq!(
            record_to_json(&record::encode(&Identity::Uuid([0xab; 16]), &()).unwrap()).unwrap(),
            r#"{"identity_id":{"uuid":"abababab-abab-abab-abab-abababababab"},"expires_at":0}"#
        );
        assert!(record_to_json(b"\xc0").is_err());
        assert!(json_to_record(br#"{"identity_id":{"uuid":"ab"},"expires_at":0}"#).is_err());
        assert!(json_to_record(b"{\"identity_id\":-1}").is_err());
    }
}
