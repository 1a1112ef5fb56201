//! One-time tokens (an e-mail verification link, a password reset, an
//! invitation): issue one with a payload and a lifetime, peek at it,
//! consume it exactly once.
//!
//! The usual layout is a key per token, `SETEX code:<token> <json>`, read
//! and deleted in one `MULTI` (`GET`, `DEL`). Here tokens are packed like
//! sessions: a [`Compact`] layout in a namespace of their own, the token's
//! random bits choosing its listpack bucket, its expiry kept in its value,
//! reclaimed by the same sweeper. Consuming is one script in the token's
//! bucket that reads and removes it, so of any number of concurrent
//! consumers exactly one gets the payload; an expired token consumes as no
//! token, whether or not it has been swept.
//!
//! ```no_run
//! # async fn run() -> sessionpack::Result<()> {
//! use std::time::Duration;
//! use sessionpack::tokens::Tokens;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Verify { act_id: u64, email: String }
//!
//! let conn = sessionpack::connect("redis://127.0.0.1/").await?;
//! let tokens: Tokens<_, Verify> = Tokens::open(conn, 14).await?;
//! let token = tokens
//!     .issue(&Verify { act_id: 1234, email: "user@example.org".into() }, Duration::from_secs(3600))
//!     .await?;
//! let link = format!("https://example.org/verify_email?token={}", token.to_hex());
//! // ... later, when the link is followed:
//! match tokens.consume_text(&token.to_hex()).await? {
//!     Some(verify) => { /* verify.email is confirmed */ }
//!     None => { /* invalid, used or expired */ }
//! }
//! # Ok(()) }
//! ```

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::session::id::{IdWidth, SessionId};
use crate::session::layout::{Compact, CompactConfig, Inserted, Layout};
use crate::ttl::Deadline;

/// The namespace tokens live in by default, apart from sessions.
pub const DEFAULT_TOKEN_NAMESPACE: &str = "tok";
/// Tries at drawing an unused token.
const ATTEMPTS: u32 = 4;

/// A token: 128 random bits, 32 lowercase hex characters in a link.
pub type Token = SessionId;

/// One-time tokens carrying payloads of type `P`, packed in listpack
/// buckets.
pub struct Tokens<C, P> {
    layout: Compact<C>,
    _payload: PhantomData<fn() -> P>,
}

impl<C: Clone, P> Clone for Tokens<C, P> {
    fn clone(&self) -> Self {
        Self {
            layout: self.layout.clone(),
            _payload: PhantomData,
        }
    }
}

impl<C, P> std::fmt::Debug for Tokens<C, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("layout", &self.layout)
            .finish()
    }
}

impl<C, P> Tokens<C, P>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
    P: Serialize + DeserializeOwned + Send + Sync,
{
    /// Opens the tokens of namespace [`DEFAULT_TOKEN_NAMESPACE`] in
    /// `2^bucket_bits` buckets (about one per 100-400 live tokens).
    pub async fn open(conn: C, bucket_bits: u8) -> Result<Self> {
        let config = CompactConfig::new(bucket_bits).with_namespace(DEFAULT_TOKEN_NAMESPACE);
        Self::with_config(conn, config).await
    }

    /// Opens tokens laid out by `config` (its namespace must not be a
    /// session store's); tokens are 128 bits wide whatever it names.
    pub async fn with_config(conn: C, config: CompactConfig) -> Result<Self> {
        let layout = Compact::new(conn, config.with_id_width(IdWidth::Bits128)).await?;
        Ok(Self {
            layout,
            _payload: PhantomData,
        })
    }

    /// The layout underneath (for a [`crate::session::sweep::Sweeper`]).
    pub fn layout(&self) -> &Compact<C> {
        &self.layout
    }

    fn encode(payload: &P) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(32);
        let mut ser = rmp_serde::Serializer::new(&mut out)
            .with_struct_map()
            .with_bytes(rmp_serde::config::BytesMode::ForceAll);
        payload.serialize(&mut ser)?;
        Ok(out)
    }

    fn decode(&self, token: &Token, bytes: &[u8]) -> Result<P> {
        rmp_serde::from_slice(bytes).map_err(|e| Error::CorruptRecord {
            location: self.layout.location(token),
            reason: e.to_string(),
        })
    }

    /// Issues a token carrying `payload` that lives `ttl` (whole seconds,
    /// at least one; at most [`crate::ttl::MAX_TTL_SECS`]).
    pub async fn issue(&self, payload: &P, ttl: Duration) -> Result<Token> {
        let ttl = crate::ttl::check_ttl(ttl.as_secs().max(1))?;
        self.issue_record(&Self::encode(payload)?, ttl).await
    }

    /// Issues a token for each payload, all living `ttl`, in pipelined
    /// round trips; the tokens in order.
    pub async fn issue_many(&self, payloads: &[P], ttl: Duration) -> Result<Vec<Token>> {
        let ttl = crate::ttl::check_ttl(ttl.as_secs().max(1))?;
        let mut items = Vec::with_capacity(payloads.len());
        for payload in payloads {
            items.push((self.layout.new_id().await?, Self::encode(payload)?));
        }
        let results = self.layout.insert_many(&items, ttl).await?;
        for (item, result) in items.iter_mut().zip(results) {
            if !matches!(result, Inserted::Created { .. }) {
                // A 128-bit collision: draw once more, alone.
                item.0 = self.issue_record(&item.1, ttl).await?;
            }
        }
        Ok(items.into_iter().map(|(token, _)| token).collect())
    }

    /// Stores `record` under a fresh token, drawing again on the (128-bit)
    /// chance that it is taken.
    async fn issue_record(&self, record: &[u8], ttl: u64) -> Result<Token> {
        for _ in 0..ATTEMPTS {
            let token = self.layout.new_id().await?;
            if let Inserted::Created { .. } = self
                .layout
                .insert(&token, record, Deadline::In(ttl))
                .await?
            {
                return Ok(token);
            }
        }
        Err(Error::Contended { attempts: ATTEMPTS })
    }

    /// The payload of a live token, leaving it live.
    pub async fn peek(&self, token: &Token) -> Result<Option<P>> {
        match self.layout.load(token).await? {
            Some(stored) => self.decode(token, &stored.record).map(Some),
            None => Ok(None),
        }
    }

    /// Consumes a token: its payload if it was live, and then it is gone;
    /// `None` if it never existed, was consumed or revoked, or expired. Of
    /// concurrent consumers of one token exactly one gets `Some`.
    pub async fn consume(&self, token: &Token) -> Result<Option<P>> {
        match self.layout.take(token).await? {
            Some(stored) => self.decode(token, &stored.record).map(Some),
            None => Ok(None),
        }
    }

    /// Parses a token as it came in a link (strictly: 32 lowercase hex
    /// characters, else [`Error::InvalidId`] and no call to Redis) and
    /// consumes it.
    pub async fn consume_text(&self, text: &str) -> Result<Option<P>> {
        let token = SessionId::parse_with(text, IdWidth::Bits128)?;
        self.consume(&token).await
    }

    /// Revokes a token unconsumed; whether it was live.
    pub async fn revoke(&self, token: &Token) -> Result<bool> {
        Ok(self.layout.take(token).await?.is_some())
    }
}
