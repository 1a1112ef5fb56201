//! Record sizes from real sessions, for the advisor: read from a file of
//! session data, from a key-per-session store on a live server, or from a
//! sessionpack namespace's buckets.
//!
//! Session data (a file's, another store's) is sized as the tower-sessions
//! store would keep it: [`sessionpack::json_map`]'s encoding of the map. A
//! namespace's records are sized as they are stored.

use std::collections::HashMap;
use std::path::Path;

use redis::aio::ConnectionLike;
use serde_json::Value;
use sessionpack::error::{Error, Result};
use sessionpack::session::buckets::Buckets;
use sessionpack::session::id::IdWidth;
use sessionpack::session::layout::StoredRecord;
use sessionpack::session::layout::compact::GroupedBuckets;
use sessionpack::session::meta::StoreMeta;
use sessionpack::takeover::Source;

/// Record sizes read from somewhere, and what could not be read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Each record's size in bytes, as the store keeps it.
    pub sizes: Vec<u64>,
    /// The records' data as a tower store encodes it, where the sample
    /// read data maps (not a sessionpack namespace's stored records): what
    /// a dictionary is trained on.
    pub data: Vec<Vec<u8>>,
    /// Entries read but not sized, by reason.
    pub skipped: Vec<(String, u64)>,
    /// Where they came from, for the report.
    pub from: String,
}

impl Sample {
    /// Adds one session's data map, encoded as the tower-sessions store
    /// encodes it.
    pub fn push_map(&mut self, map: &HashMap<String, Value>) -> Result<()> {
        let data = sessionpack::json_map::encode(map)?;
        self.sizes.push(data.len() as u64);
        self.data.push(data);
        Ok(())
    }

    fn skip(&mut self, reason: &str) {
        match self.skipped.iter_mut().find(|(r, _)| r == reason) {
            Some((_, n)) => *n += 1,
            None => self.skipped.push((reason.to_owned(), 1)),
        }
    }

    /// The skipped entries, as `3 (value), 1 (wrong-type)`; empty when none.
    pub fn skipped_text(&self) -> String {
        self.skipped
            .iter()
            .map(|(reason, n)| format!("{n} ({reason})"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Sessions' data from a JSON file: one object per line, or one array of
/// objects. A line or element that is not an object is an error naming
/// it, since a file is written for the purpose.
pub fn from_file(path: &Path) -> Result<Sample> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
    let bad = |at: String, e: String| Error::Config(format!("{}: {at}: {e}", path.display()));
    let maps: Vec<HashMap<String, Value>> = if text.trim_start().starts_with('[') {
        serde_json::from_str(&text)
            .map_err(|e| bad("not an array of session objects".into(), e.to_string()))?
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(n, line)| {
                serde_json::from_str(line)
                    .map_err(|e| bad(format!("line {}", n + 1), e.to_string()))
            })
            .collect::<Result<_>>()?
    };
    let mut sample = Sample {
        from: format!("{} sessions in {}", maps.len(), path.display()),
        ..Sample::default()
    };
    for map in &maps {
        sample.push_map(map)?;
    }
    Ok(sample)
}

/// Up to `want` sessions of `source`'s keys on the server behind `conn`,
/// found by `SCAN` (never `KEYS`); keys that do not hold a session of that
/// form are counted by reason and left alone.
pub async fn from_source<C>(conn: &mut C, source: &Source, want: usize) -> Result<Sample>
where
    C: ConnectionLike + Send,
{
    let mut sample = Sample::default();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(source.pattern())
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        // Every key of the batch is read, as some may hold no session.
        let keys: Vec<Vec<u8>> = keys
            .into_iter()
            .filter(|k| source.id_of(k, IdWidth::Bits128).is_ok())
            .collect();
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for key in &keys {
                pipe.get(key);
            }
            let values: Vec<redis::Value> = pipe.query_async(conn).await?;
            for value in values {
                match value {
                    redis::Value::BulkString(bytes) => match source.data_of(&bytes) {
                        Ok(data) => sample.push_map(&data)?,
                        Err(skip) => sample.skip(skip.reason()),
                    },
                    redis::Value::Nil => sample.skip("gone"),
                    _ => sample.skip("wrong-type"),
                }
            }
        }
        cursor = next;
        if cursor == 0 || sample.sizes.len() >= want {
            break;
        }
    }
    sample.sizes.truncate(want);
    sample.data.truncate(want);
    sample.from = format!(
        "{} sessions read from the keys matching {}",
        sample.sizes.len(),
        source.pattern()
    );
    Ok(sample)
}

/// Up to `want` records of the compact store in `namespace`, read bucket
/// by bucket (`HGETALL`, buckets spread over the whole range), an
/// out-of-line record's size from its key (`STRLEN`).
pub async fn from_namespace<C>(conn: &mut C, namespace: &str, want: usize) -> Result<Sample>
where
    C: ConnectionLike + Clone + Send + Sync,
{
    let meta = StoreMeta::read(conn, namespace)
        .await?
        .ok_or_else(|| Error::Config(format!("no sessionpack store in namespace {namespace}")))?;
    if meta.layout != "compact" {
        return Err(Error::Config(format!(
            "namespace {namespace} holds a {} store; only compact stores are sampled",
            meta.layout
        )));
    }
    let width = IdWidth::from_bits(meta.id_bits).ok_or_else(|| {
        Error::Config(format!(
            "namespace {namespace} records {}-bit ids",
            meta.id_bits
        ))
    })?;
    let buckets = Buckets::new(namespace, meta.bucket_bits)?.with_id_width(width);
    let field_len = buckets.field_len();
    let scheme = GroupedBuckets::new(buckets);
    let count = scheme.buckets().count();
    let mut sample = Sample::default();
    // A stride coprime with the count (odd, the count a power of two)
    // visits every bucket once, spread over groups and slots.
    let stride = (u64::from(count) / 2 + 1) | 1;
    for step in 0..u64::from(count) {
        if sample.sizes.len() >= want {
            break;
        }
        let bucket = ((step * stride) % u64::from(count)) as u32;
        let key = scheme.bucket_key(bucket);
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            match redis::cmd("HGETALL").arg(&key).query_async(conn).await {
                Ok(entries) => entries,
                Err(e) if e.code() == Some("WRONGTYPE") => {
                    sample.skip("wrong-type");
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
        let lens: std::collections::HashMap<&[u8], usize> = entries
            .iter()
            .map(|(field, value)| (field.as_slice(), value.len()))
            .collect();
        for (field, value) in &entries {
            // Long piece names, tombstones and the like carry longer fields,
            // short piece names four bytes.
            if field.len() != field_len {
                continue;
            }
            match StoredRecord::of_value(value) {
                Some(StoredRecord::Inline(len)) => sample.sizes.push(len as u64),
                Some(StoredRecord::Pieced { head, .. }) => {
                    let rest: Option<usize> = StoredRecord::piece_fields(field, value)
                        .iter()
                        .map(|name| lens.get(name.as_slice()).copied())
                        .sum();
                    match rest {
                        Some(rest) => sample.sizes.push((head + rest) as u64),
                        None => sample.skip("piece"),
                    }
                }
                Some(StoredRecord::OutOfLine) => {
                    let len: u64 = redis::cmd("STRLEN")
                        .arg(scheme.out_of_line_key(bucket, field))
                        .query_async(conn)
                        .await?;
                    if len == 0 {
                        sample.skip("gone");
                    } else {
                        sample.sizes.push(len);
                    }
                }
                None => sample.skip("value"),
            }
        }
    }
    sample.sizes.truncate(want);
    sample.from = format!(
        "{} records read from the buckets of namespace {namespace}",
        sample.sizes.len()
    );
    Ok(sample)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn a_file_of_sessions_is_sized_as_the_store_keeps_them() {
        let lines = file("{\"user_id\": 5}\n\n{\"user_id\": 5, \"locale\": \"en-US\"}\n");
        let sample = from_file(lines.path()).unwrap();
        // fixmap, code, 5 / fixmap, code, 5, code, fixstr "en-US"
        assert_eq!(sample.sizes, [3, 10]);
        let array = file("[{\"user_id\": 5}, {}]");
        assert_eq!(from_file(array.path()).unwrap().sizes, [3, 1]);
    }

    #[test]
    fn a_file_that_is_not_sessions_is_an_error_naming_where() {
        let e = from_file(file("{\"a\": 1}\n[1, 2]\n").path()).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(from_file(file("[1]").path()).is_err());
        assert!(from_file(Path::new("/nonexistent/sessions.json")).is_err());
    }
}
