//! Record data packed with a dictionary trained on an app's own sessions.
//!
//! A real app's session (a csrf token, a locale, a flash message, the
//! login) is 100-400 bytes of MessagePack whose keys and much of whose
//! values repeat from one session to the next. A generic compressor saves
//! nothing on so little; zstd with a dictionary trained on the app's
//! sessions shortens such a record by a quarter to a half, and a shorter
//! record takes fewer pieces in its bucket, or none
//! ([`crate::session::layout::compact`]).
//!
//! Packed data is [`PACKED`] (`0xc1`, a byte MessagePack never uses, so no
//! unpacked data begins with it), the dictionary's id, then a zstd frame
//! without magic number, checksum or dictionary id (five bytes of framing
//! for a record under 256 bytes). In a namespace of record format
//! [`LIFTED_FORMAT`] or later the data's random tokens are lifted out
//! first (see `lift.rs`): after the id come the number of lifted bytes (a
//! varint, one byte under 128), the lifted bytes, then the frame of the
//! rest; from record format [`UUID_FORMAT`] UUIDs are lifted too, and
//! from [`ENCODED_TEXT_FORMAT`] base64 that decodes to text (a JSON Web
//! Token's claims) is kept decoded in the rest. Only the data after a
//! record's owner is packed, so the scripts
//! still see who owns a session. Data that would not get shorter is kept
//! as it is.
//!
//! The dictionary is either trained ahead ([`Dictionary::train`],
//! `sessionpack dictionary train`) and given to the store, or learned by
//! the store from its first writes ([`Learning`]).
//!
//! A dictionary never changes once stored: it lives under
//! `<namespace>:dict:<id>` (no expiry), written with `SET NX` by whoever
//! trains or opens it, and read by any process that meets a record packed
//! with an id it does not hold. A new dictionary takes a new id, and
//! records packed with the old one stay readable as long as its key is
//! there. Records are packed only in namespaces of record format 3 or
//! later, which every process that opens them knows to unpack.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};

mod learn;
mod lift;

pub use learn::Learning;
use learn::{Learner, Work};

/// The first byte of packed data.
pub const PACKED: u8 = 0xc1;
/// The largest dictionary stored or trained, in bytes: records are small,
/// and a larger dictionary only costs memory in every process.
pub const MAX_DICTIONARY_BYTES: usize = 64 * 1024;
/// The smallest dictionary a store learns, in bytes.
pub const MIN_DICTIONARY_BYTES: usize = 256;
/// The most samples a store keeps to learn from: each process holds them
/// until it trains.
pub const MAX_LEARNING_SAMPLES: usize = 100_000;
/// The longest data unpacked, in bytes (a larger claim is corrupt data,
/// not a session).
pub const MAX_UNPACKED_BYTES: usize = 1 << 20;
/// The record format from which a namespace may hold packed records.
pub const PACKED_FORMAT: u32 = 3;
/// The record format from which packed records have their random tokens
/// lifted out before zstd packs the rest (the module's docs). Versions
/// before it refuse such a namespace, whose records they would misread.
pub const LIFTED_FORMAT: u32 = 6;
/// The record format from which UUIDs in their text form are lifted out
/// too, 16 bytes each (see `lift.rs`). Versions before it refuse such a
/// namespace, whose records they would not unpack.
pub const UUID_FORMAT: u32 = 8;
/// The record format from which base64 runs whose bytes are text (a JSON
/// Web Token's header and claims) are kept decoded in the rest, where the
/// dictionary and zstd find their words, instead of lifted as random
/// characters (see `lift.rs`). Versions before it refuse such a
/// namespace, whose records they would not unpack.
pub const ENCODED_TEXT_FORMAT: u32 = 9;
/// One sample in this many a dictionary also trains on whole, its tokens
/// in place ([`Dictionary::train`]).
#[cfg(feature = "compression")]
const WHOLE_EVERY: usize = 8;
/// Data shorter than this is never packed: the framing would eat the gain.
const MIN_PACKED_INPUT: usize = 24;
/// zstd's level: its default. Higher ones pack an app's 132-byte session
/// a byte or two shorter at 6-13 times the time (1.3 µs at 3, 8.1 at 9,
/// 16.9 at 19: `cargo bench --bench dictionary_cost --features compression`).
#[cfg(feature = "compression")]
const LEVEL: i32 = 3;

/// The key a namespace keeps dictionary `id` under.
pub fn key(namespace: &str, id: u8) -> String {
    format!("{namespace}:dict:{id}")
}

/// A trained dictionary and its id in its namespace (1-255).
#[derive(Clone, PartialEq, Eq)]
pub struct Dictionary {
    id: u8,
    bytes: Arc<[u8]>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("id", &self.id)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Dictionary {
    /// A dictionary from its bytes (as [`Dictionary::train`] made them, or
    /// read from a file or the namespace). Refuses id 0 and dictionaries
    /// over [`MAX_DICTIONARY_BYTES`].
    pub fn new(id: u8, bytes: impl Into<Arc<[u8]>>) -> Result<Self> {
        let bytes = bytes.into();
        if id == 0 {
            return Err(Error::Config("a dictionary's id is 1 to 255".into()));
        }
        if bytes.is_empty() || bytes.len() > MAX_DICTIONARY_BYTES {
            return Err(Error::Config(format!(
                "a dictionary is 1 to {MAX_DICTIONARY_BYTES} bytes; this one is {}",
                bytes.len()
            )));
        }
        Ok(Self { id, bytes })
    }

    /// Trains a dictionary of at most `max_bytes` on sample record data
    /// (what the store packs: a record's data after its owner), both as
    /// they come and with their random tokens lifted out as a store of
    /// this version's record format lifts them (UUIDs too, and base64 of
    /// text decoded: [`ENCODED_TEXT_FORMAT`]). A few thousand samples of the app's own sessions make a good
    /// one; samples the dictionary is later measured on should not be
    /// among them.
    #[cfg(feature = "compression")]
    pub fn train<S: AsRef<[u8]>>(id: u8, samples: &[S], max_bytes: usize) -> Result<Self> {
        let max = max_bytes.min(MAX_DICTIONARY_BYTES);
        // What zstd packs is what lifting leaves; and one sample in
        // `WHOLE_EVERY` as it comes, so a token every session carries
        // makes it into the dictionary (and stays in place when packed),
        // without the random ones crowding out the rest.
        let samples: Vec<Vec<u8>> = samples
            .iter()
            .enumerate()
            .flat_map(|(n, s)| {
                let s = s.as_ref();
                let newest = lift::Finds::of(crate::session::meta::FORMAT_VERSION);
                let rest = lift::lift(s, newest, |_| false).map(|l| l.rest);
                let whole = (rest.is_none() || n % WHOLE_EVERY == 0).then(|| s.to_vec());
                whole.into_iter().chain(rest)
            })
            .collect();
        let bytes = zstd::dict::from_samples(&samples, max).map_err(|e| {
            Error::Config(format!(
                "training a dictionary on {} samples: {e} (zstd wants many more samples \
                 than one, and more bytes of them than the dictionary's size)",
                samples.len()
            ))
        })?;
        Self::new(id, bytes)
    }

    /// The bytes a store packing with it keeps of each of `data` (record
    /// data, as [`Dictionary::train`] takes it): packed where that is
    /// shorter. What `sessionpack dictionary train` and the advisor report.
    pub fn stored_sizes<S: AsRef<[u8]>>(&self, data: &[S]) -> Result<Vec<usize>> {
        let packer = Packer::new("", crate::session::meta::FORMAT_VERSION).packing_with(self)?;
        Ok(data
            .iter()
            .map(|d| packer.pack_now(d.as_ref().to_vec()).len())
            .collect())
    }

    /// Its id in the namespace.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Stores it under [`key`] unless that key holds it already; another
    /// dictionary there is an [`Error::Config`]: ids are never reused.
    /// One `SET NX GET` (Redis 7.0 and later).
    pub async fn publish<C>(&self, conn: &C, namespace: &str) -> Result<()>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        match self.set_nx_get(conn, namespace).await? {
            Some(other) if *other != *self.bytes => Err(Error::Config(format!(
                "{} holds another dictionary ({} bytes); a dictionary's id is never \
                 reused: give this one a new id",
                key(namespace, self.id),
                other.len()
            ))),
            _ => Ok(()),
        }
    }

    /// Stores it under [`key`] unless that key holds a dictionary already,
    /// and returns the dictionary stored there: this one, or the one
    /// another process stored first. One `SET NX GET`.
    pub(crate) async fn publish_or_read<C>(&self, conn: &C, namespace: &str) -> Result<Self>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        match self.set_nx_get(conn, namespace).await? {
            Some(other) if *other != *self.bytes => Self::new(self.id, other),
            _ => Ok(self.clone()),
        }
    }

    async fn set_nx_get<C>(&self, conn: &C, namespace: &str) -> Result<Option<Vec<u8>>>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        let key = key(namespace, self.id);
        redis::cmd("SET")
            .arg(&key)
            .arg(self.bytes())
            .arg("NX")
            .arg("GET")
            .query_async(&mut conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))
    }

    /// Reads dictionary `id` of `namespace`, if stored. One `GET`.
    pub async fn fetch<C>(conn: &C, namespace: &str, id: u8) -> Result<Option<Self>>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        let key = key(namespace, id);
        let bytes: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn.clone())
            .await
            .map_err(|e| Error::from_redis(e, || key.clone()))?;
        bytes.map(|b| Self::new(id, b)).transpose()
    }
}

/// Packs a store's record data with its dictionary and unpacks data
/// packed with any of its namespace's, fetching those it does not hold.
#[derive(Default)]
pub(crate) struct Packer {
    namespace: String,
    /// The namespace's record format, which says whether it lifts tokens
    /// out ([`LIFTED_FORMAT`]), UUIDs with them ([`UUID_FORMAT`]), and
    /// keeps base64 of text decoded ([`ENCODED_TEXT_FORMAT`]).
    format: u32,
    current: RwLock<Option<Arc<codec::Codec>>>,
    known: RwLock<HashMap<u8, Arc<codec::Codec>>>,
    /// Where the store learns its dictionary and has none yet.
    learner: Option<Learner>,
}

impl std::fmt::Debug for Packer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packer")
            .field("namespace", &self.namespace)
            .field("packs_with", &self.dictionary_id())
            .field("learns", &self.learner.as_ref().map(|l| l.config().id))
            .finish()
    }
}

impl Packer {
    /// A packer that packs nothing and unpacks what `namespace` holds,
    /// in the form of its record `format`.
    pub(crate) fn new(namespace: &str, format: u32) -> Self {
        Self {
            namespace: namespace.to_owned(),
            format,
            ..Self::default()
        }
    }

    /// The same packer packing with `dictionary`.
    pub(crate) fn packing_with(self, dictionary: &Dictionary) -> Result<Self> {
        self.adopt(dictionary)?;
        Ok(self)
    }

    /// A packer that packs nothing yet and learns its dictionary from the
    /// data it is given to pack ([`learn`]). Without the `compression`
    /// feature, an [`Error::Config`].
    pub(crate) fn learning(namespace: &str, format: u32, learning: Learning) -> Result<Self> {
        if !cfg!(feature = "compression") {
            return Err(Error::Config(
                "a store that learns a dictionary needs sessionpack's `compression` feature".into(),
            ));
        }
        if learning.id == 0
            || !(1..=MAX_LEARNING_SAMPLES).contains(&learning.samples)
            || !(MIN_DICTIONARY_BYTES..=MAX_DICTIONARY_BYTES).contains(&learning.max_bytes)
        {
            return Err(Error::Config(format!(
                "a learned dictionary's id is 1 to 255, it learns from 1 to \
                 {MAX_LEARNING_SAMPLES} samples, and is {MIN_DICTIONARY_BYTES} to \
                 {MAX_DICTIONARY_BYTES} bytes: {learning:?}"
            )));
        }
        Ok(Self {
            learner: Some(Learner::new(learning)),
            ..Self::new(namespace, format)
        })
    }

    /// Packs with `dictionary` from now on, learning no more.
    pub(crate) fn pack_with(&self, dictionary: &Dictionary) -> Result<()> {
        self.adopt(dictionary).map(|_| ())
    }

    /// Packs with `dictionary` from now on.
    fn adopt(&self, dictionary: &Dictionary) -> Result<Arc<codec::Codec>> {
        let codec = Arc::new(codec::Codec::new(dictionary)?);
        self.known
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dictionary.id, codec.clone());
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(codec.clone());
        if let Some(learner) = &self.learner {
            learner.done();
        }
        Ok(codec)
    }

    fn current(&self) -> Option<Arc<codec::Codec>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The dictionary it packs with.
    pub(crate) fn current_dictionary(&self) -> Option<Dictionary> {
        self.current().and_then(|c| c.dictionary().cloned())
    }

    /// The id of the dictionary it packs with.
    pub(crate) fn dictionary_id(&self) -> Option<u8> {
        self.current().map(|c| c.id())
    }

    /// `data` packed with the current dictionary, where that makes it
    /// shorter.
    pub(crate) fn pack_now(&self, data: Vec<u8>) -> Vec<u8> {
        match self.current() {
            Some(codec) => pack_with(&codec, self.lifting(), data),
            None => data,
        }
    }

    /// `data` packed, where that makes it shorter. A learning packer
    /// keeps it as a sample, and the write that completes the samples
    /// trains and offers the dictionary to the namespace first; learning
    /// that fails is logged, and never fails the write.
    pub(crate) async fn pack<C>(&self, conn: &C, data: Vec<u8>) -> Vec<u8>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        if let Some(codec) = self.current() {
            return pack_with(&codec, self.lifting(), data);
        }
        let Some(learner) = &self.learner else {
            return data;
        };
        if data.len() < MIN_PACKED_INPUT {
            return data;
        }
        let Some(work) = learner.offer(&data) else {
            return data;
        };
        match self.learn(conn, learner, work).await {
            Some(codec) => pack_with(&codec, self.lifting(), data),
            None => data,
        }
    }

    /// Trains (unless `work` holds a trained dictionary, or the namespace
    /// holds one already) and stores the dictionary unless the namespace
    /// holds one under its id by then, and packs with whichever is stored.
    async fn learn<C>(&self, conn: &C, learner: &Learner, work: Work) -> Option<Arc<codec::Codec>>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        let config = learner.config().clone();
        let trained = match work {
            Work::Publish(dictionary) => Ok(dictionary),
            Work::Train(samples) => {
                // Another process may have stored it while this one
                // collected: one read spares the training. A read that
                // fails goes on to train, and the offer finds out.
                if let Ok(Some(stored)) = Dictionary::fetch(conn, &self.namespace, config.id).await
                {
                    return self.adopt_learned(learner, &stored, false);
                }
                train_off_thread(config.id, samples, config.max_bytes).await
            }
        };
        let trained = match trained {
            Ok(dictionary) => dictionary,
            Err(e) => {
                tracing::warn!(
                    namespace = %self.namespace,
                    error = %e,
                    "no dictionary learned: records are stored as they come"
                );
                learner.done();
                return None;
            }
        };
        let stored = match trained.publish_or_read(conn, &self.namespace).await {
            Ok(stored) => stored,
            // A server away: offered again on a later write.
            Err(e) if e.is_transient() => {
                tracing::warn!(
                    namespace = %self.namespace,
                    error = %e,
                    "the learned dictionary could not be stored; offered again on a later write"
                );
                learner.retry(trained);
                return None;
            }
            // Refused (a key of another type, a command denied): every
            // offer would be, at a round trip a write.
            Err(e) => {
                tracing::warn!(
                    namespace = %self.namespace,
                    error = %e,
                    "the learned dictionary was refused: records are stored as they come"
                );
                learner.done();
                return None;
            }
        };
        self.adopt_learned(learner, &stored, stored == trained)
    }

    /// Packs with the namespace's learned dictionary from now on.
    fn adopt_learned(
        &self,
        learner: &Learner,
        stored: &Dictionary,
        learned_here: bool,
    ) -> Option<Arc<codec::Codec>> {
        match self.adopt(stored) {
            Ok(codec) => {
                tracing::info!(
                    namespace = %self.namespace,
                    id = stored.id(),
                    bytes = stored.bytes().len(),
                    learned_here,
                    "packing records with the namespace's learned dictionary"
                );
                Some(codec)
            }
            Err(e) => {
                tracing::warn!(namespace = %self.namespace, error = %e, "learned dictionary refused");
                learner.done();
                None
            }
        }
    }

    /// `data` unpacked; a dictionary this process does not hold is read
    /// from the namespace first. Unreadable packed data, or a dictionary
    /// no longer stored, is an [`Error::CorruptRecord`] at `location`.
    pub(crate) async fn unpack<'a, C>(
        &self,
        conn: &C,
        data: &'a [u8],
        location: impl Fn() -> String,
    ) -> Result<Cow<'a, [u8]>>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        let [PACKED, id, frame @ ..] = data else {
            if data.first() == Some(&PACKED) {
                return Err(corrupt(location, "packed data without its dictionary id"));
            }
            return Ok(Cow::Borrowed(data));
        };
        let codec = self.codec(conn, *id, &location).await?;
        let unpacked = match self.lifting() {
            Some(finds) => unpack_lifted(&codec, finds, frame),
            None => codec.unpack(frame),
        };
        unpacked
            .map(Cow::Owned)
            .map_err(|reason| corrupt(location, &reason))
    }

    async fn codec<C>(
        &self,
        conn: &C,
        id: u8,
        location: &impl Fn() -> String,
    ) -> Result<Arc<codec::Codec>>
    where
        C: redis::aio::ConnectionLike + Clone + Send,
    {
        if let Some(codec) = self
            .known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            return Ok(codec.clone());
        }
        let Some(dictionary) = Dictionary::fetch(conn, &self.namespace, id).await? else {
            return Err(corrupt(
                location,
                &format!(
                    "packed with dictionary {id}, and {} is not stored (restore it from \
                     the file it was trained into: `sessionpack dictionary publish`)",
                    key(&self.namespace, id)
                ),
            ));
        };
        // A record packed with the dictionary this process is learning:
        // another process got there first, and this one packs with it too.
        if self.learner.as_ref().is_some_and(|l| l.config().id == id) && self.current().is_none() {
            return self.adopt(&dictionary);
        }
        let codec = Arc::new(codec::Codec::new(&dictionary)?);
        Ok(self
            .known
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id)
            .or_insert(codec)
            .clone())
    }
}

/// Tokens at least this long, each seen once in a record, are lifted
/// without also packing the record whole to compare (half the packing's
/// time): on the 1,000 sessions `sessionpack dictionary train` holds out
/// of each built-in profile, the whole form was never the shorter.
const SURE_TOKEN: usize = 32;

impl Packer {
    /// How the namespace's records lift their tokens: not at all (`None`),
    /// or finding what its format finds.
    fn lifting(&self) -> Option<lift::Finds> {
        (self.format >= LIFTED_FORMAT).then(|| lift::Finds::of(self.format))
    }
}

fn pack_with(codec: &codec::Codec, lifting: Option<lift::Finds>, data: Vec<u8>) -> Vec<u8> {
    if data.len() < MIN_PACKED_INPUT {
        return data;
    }
    let packed = if let Some(finds) = lifting {
        // A token the dictionary holds (one every session carries) is left
        // where zstd finds it. Lifting pays for a long token seen once;
        // a short one, or one the record repeats (which zstd would match),
        // may pack shorter whole, so there both forms are tried and the
        // shorter kept.
        let doubtful = std::cell::Cell::new(false);
        let seen = std::cell::RefCell::new(Vec::new());
        let lifted = lift::lift(&data, finds, |token| {
            if codec.holds(token) {
                return true;
            }
            let hash = xxhash_rust::xxh3::xxh3_64(token);
            let mut seen = seen.borrow_mut();
            if token.len() < SURE_TOKEN || seen.contains(&hash) {
                doubtful.set(true);
            }
            seen.push(hash);
            false
        });
        // Where a namespace keeps text decoded, its readers look for
        // escapes in a whole form (no lifted bytes): data that would read
        // as holding one (not MessagePack) is not packed whole.
        let whole = || {
            if finds.encoded_text && lift::escaped(&data) {
                return None;
            }
            pack_lifted(codec, &[], &data)
        };
        match lifted.and_then(|l| pack_lifted(codec, &l.lifted, &l.rest)) {
            Some(lifted) if !doubtful.get() => Some(lifted),
            Some(lifted) => match whole() {
                Some(whole) if whole.len() <= lifted.len() => Some(whole),
                _ => Some(lifted),
            },
            None => whole(),
        }
    } else {
        codec.pack(&data)
    };
    match packed {
        Some(packed) if packed.len() < data.len() => packed,
        _ => data,
    }
}

/// The lifted form: `PACKED`, the id, the count of lifted bytes, the
/// lifted bytes, the frame of `rest`.
fn pack_lifted(codec: &codec::Codec, lifted: &[u8], rest: &[u8]) -> Option<Vec<u8>> {
    let frame = codec.pack(rest)?;
    let mut out = Vec::with_capacity(4 + lifted.len() + frame.len());
    out.extend_from_slice(&frame[..2]);
    lift::put_varint(&mut out, lifted.len() as u64);
    out.extend_from_slice(lifted);
    out.extend_from_slice(&frame[2..]);
    Some(out)
}

/// The data of a lifted form's body: the lifted bytes' count, the lifted
/// bytes, the frame of the rest. With no lifted bytes the rest is the
/// data, unless the namespace's format keeps base64 of text decoded
/// (`finds`), where it may hold escapes of that text alone.
fn unpack_lifted(
    codec: &codec::Codec,
    finds: lift::Finds,
    body: &[u8],
) -> std::result::Result<Vec<u8>, String> {
    let mut at = 0;
    let count = lift::get_varint(body, &mut at)?;
    let lifted = usize::try_from(count)
        .ok()
        .and_then(|n| body.get(at..at.checked_add(n)?))
        .ok_or("a packed record's lifted bytes run past it")?;
    let rest = codec.unpack(&body[at + lifted.len()..])?;
    if lifted.is_empty() && !(finds.encoded_text && lift::escaped(&rest)) {
        return Ok(rest);
    }
    let data = lift::lower(&rest, lifted)?;
    if data.len() > MAX_UNPACKED_BYTES {
        return Err(format!(
            "a packed record unpacks to {} bytes, more than {MAX_UNPACKED_BYTES}",
            data.len()
        ));
    }
    Ok(data)
}

/// Trains on the blocking pool where there is a Tokio runtime (training
/// takes milliseconds, too long for an async worker), else here.
async fn train_off_thread(id: u8, samples: Vec<Vec<u8>>, max_bytes: usize) -> Result<Dictionary> {
    #[cfg(feature = "compression")]
    {
        let train = move || Dictionary::train(id, &samples, max_bytes);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(train)
                .await
                .map_err(|e| Error::Config(format!("training a dictionary: {e}")))?,
            Err(_) => train(),
        }
    }
    #[cfg(not(feature = "compression"))]
    {
        let _ = (samples, max_bytes);
        Err(Error::Config(format!(
            "learning dictionary {id} needs sessionpack's `compression` feature"
        )))
    }
}

fn corrupt(location: impl Fn() -> String, reason: &str) -> Error {
    Error::CorruptRecord {
        location: location(),
        reason: reason.to_owned(),
    }
}

#[cfg(feature = "compression")]
mod codec {
    use std::sync::Mutex;

    use zstd::bulk::{Compressor, Decompressor};
    use zstd::zstd_safe::{CParameter, DParameter, FrameFormat};

    use std::collections::HashSet;

    use super::lift::MIN_TOKEN;
    use super::{Dictionary, LEVEL, MAX_UNPACKED_BYTES, PACKED};
    use crate::error::{Error, Result};

    /// Contexts loaded with one dictionary, kept for reuse: loading one
    /// costs far more than packing a record.
    pub(super) struct Codec {
        dictionary: Dictionary,
        /// Every run of [`MIN_TOKEN`] bytes in the dictionary, so a token
        /// it holds is not lifted out of its reach.
        windows: HashSet<[u8; MIN_TOKEN]>,
        compressors: Pool<Compressor<'static>>,
        decompressors: Pool<Decompressor<'static>>,
    }

    /// Contexts not in use.
    struct Pool<T>(Mutex<Vec<T>>);

    impl<T> Default for Pool<T> {
        fn default() -> Self {
            Self(Mutex::default())
        }
    }

    impl<T> Pool<T> {
        /// One from the pool, or a new one.
        fn take(&self, make: impl FnOnce() -> Result<T>) -> Result<T> {
            let kept = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
            kept.map_or_else(make, Ok)
        }

        fn put(&self, context: T) {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(context);
        }
    }

    fn config(e: std::io::Error) -> Error {
        Error::Config(format!("zstd refused the dictionary: {e}"))
    }

    impl Codec {
        pub(super) fn new(dictionary: &Dictionary) -> Result<Self> {
            let codec = Self {
                dictionary: dictionary.clone(),
                windows: dictionary
                    .bytes()
                    .windows(MIN_TOKEN)
                    .filter_map(|w| w.try_into().ok())
                    .collect(),
                compressors: Pool::default(),
                decompressors: Pool::default(),
            };
            // Checked now, so a bad dictionary fails where it is given.
            let c = codec.compressor()?;
            codec.compressors.put(c);
            Ok(codec)
        }

        pub(super) fn id(&self) -> u8 {
            self.dictionary.id()
        }

        /// Whether the dictionary holds `token`'s first [`MIN_TOKEN`] bytes.
        pub(super) fn holds(&self, token: &[u8]) -> bool {
            token
                .get(..MIN_TOKEN)
                .and_then(|head| <[u8; MIN_TOKEN]>::try_from(head).ok())
                .is_some_and(|head| self.windows.contains(&head))
        }

        pub(super) fn dictionary(&self) -> Option<&Dictionary> {
            Some(&self.dictionary)
        }

        fn compressor(&self) -> Result<Compressor<'static>> {
            self.compressors.take(|| {
                let mut c =
                    Compressor::with_dictionary(LEVEL, self.dictionary.bytes()).map_err(config)?;
                for p in [
                    CParameter::Format(FrameFormat::Magicless),
                    CParameter::ChecksumFlag(false),
                    CParameter::DictIdFlag(false),
                    CParameter::ContentSizeFlag(true),
                ] {
                    c.set_parameter(p).map_err(config)?;
                }
                Ok(c)
            })
        }

        fn decompressor(&self) -> Result<Decompressor<'static>> {
            self.decompressors.take(|| {
                let mut d =
                    Decompressor::with_dictionary(self.dictionary.bytes()).map_err(config)?;
                d.set_parameter(DParameter::Format(FrameFormat::Magicless))
                    .map_err(config)?;
                Ok(d)
            })
        }

        /// `PACKED`, the id and the frame; `None` if zstd failed.
        pub(super) fn pack(&self, data: &[u8]) -> Option<Vec<u8>> {
            let mut c = self.compressor().ok()?;
            let frame = c.compress(data).ok();
            self.compressors.put(c);
            let frame = frame?;
            let mut out = Vec::with_capacity(2 + frame.len());
            out.extend_from_slice(&[PACKED, self.id()]);
            out.extend_from_slice(&frame);
            Some(out)
        }

        /// A frame's data.
        pub(super) fn unpack(&self, frame: &[u8]) -> std::result::Result<Vec<u8>, String> {
            let size = content_size(frame).ok_or("a packed record's frame has no size")?;
            if size > MAX_UNPACKED_BYTES {
                return Err(format!(
                    "a packed record claims {size} bytes, more than {MAX_UNPACKED_BYTES}"
                ));
            }
            let mut d = self.decompressor().map_err(|e| e.to_string())?;
            let mut out = Vec::with_capacity(size);
            let done = d.decompress_to_buffer(frame, &mut out);
            self.decompressors.put(d);
            match done {
                Ok(n) if n == size => Ok(out),
                Ok(n) => Err(format!("a packed record claims {size} bytes and holds {n}")),
                Err(e) => Err(format!("a packed record does not unpack: {e}")),
            }
        }
    }

    /// The size a magicless single-segment frame records
    /// (its header's descriptor, then the size: RFC 8878, 3.1.1.1).
    fn content_size(frame: &[u8]) -> Option<usize> {
        let (&descriptor, rest) = frame.split_first()?;
        let single_segment = descriptor & 0x20 != 0;
        let dict_id = descriptor & 0x03;
        if !single_segment || dict_id != 0 {
            return None;
        }
        match descriptor >> 6 {
            0 => rest.first().map(|&b| usize::from(b)),
            1 => Some(usize::from(u16::from_le_bytes(rest.get(..2)?.try_into().ok()?)) + 256),
            2 => usize::try_from(u32::from_le_bytes(rest.get(..4)?.try_into().ok()?)).ok(),
            _ => usize::try_from(u64::from_le_bytes(rest.get(..8)?.try_into().ok()?)).ok(),
        }
    }
}

#[cfg(not(feature = "compression"))]
mod codec {
    use super::Dictionary;
    use crate::error::{Error, Result};

    /// Without the `compression` feature nothing is packed, and packed
    /// data is refused with a word on what is missing.
    pub(super) struct Codec(u8);

    impl Codec {
        pub(super) fn new(dictionary: &Dictionary) -> Result<Self> {
            let _ = Codec(dictionary.id());
            Err(Error::Config(format!(
                "records packed with dictionary {} need sessionpack's `compression` feature",
                dictionary.id()
            )))
        }

        pub(super) fn id(&self) -> u8 {
            self.0
        }

        pub(super) fn holds(&self, _: &[u8]) -> bool {
            false
        }

        pub(super) fn dictionary(&self) -> Option<&Dictionary> {
            None
        }

        pub(super) fn pack(&self, _: &[u8]) -> Option<Vec<u8>> {
            None
        }

        pub(super) fn unpack(&self, _: &[u8]) -> std::result::Result<Vec<u8>, String> {
            Err("packed records need sessionpack's `compression` feature".into())
        }
    }
}

#[cfg(all(test, feature = "compression"))]
mod tests {
    use super::*;

    /// What the newest record format finds.
    const NEWEST: lift::Finds = lift::Finds {
        uuids: true,
        encoded_text: true,
    };
    /// What record format 8 finds.
    const OLDER: lift::Finds = lift::Finds {
        uuids: true,
        encoded_text: false,
    };

    fn samples(count: u64) -> Vec<Vec<u8>> {
        (0..count)
            .map(|n| {
                format!(
                    "{{\"locale\":\"{}\",\"token\":\"{:016x}\",\"flash\":\"Item removed\"}}",
                    ["en-US", "de-DE"][(n % 2) as usize],
                    n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                )
                .into_bytes()
            })
            .collect()
    }

    #[test]
    fn packed_data_unpacks_to_itself_and_is_shorter() {
        let dictionary = Dictionary::train(7, &samples(1000), 4096).unwrap();
        let packer = Packer::new("t", LIFTED_FORMAT - 1)
            .packing_with(&dictionary)
            .unwrap();
        for data in samples(1100).split_off(1000) {
            let packed = packer.pack_now(data.clone());
            assert!(
                packed.len() < data.len(),
                "{} of {}",
                packed.len(),
                data.len()
            );
            assert_eq!(&packed[..2], &[PACKED, 7]);
            let codec = packer.current().unwrap();
            assert_eq!(codec.unpack(&packed[2..]).unwrap(), data);
        }
        // Short data, and data packing would not shorten, stay as they are.
        assert_eq!(packer.pack_now(b"{\"u\":1}".to_vec()), b"{\"u\":1}");
        let noise: Vec<u8> = (0..64u64)
            .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
            .collect();
        assert_eq!(packer.pack_now(noise.clone()), noise);
        assert_eq!(
            dictionary
                .stored_sizes(std::slice::from_ref(&noise))
                .unwrap(),
            [64]
        );
    }

    /// An app session as the tower store encodes it: a digest and a csrf
    /// token of its own, and a build id every session carries.
    fn tokened(n: u64) -> Vec<u8> {
        let locale = ["en-US", "de-DE"][(n % 2) as usize];
        let digest: Vec<u8> = (0..32u64)
            .map(|i| {
                let z = (n * 32 + i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                (z ^ (z >> 31)) as u8
            })
            .collect();
        let map = serde_json::from_value(serde_json::json!({
            "build": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "csrf": format!(
                "{:016x}{:016x}",
                n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                n.wrapping_mul(0xbf58_476d_1ce4_e5b9).rotate_left(29)
            ),
            "locale": locale,
            "digest": digest,
        }))
        .unwrap();
        crate::json_map::encode(&map).unwrap()
    }

    #[test]
    fn random_tokens_are_lifted_and_one_every_session_carries_is_not() {
        let samples: Vec<_> = (0..1000).map(tokened).collect();
        let dictionary = Dictionary::train(3, &samples, 4096).unwrap();
        let lifting = Packer::new("t", LIFTED_FORMAT)
            .packing_with(&dictionary)
            .unwrap();
        let plain = Packer::new("t", LIFTED_FORMAT - 1)
            .packing_with(&dictionary)
            .unwrap();
        let codec = lifting.current().unwrap();
        for n in 5000..5050 {
            let data = tokened(n);
            // The digest and the csrf token's 32 hex digits (as 16 bytes)
            // are lifted; the build id stays where the dictionary has it.
            let lifted = lift::lift(&data, lift::Finds::default(), |t| codec.holds(t)).unwrap();
            assert_eq!(lifted.lifted.len(), 32 + 16);
            let packed = lifting.pack_now(data.clone());
            assert_eq!(unpack_lifted(&codec, NEWEST, &packed[2..]).unwrap(), data);
            // Whichever form is shorter: at worst the count's byte more
            // than the packing before lifting.
            let unlifted = plain.pack_now(data.clone());
            assert!(
                packed.len() <= unlifted.len() + 1,
                "{packed:?} {unlifted:?}"
            );
        }
        // Damage in the lifted count or bytes is an error, not a panic.
        let packed = lifting.pack_now(tokened(7));
        for cut in [3, 10, 19] {
            assert!(
                unpack_lifted(&codec, NEWEST, &packed[2..cut]).is_err(),
                "{cut}"
            );
        }
        let mut bad = packed[2..].to_vec();
        bad[0] = 0xff;
        assert!(unpack_lifted(&codec, NEWEST, &bad).is_err());
    }

    /// A session whose user and tenant are UUIDs, as many apps' are.
    fn with_uuids(n: u64) -> Vec<u8> {
        let uuid = |salt: u64| {
            let h = format!(
                "{:016x}{:016x}",
                (n ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                (n ^ salt)
                    .wrapping_mul(0xbf58_476d_1ce4_e5b9)
                    .rotate_left(29)
            );
            format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            )
        };
        let locale = ["en-US", "de-DE"][(n % 2) as usize];
        let map = serde_json::from_value(serde_json::json!({
            "user_id": uuid(1),
            "tenant_id": uuid(2),
            "locale": locale,
        }))
        .unwrap();
        crate::json_map::encode(&map).unwrap()
    }

    /// Packers of record `format` and of the one before it, with a
    /// dictionary trained on sessions 0-999 of `session`, and the bytes
    /// each packs sessions 5000-5099 to (each checked to unpack).
    fn packed_from_and_before(
        session: fn(u64) -> Vec<u8>,
        format: u32,
    ) -> ((Packer, Packer), (usize, usize)) {
        let samples: Vec<_> = (0..1000).map(session).collect();
        let dictionary = Dictionary::train(3, &samples, 4096).unwrap();
        let with = Packer::new("t", format).packing_with(&dictionary).unwrap();
        let before = Packer::new("t", format - 1)
            .packing_with(&dictionary)
            .unwrap();
        let codec = with.current().unwrap();
        let (mut packed_with, mut packed_before) = (0, 0);
        for n in 5000..5100 {
            let data = session(n);
            let packed = with.pack_now(data.clone());
            assert_eq!(unpack_lifted(&codec, NEWEST, &packed[2..]).unwrap(), data);
            let old = before.pack_now(data.clone());
            assert_eq!(unpack_lifted(&codec, NEWEST, &old[2..]).unwrap(), data);
            packed_with += packed.len();
            packed_before += old.len();
        }
        ((with, before), (packed_with, packed_before))
    }

    #[test]
    fn uuids_are_lifted_from_their_format_on() {
        let (_, (packed_with, packed_before)) = packed_from_and_before(with_uuids, UUID_FORMAT);
        // Two UUIDs of 16 random bytes each: at least 10 bytes a session
        // shorter than their 72 hex digits and dashes through zstd's table.
        assert!(
            packed_with + 100 * 10 <= packed_before,
            "{packed_with} against {packed_before}"
        );
    }

    /// A session holding an OpenID Connect id token (a JSON Web Token:
    /// base64url of a JSON header and claims, and of a random signature)
    /// and, apart, a flash message as base64 of JSON.
    fn with_jwt(n: u64) -> Vec<u8> {
        let random = |salt: u64, len: usize| -> Vec<u8> {
            (0..len as u64)
                .map(|i| {
                    ((n ^ salt << 40) + i)
                        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        .to_be_bytes()[2]
                })
                .collect()
        };
        let base64 = lift::tests::base64url;
        let header = format!(
            r#"{{"alg":"RS256","kid":"{}","typ":"JWT"}}"#,
            hex::encode(random(1, 4))
        );
        let claims = format!(
            r#"{{"iss":"https://accounts.example.com","sub":"{}","aud":"shop-web","iat":{},"exp":{},"email_verified":true}}"#,
            1_000_000 + n * 7919 % 9_000_000,
            1_795_000_000 + n * 37 % 1_000_000,
            1_795_003_600 + n * 37 % 1_000_000,
        );
        let jwt = format!(
            "{}.{}.{}",
            base64(header.as_bytes()),
            base64(claims.as_bytes()),
            base64(&random(2, 64))
        );
        let flash = base64(format!(r#"{{"notice":"Order {} placed"}}"#, 10_000 + n).as_bytes());
        let map = serde_json::from_value(serde_json::json!({
            "id_token": jwt,
            "flash": flash,
        }))
        .unwrap();
        crate::json_map::encode(&map).unwrap()
    }

    #[test]
    fn base64_of_text_packs_decoded_from_its_format_on() {
        let ((with, before), (packed_with, packed_before)) =
            packed_from_and_before(with_jwt, ENCODED_TEXT_FORMAT);
        let codec = with.current().unwrap();
        // The header's and the claims' 200-odd base64url characters go
        // through zstd's table a character at a time; decoded, they are
        // JSON the dictionary knows: at least 20 bytes a session shorter
        // (about 30 here).
        assert!(
            packed_with + 100 * 20 <= packed_before,
            "{packed_with} against {packed_before}"
        );
        // Base64 of text alone lifts nothing: the form whose lifted bytes'
        // count is 0 holds escapes, which its format reads, and which the
        // formats before it never write.
        let flash = |n: u64| {
            let mut data = with_jwt(n);
            let map: HashMap<String, serde_json::Value> = crate::json_map::decode(&data).unwrap();
            data = crate::json_map::encode(&[("flash".to_owned(), map["flash"].clone())].into())
                .unwrap();
            data
        };
        for n in 6000..6010 {
            let data = flash(n);
            let packed = with.pack_now(data.clone());
            assert_eq!((packed[0], packed[2]), (PACKED, 0), "{packed:?}");
            let rest = codec.unpack(&packed[3..]).unwrap();
            assert!(lift::escaped(&rest), "{rest:?}");
            assert_eq!(unpack_lifted(&codec, NEWEST, &packed[2..]).unwrap(), data);
            let old = before.pack_now(data.clone());
            assert!(!lift::escaped(&codec.unpack(&old[3..]).unwrap_or_default()));
        }
        // Data that is not MessagePack and has 0xc1 where an item would
        // begin would read as escapes whole: it stays as it is there, and
        // is packed whole where the format reads no such escapes.
        let odd = [&[0x01, PACKED][..], &[b'a'; 60]].concat();
        assert_eq!(with.pack_now(odd.clone()), odd);
        let packed = before.pack_now(odd.clone());
        assert_eq!((packed[0], packed[2]), (PACKED, 0), "{packed:?}");
        assert_eq!(unpack_lifted(&codec, OLDER, &packed[2..]).unwrap(), odd);
    }

    #[test]
    fn a_record_repeating_its_token_packs_whole_where_that_is_shorter() {
        let samples: Vec<_> = (0..1000).map(tokened).collect();
        let dictionary = Dictionary::train(3, &samples, 4096).unwrap();
        let lifting = Packer::new("t", LIFTED_FORMAT)
            .packing_with(&dictionary)
            .unwrap();
        let codec = lifting.current().unwrap();
        let token: String = (0..8u64)
            .map(|i| format!("{:016x}", (i + 11).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
            .collect();
        let once = serde_json::json!({"a": token});
        let thrice = serde_json::json!({"a": token, "b": token, "c": token});
        for (json, lifted) in [(once, true), (thrice, false)] {
            let data = crate::json_map::encode(&serde_json::from_value(json).unwrap()).unwrap();
            let packed = lifting.pack_now(data.clone());
            assert_eq!(unpack_lifted(&codec, NEWEST, &packed[2..]).unwrap(), data);
            // After the id: the lifted bytes' count (the token's 128 hex
            // digits as 64 bytes, a two-byte varint), or 0 for the whole.
            assert_eq!(packed[2] != 0, lifted, "{packed:?}");
            if !lifted {
                // zstd matched the copies: shorter than the three lifted.
                assert!(packed.len() < 3 * 64, "{}", packed.len());
            }
        }
    }

    #[test]
    fn frames_that_lie_about_their_size_are_refused() {
        let dictionary = Dictionary::train(7, &samples(1000), 4096).unwrap();
        let codec = codec::Codec::new(&dictionary).unwrap();
        let data = samples(1).remove(0);
        let packer = Packer::new("t", LIFTED_FORMAT - 1)
            .packing_with(&dictionary)
            .unwrap();
        let mut frame = packer.pack_now(data.clone()).split_off(2);
        // A single-segment frame with a one-byte size: claim one byte more.
        assert_eq!(frame[0] & 0xe0, 0x20, "{frame:?}");
        frame[1] += 1;
        assert!(codec.unpack(&frame).is_err());
        for bad in [&[][..], &[0x00][..], &[0x20][..], &[0xe0, 1, 2][..]] {
            assert!(codec.unpack(bad).is_err(), "{bad:?}");
        }
    }
}
