//! Random tokens lifted out of record data before zstd packs the rest.
//!
//! zstd codes a block's literals with one Huffman table. A session's random
//! parts (a digest's bytes, a csrf token's hex digits, an OAuth token's
//! base64) share that table with its text, and each is coded near the
//! table's average rather than at its own few bits a character: a random
//! byte costs more than eight bits there, a hex digit more than four. So
//! they are taken out first and kept in binary, eight bits a byte, and the
//! dictionary and the table serve what is left.
//!
//! [`lift`] reads the data as MessagePack, item by item (a map's or an
//! array's header, then its entries as items of their own). A string or a
//! binary of at least [`MIN_TOKEN`] bytes with random runs in it becomes an
//! escape in the rest: `0xc1` (a byte MessagePack never uses), the number
//! of its segments and whether it was a binary, then each segment's length
//! and kind, with a literal segment's bytes inline. The random segments'
//! bytes go to the lifted bytes, decoded: hex digits two to a byte, base64
//! characters four to three bytes, a random binary as it is. [`lower`]
//! rebuilds the data byte for byte. Data that is not MessagePack, and a
//! value whose header is longer than it needs to be, stay as they are.
//!
//! What counts as random: a run of at least [`MIN_TOKEN`] hex digits (of
//! one case) holding a digit and a letter; in a namespace of record format
//! [`super::UUID_FORMAT`] or later, a UUID in its 36-character form (hex
//! digits of one case in groups of 8-4-4-4-12 between dashes), lifted as
//! its 16 bytes, in text or not; in a value without whitespace,
//! a run of at least [`MIN_TOKEN`] base64 characters (of one alphabet:
//! `-_` or `+/`) holding an upper-case letter, a lower-case one and a
//! digit, which words of any language rarely do; a binary of which fewer
//! than three bytes in four are printable. (Runs between spaces are left
//! to zstd, whose table codes them about as well without an escape's
//! bytes.)
//!
//! Not every base64 run is random: a JSON Web Token's header and claims
//! are JSON in base64url, and apps keep other text that way too. In a
//! namespace of record format [`super::ENCODED_TEXT_FORMAT`] or later, a
//! base64 run whose bytes decode to text (UTF-8 without control
//! characters) stays in the rest decoded, where the dictionary and zstd
//! find its keys and words; [`lower`] encodes it again. A run the
//! decoding would not give back character for character stays a token.

/// The shortest string or binary, and the shortest run in one, lifted.
pub(super) const MIN_TOKEN: usize = 16;
/// The escape that begins a lifted value in the rest.
const ESCAPE: u8 = 0xc1;

/// How a segment of a lifted value is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Inline in the rest, as it was.
    Literal = 0,
    /// In the lifted bytes, as it was (a random binary).
    Raw = 1,
    /// Hex digits `0-9a-f`, two to a lifted byte.
    HexLower = 2,
    /// Hex digits `0-9A-F`.
    HexUpper = 3,
    /// Base64url characters (`A-Za-z0-9-_`), six bits each.
    Url = 4,
    /// Base64 characters (`A-Za-z0-9+/`).
    Std = 5,
    /// A UUID of hex digits `0-9a-f`, its 32 digits two to a lifted byte,
    /// its dashes implied (its segment's length field is 0: always
    /// [`UUID_CHARS`]).
    UuidLower = 6,
    /// A UUID of hex digits `0-9A-F`.
    UuidUpper = 7,
    /// Base64url characters whose bytes are text, kept decoded in the
    /// rest. Its segment's word shares [`Kind::UuidLower`]'s tag, with a
    /// length (a UUID's is always 0).
    UrlText = 8,
    /// Base64 characters whose bytes are text, kept decoded in the rest
    /// (the tag of [`Kind::UuidUpper`], with a length).
    StdText = 9,
}

/// Characters of a UUID's text form.
const UUID_CHARS: usize = 36;
/// Where a UUID's text form has its dashes.
const UUID_DASHES: [usize; 4] = [8, 13, 18, 23];

impl Kind {
    /// The word a segment of this kind and `len` characters begins with:
    /// its length field, then three bits of tag. A UUID's length is
    /// implied (0), which leaves its tags free, with a length, for the
    /// text kinds.
    fn word(self, len: usize) -> u64 {
        let tag = match self {
            Self::UrlText => Self::UuidLower as u64,
            Self::StdText => Self::UuidUpper as u64,
            kind => kind as u64,
        };
        let len = if self.is_uuid() { 0 } else { len as u64 };
        (len << 3) | tag
    }

    /// The kind and length of characters a segment's word gives.
    fn from_word(word: u64) -> Result<(Self, usize), String> {
        let len = usize::try_from(word >> 3).map_err(|_| "a lifted segment too long")?;
        let kind = match (word & 7, len) {
            (0, _) => Self::Literal,
            (1, _) => Self::Raw,
            (2, _) => Self::HexLower,
            (3, _) => Self::HexUpper,
            (4, _) => Self::Url,
            (5, _) => Self::Std,
            (6, 0) => return Ok((Self::UuidLower, UUID_CHARS)),
            (7, 0) => return Ok((Self::UuidUpper, UUID_CHARS)),
            (6, _) => Self::UrlText,
            _ => Self::StdText,
        };
        Ok((kind, len))
    }

    /// The alphabet of a kind coded a character at a time.
    fn alphabet(self) -> &'static [u8] {
        match self {
            Self::HexLower | Self::UuidLower => b"0123456789abcdef",
            Self::HexUpper | Self::UuidUpper => b"0123456789ABCDEF",
            Self::Url | Self::UrlText => {
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
            }
            Self::Std | Self::StdText => {
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
            }
            Self::Literal | Self::Raw => b"",
        }
    }

    /// Each byte's place in the kind's alphabet, where it has one.
    fn index(self, c: u8) -> Option<u8> {
        let table = match self {
            Self::HexLower | Self::UuidLower => &HEX_LOWER,
            Self::HexUpper | Self::UuidUpper => &HEX_UPPER,
            Self::Url | Self::UrlText => &URL,
            Self::Std | Self::StdText => &STD,
            Self::Literal | Self::Raw => return None,
        };
        table[usize::from(c)].checked_sub(1)
    }

    /// Bits a character of this kind takes in the lifted bytes.
    fn bits(self) -> usize {
        match self {
            Self::HexLower | Self::HexUpper | Self::UuidLower | Self::UuidUpper => 4,
            Self::Url | Self::Std | Self::UrlText | Self::StdText => 6,
            Self::Literal | Self::Raw => 8,
        }
    }

    /// Lifted bytes of a segment of `len` characters; `None` for a
    /// length no data has.
    fn lifted_len(self, len: usize) -> Option<usize> {
        match self {
            Self::Literal | Self::UrlText | Self::StdText => Some(0),
            Self::UuidLower | Self::UuidUpper => (len == UUID_CHARS).then_some(16),
            _ => Some(len.checked_mul(self.bits())?.div_ceil(8)),
        }
    }

    fn is_uuid(self) -> bool {
        matches!(self, Self::UuidLower | Self::UuidUpper)
    }

    fn is_text(self) -> bool {
        matches!(self, Self::UrlText | Self::StdText)
    }

    /// The text kind of a base64 kind.
    fn as_text(self) -> Self {
        match self {
            Self::Url => Self::UrlText,
            Self::Std => Self::StdText,
            kind => kind,
        }
    }

    /// The UUID kind of `text`, where it is one UUID's 36 characters.
    fn uuid_of(text: &[u8]) -> Option<Self> {
        if text.len() != UUID_CHARS {
            return None;
        }
        let digits = || {
            text.iter()
                .enumerate()
                .filter(|(i, _)| !UUID_DASHES.contains(i))
                .map(|(_, b)| *b)
        };
        if UUID_DASHES.iter().any(|&i| text[i] != b'-') {
            return None;
        }
        [Self::UuidLower, Self::UuidUpper]
            .into_iter()
            .find(|kind| digits().all(|b| kind.index(b).is_some()))
    }
}

/// Each byte's place in an alphabet plus one; zero for bytes outside it.
const fn places(alphabet: &[u8]) -> [u8; 256] {
    let mut table = [0; 256];
    let mut i = 0;
    while i < alphabet.len() {
        table[alphabet[i] as usize] = i as u8 + 1;
        i += 1;
    }
    table
}

const HEX_LOWER: [u8; 256] = places(b"0123456789abcdef");
const HEX_UPPER: [u8; 256] = places(b"0123456789ABCDEF");
const URL: [u8; 256] = places(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_");
const STD: [u8; 256] = places(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");

/// Data with its random tokens lifted out.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Lifted {
    /// The tokens, in binary, in the order their values come.
    pub(super) lifted: Vec<u8>,
    /// The data with each lifted value replaced by its escape.
    pub(super) rest: Vec<u8>,
}

/// What a namespace's record format finds in data beyond hex digits,
/// base64 and random binaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Finds {
    /// UUIDs in their text form, lifted as 16 bytes
    /// ([`super::UUID_FORMAT`]).
    pub(super) uuids: bool,
    /// Base64 runs of text, kept decoded in the rest
    /// ([`super::ENCODED_TEXT_FORMAT`]).
    pub(super) encoded_text: bool,
}

impl Finds {
    /// What record `format` finds.
    pub(super) fn of(format: u32) -> Self {
        Self {
            uuids: format >= super::UUID_FORMAT,
            encoded_text: format >= super::ENCODED_TEXT_FORMAT,
        }
    }
}

/// `data` with its random tokens lifted out, but those `keep` holds (the
/// dictionary's), or `None` where nothing is (no tokens, or not
/// MessagePack), as `finds` finds them.
pub(super) fn lift(data: &[u8], finds: Finds, keep: impl Fn(&[u8]) -> bool) -> Option<Lifted> {
    let mut out = Lifted {
        lifted: Vec::new(),
        rest: Vec::with_capacity(data.len()),
    };
    let mut escaped = false;
    let mut at = 0;
    while at < data.len() {
        let item = Item::read(data, at)?;
        let end = item.end();
        match item.payload(data) {
            Some((payload, is_bin)) if item.is_shortest() && payload.len() >= MIN_TOKEN => {
                let segments = segments(payload, is_bin, finds, &keep);
                if segments.iter().any(|s| s.kind != Kind::Literal) {
                    escaped = true;
                    escape(&mut out, payload, is_bin, &segments);
                } else {
                    out.rest.extend_from_slice(&data[at..end]);
                }
            }
            _ => out.rest.extend_from_slice(&data[at..end]),
        }
        at = end;
    }
    // An escape of encoded text alone lifts no bytes.
    escaped.then_some(out)
}

/// Whether `rest`, packed with no lifted bytes, holds an escape where an
/// item begins (so [`lower`] must rebuild it): base64 of text kept
/// decoded, nothing lifted. MessagePack never has `0xc1` there; other
/// data may, and is not packed whole where this is asked.
pub(super) fn escaped(rest: &[u8]) -> bool {
    if !rest.contains(&ESCAPE) {
        return false;
    }
    let mut at = 0;
    while at < rest.len() {
        if rest[at] == ESCAPE {
            return true;
        }
        match Item::read(rest, at) {
            Some(item) => at = item.end(),
            None => return false,
        }
    }
    false
}

/// The data [`lift`] made `rest` and `lifted` of; a description of the
/// damage where they do not fit together.
pub(super) fn lower(rest: &[u8], lifted: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(rest.len() + 2 * lifted.len());
    let mut lifted = lifted;
    let mut at = 0;
    while at < rest.len() {
        if rest[at] == ESCAPE {
            at = unescape(rest, at + 1, &mut lifted, &mut out)?;
            continue;
        }
        let item = Item::read(rest, at).ok_or("lifted data's rest is cut short")?;
        out.extend_from_slice(&rest[at..item.end()]);
        at = item.end();
    }
    if !lifted.is_empty() {
        return Err(format!(
            "{} lifted bytes are left over after the data",
            lifted.len()
        ));
    }
    Ok(out)
}

/// One segment of a value: `len` bytes of it from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    kind: Kind,
    start: usize,
    len: usize,
}

/// How a string's or a binary's bytes divide into literal and random
/// runs, those `keep` holds left literal (but base64 of text).
fn segments(
    payload: &[u8],
    is_bin: bool,
    finds: Finds,
    keep: &impl Fn(&[u8]) -> bool,
) -> Vec<Segment> {
    if is_bin && payload.iter().filter(|b| is_printable(**b)).count() * 4 < payload.len() * 3 {
        if keep(payload) {
            return Vec::new();
        }
        return vec![Segment {
            kind: Kind::Raw,
            start: 0,
            len: payload.len(),
        }];
    }
    // Base64 runs between spaces are words of text, which zstd's table
    // codes about as well, at no escape's cost.
    let text = payload.iter().any(u8::is_ascii_whitespace);
    let mut out = Vec::new();
    let mut literal = 0;
    let mut at = 0;
    while at < payload.len() {
        if !is_token_char(payload[at]) {
            at += 1;
            continue;
        }
        let end = at
            + payload[at..]
                .iter()
                .take_while(|b| is_token_char(**b))
                .count();
        for token in tokens(&payload[at..end], text, finds) {
            let start = at + token.start;
            // Text is kept decoded whether or not the dictionary holds its
            // first characters: it holds its words decoded too.
            if !token.kind.is_text() && keep(&payload[start..start + token.len]) {
                continue;
            }
            if start > literal {
                out.push(Segment {
                    kind: Kind::Literal,
                    start: literal,
                    len: start - literal,
                });
            }
            out.push(Segment { start, ..token });
            literal = start + token.len;
        }
        at = end;
    }
    if literal < payload.len() {
        out.push(Segment {
            kind: Kind::Literal,
            start: literal,
            len: payload.len() - literal,
        });
    }
    out
}

/// The random runs in a run of token characters, placed within it: UUIDs
/// where `finds` says, hex digits, and base64 unless the run is in `text`
/// (base64 of text as such where `finds` says).
fn tokens(run: &[u8], text: bool, finds: Finds) -> Vec<Segment> {
    if run.len() < MIN_TOKEN {
        return Vec::new();
    }
    if finds.uuids
        && let Some(found) = uuid_tokens(run, text, finds)
    {
        return found;
    }
    for kind in [Kind::HexLower, Kind::HexUpper] {
        if run.iter().all(|b| kind.index(*b).is_some())
            && run.iter().any(u8::is_ascii_digit)
            && run.iter().any(u8::is_ascii_alphabetic)
        {
            return vec![Segment {
                kind,
                start: 0,
                len: run.len(),
            }];
        }
    }
    if text {
        return Vec::new();
    }
    // The longest run of one base64 alphabet from each place on.
    let mut out = Vec::new();
    let mut at = 0;
    while at < run.len() {
        let reach = |kind: Kind| {
            run[at..]
                .iter()
                .take_while(|b| kind.index(**b).is_some())
                .count()
        };
        let (url, std) = (reach(Kind::Url), reach(Kind::Std));
        let (kind, len) = if url >= std {
            (Kind::Url, url)
        } else {
            (Kind::Std, std)
        };
        let part = &run[at..at + len];
        if len >= MIN_TOKEN
            && part.iter().any(u8::is_ascii_digit)
            && part.iter().any(u8::is_ascii_uppercase)
            && part.iter().any(u8::is_ascii_lowercase)
        {
            let kind = if finds.encoded_text && decodes_to_text(kind, part) {
                kind.as_text()
            } else {
                kind
            };
            out.push(Segment {
                kind,
                start: at,
                len,
            });
        }
        at += len.max(1);
    }
    out
}

/// The UUIDs in `run` and the random runs between them, or `None` where
/// it holds no UUID. A UUID is taken where it begins (the first of two
/// that overlap), so a longer run of hex digits and dashes gives up the
/// UUID inside it.
fn uuid_tokens(run: &[u8], text: bool, finds: Finds) -> Option<Vec<Segment>> {
    let between = Finds {
        uuids: false,
        ..finds
    };
    let mut out = Vec::new();
    let mut from = 0;
    let mut at = 0;
    while at + UUID_CHARS <= run.len() {
        let Some(kind) = Kind::uuid_of(&run[at..at + UUID_CHARS]) else {
            at += 1;
            continue;
        };
        let before = tokens(&run[from..at], text, between);
        out.extend(before.into_iter().map(|s| Segment {
            start: s.start + from,
            ..s
        }));
        out.push(Segment {
            kind,
            start: at,
            len: UUID_CHARS,
        });
        at += UUID_CHARS;
        from = at;
    }
    if out.is_empty() {
        return None;
    }
    let after = tokens(&run[from..], text, between);
    out.extend(after.into_iter().map(|s| Segment {
        start: s.start + from,
        ..s
    }));
    Some(out)
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b'/')
}

fn is_printable(b: u8) -> bool {
    (0x20..0x7f).contains(&b) || matches!(b, b'\t' | b'\n' | b'\r')
}

/// Appends the whole bytes base64 characters `chars` of `kind` decode to;
/// whether they encode back to `chars` exactly (no bits left over past
/// the last byte).
fn decode(kind: Kind, chars: &[u8], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    pack_chars(kind, chars, out);
    let whole = start + chars.len() * 6 / 8;
    let exact = out[whole..].iter().all(|b| *b == 0);
    out.truncate(whole);
    exact
}

/// Whether base64 characters `chars` of `kind` decode exactly to text
/// (UTF-8 without control characters but tab and line ends).
fn decodes_to_text(kind: Kind, chars: &[u8]) -> bool {
    let mut bytes = Vec::with_capacity(chars.len() * 3 / 4 + 1);
    decode(kind, chars, &mut bytes)
        && std::str::from_utf8(&bytes)
            .is_ok_and(|text| text.bytes().all(|b| b >= 0x80 || is_printable(b)))
}

/// Writes a value's escape to the rest and its tokens to the lifted bytes.
fn escape(out: &mut Lifted, payload: &[u8], is_bin: bool, segments: &[Segment]) {
    out.rest.push(ESCAPE);
    put_varint(
        &mut out.rest,
        ((segments.len() as u64) << 1) | u64::from(is_bin),
    );
    for s in segments {
        put_varint(&mut out.rest, s.kind.word(s.len));
        let bytes = &payload[s.start..s.start + s.len];
        match s.kind {
            Kind::Literal => out.rest.extend_from_slice(bytes),
            Kind::Raw => out.lifted.extend_from_slice(bytes),
            Kind::UrlText | Kind::StdText => {
                // `segments` found it to decode exactly.
                decode(s.kind, bytes, &mut out.rest);
            }
            kind if kind.is_uuid() => {
                let digits: Vec<u8> = bytes.iter().copied().filter(|b| *b != b'-').collect();
                pack_chars(kind, &digits, &mut out.lifted);
            }
            kind => pack_chars(kind, bytes, &mut out.lifted),
        }
    }
}

/// Rebuilds the value whose escape's body begins at `at`; returns where
/// the rest goes on.
fn unescape(
    rest: &[u8],
    mut at: usize,
    lifted: &mut &[u8],
    out: &mut Vec<u8>,
) -> Result<usize, String> {
    let head = get_varint(rest, &mut at)?;
    let (count, is_bin) = (head >> 1, head & 1 == 1);
    let mut payload = Vec::new();
    for _ in 0..count {
        let (kind, len) = Kind::from_word(get_varint(rest, &mut at)?)?;
        match kind {
            Kind::Literal => {
                let bytes = rest
                    .get(at..at.saturating_add(len))
                    .ok_or("a literal segment runs past the data")?;
                payload.extend_from_slice(bytes);
                at += len;
            }
            Kind::UrlText | Kind::StdText => {
                let whole = len.checked_mul(6).ok_or("a lifted segment too long")? / 8;
                let bytes = rest
                    .get(at..at.saturating_add(whole))
                    .ok_or("an encoded text segment runs past the data")?;
                unpack_chars(kind, bytes, len, &mut payload);
                at += whole;
            }
            kind => {
                let take = kind.lifted_len(len).unwrap_or(usize::MAX);
                if take > lifted.len() {
                    return Err("a lifted segment runs past the lifted bytes".into());
                }
                let (bytes, left) = lifted.split_at(take);
                *lifted = left;
                if kind == Kind::Raw {
                    payload.extend_from_slice(bytes);
                } else if kind.is_uuid() {
                    let mut digits = Vec::with_capacity(32);
                    unpack_chars(kind, bytes, 32, &mut digits);
                    for (i, digit) in digits.into_iter().enumerate() {
                        if matches!(i, 8 | 12 | 16 | 20) {
                            payload.push(b'-');
                        }
                        payload.push(digit);
                    }
                } else {
                    unpack_chars(kind, bytes, len, &mut payload);
                }
            }
        }
    }
    put_header(out, payload.len(), is_bin);
    out.extend_from_slice(&payload);
    Ok(at)
}

/// Packs characters of `kind`'s alphabet, `kind.bits()` each, first bit
/// first, the last byte's low bits zero.
fn pack_chars(kind: Kind, chars: &[u8], out: &mut Vec<u8>) {
    let bits = kind.bits();
    let (mut acc, mut held) = (0u32, 0);
    for c in chars {
        let index = u32::from(kind.index(*c).unwrap_or(0));
        acc = (acc << bits) | index;
        held += bits;
        while held >= 8 {
            held -= 8;
            out.push((acc >> held) as u8);
        }
    }
    if held > 0 {
        out.push((acc << (8 - held)) as u8);
    }
}

/// The `len` characters [`pack_chars`] packed into `bytes`.
fn unpack_chars(kind: Kind, bytes: &[u8], len: usize, out: &mut Vec<u8>) {
    let alphabet = kind.alphabet();
    let bits = kind.bits();
    let mask = (1u32 << bits) - 1;
    let (mut acc, mut held) = (0u32, 0);
    let mut bytes = bytes.iter();
    for _ in 0..len {
        while held < bits {
            acc = (acc << 8) | u32::from(*bytes.next().unwrap_or(&0));
            held += 8;
        }
        held -= bits;
        out.push(alphabet[((acc >> held) & mask) as usize]);
    }
}

/// The shortest MessagePack header of a string or binary of `len` bytes.
fn put_header(out: &mut Vec<u8>, len: usize, is_bin: bool) {
    match (is_bin, len) {
        (false, 0..32) => out.push(0xa0 | len as u8),
        (false, 32..256) => out.extend_from_slice(&[0xd9, len as u8]),
        (true, 0..256) => out.extend_from_slice(&[0xc4, len as u8]),
        (_, 256..65_536) => {
            out.push(if is_bin { 0xc5 } else { 0xda });
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(if is_bin { 0xc6 } else { 0xdb });
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

pub(super) fn get_varint(data: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *data
            .get(*at)
            .ok_or("a lifted value's escape is cut short")?;
        *at += 1;
        n |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err("a lifted value's escape holds a number too long".into())
}

/// One MessagePack item: a scalar, a string, a binary or an extension
/// with its payload, or a map's or an array's header alone.
struct Item {
    /// The first byte.
    tag: u8,
    start: usize,
    header: usize,
    payload: usize,
}

impl Item {
    /// The item at `at`, or `None` where the bytes there are not one.
    fn read(data: &[u8], at: usize) -> Option<Self> {
        let tag = *data.get(at)?;
        let len_at = |width: usize| -> Option<usize> {
            let bytes = data.get(at + 1..at + 1 + width)?;
            Some(bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)))
        };
        let (header, payload) = match tag {
            0x00..=0x7f | 0x80..=0x9f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => (1, 0),
            0xa0..=0xbf => (1, usize::from(tag & 0x1f)),
            0xc4 | 0xd9 => (2, len_at(1)?),
            0xc5 | 0xda => (3, len_at(2)?),
            0xc6 | 0xdb => (5, len_at(4)?),
            0xc7 => (3, len_at(1)?),
            0xc8 => (4, len_at(2)?),
            0xc9 => (6, len_at(4)?),
            0xca | 0xce | 0xd2 => (5, 0),
            0xcb | 0xcf | 0xd3 => (9, 0),
            0xcc | 0xd0 => (2, 0),
            0xcd | 0xd1 => (3, 0),
            0xd4 => (3, 0),
            0xd5 => (4, 0),
            0xd6 => (6, 0),
            0xd7 => (10, 0),
            0xd8 => (18, 0),
            0xdc | 0xde => (3, 0),
            0xdd | 0xdf => (5, 0),
            0xc1 => return None,
        };
        let item = Self {
            tag,
            start: at,
            header,
            payload,
        };
        (item.end() <= data.len()).then_some(item)
    }

    fn end(&self) -> usize {
        self.start + self.header + self.payload
    }

    /// A string's or a binary's bytes, and whether it is a binary.
    fn payload<'a>(&self, data: &'a [u8]) -> Option<(&'a [u8], bool)> {
        let is_bin = match self.tag {
            0xa0..=0xbf | 0xd9..=0xdb => false,
            0xc4..=0xc6 => true,
            _ => return None,
        };
        Some((&data[self.start + self.header..self.end()], is_bin))
    }

    /// Whether its header is the shortest for its length (so [`lower`]
    /// rebuilds it).
    fn is_shortest(&self) -> bool {
        let Some(is_bin) = (match self.tag {
            0xa0..=0xbf | 0xd9..=0xdb => Some(false),
            0xc4..=0xc6 => Some(true),
            _ => None,
        }) else {
            return false;
        };
        let mut header = Vec::new();
        put_header(&mut header, self.payload, is_bin);
        header.len() == self.header && header[0] == self.tag
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// `data` lifted as a namespace before [`super::super::UUID_FORMAT`]
    /// lifts it, checked to lower to itself, and lowering to itself when
    /// lifted as the newest format lifts it too.
    fn round_trip(data: &[u8]) -> Option<Lifted> {
        round_trip_newest(data);
        round_trip_with(data, false)
    }

    fn round_trip_newest(data: &[u8]) -> Option<Lifted> {
        let lifted = lift(data, Finds::of(u32::MAX), |_| false);
        if let Some(l) = &lifted {
            assert_eq!(lower(&l.rest, &l.lifted).unwrap(), data);
        }
        lifted
    }

    fn round_trip_uuids(data: &[u8]) -> Option<Lifted> {
        round_trip_with(data, true)
    }

    fn round_trip_with(data: &[u8], uuids: bool) -> Option<Lifted> {
        let finds = Finds {
            uuids,
            encoded_text: false,
        };
        let lifted = lift(data, finds, |_| false);
        if let Some(l) = &lifted {
            assert_eq!(lower(&l.rest, &l.lifted).unwrap(), data);
        }
        lifted
    }

    /// A value of a test map: a string or a binary.
    enum V {
        S(String),
        B(Vec<u8>),
    }

    fn s(text: &str) -> V {
        V::S(text.to_owned())
    }

    fn map(entries: Vec<(&str, V)>) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_map_len(&mut out, entries.len() as u32).unwrap();
        for (key, value) in entries {
            rmp::encode::write_str(&mut out, key).unwrap();
            match value {
                V::S(text) => rmp::encode::write_str(&mut out, &text).unwrap(),
                V::B(bytes) => rmp::encode::write_bin(&mut out, &bytes).unwrap(),
            }
        }
        out
    }

    #[test]
    fn tokens_are_lifted_in_binary_and_the_rest_kept() {
        let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let url = "ya29.a0AfH6SMBx3dFq-9Lk_Qz81mRtY2vNcE0pW7hJ";
        let digest: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(97) ^ 0x5a).collect();
        let data = map(vec![
            ("csrf_token", s(hex)),
            ("access_token", s(url)),
            ("auth_hash", V::B(digest.clone())),
            ("flash", s("Welcome back to the shop")),
        ]);
        let lifted = round_trip(&data).expect("lifted");
        // 32 bytes of hex digits, 38 base64url characters after "ya29."
        // (28.5 bytes), the digest as it is.
        assert_eq!(lifted.lifted.len(), 32 + 29 + 32);
        assert!(lifted.lifted.starts_with(&hex::decode(hex).unwrap()));
        assert!(lifted.lifted.ends_with(&digest));
        let rest = String::from_utf8_lossy(&lifted.rest);
        assert!(rest.contains("ya29."), "{rest}");
        assert!(rest.contains("Welcome back to the shop"), "{rest}");
        assert!(!rest.contains(&hex[..16]), "{rest}");
    }

    #[test]
    fn words_numbers_and_short_values_are_not_tokens() {
        for text in [
            "The quick brown fox jumps over the lazy dog, twice a day",
            "internationalization and localization",
            "1234567890123456789012",
            "deadbeefdeadbeefde",
            "550e8400-e29b-41d4-a716-446655440000",
            "a1B2c3",
        ] {
            let data = map(vec![("v", s(text))]);
            // Hex of one kind only (digits, or letters) and uuids' short
            // runs are not tokens either.
            assert_eq!(round_trip(&data), None, "{text}");
        }
        let printable = map(vec![("v", V::B(b"$argon2id$v=19$m=19456".to_vec()))]);
        assert_eq!(round_trip(&printable), None);
    }

    #[test]
    fn uuids_are_lifted_as_sixteen_bytes_where_the_format_has_them() {
        let lower_uuid = "550e8400-e29b-41d4-a716-446655440000";
        let upper_uuid = "F47AC10B-58CC-4372-A567-0E02B2C3D479";
        let data = map(vec![
            ("user_id", s(lower_uuid)),
            ("tenant", s(&format!("tenant-{upper_uuid}"))),
            ("note", s(&format!("order {lower_uuid} shipped"))),
        ]);
        // Before the format, a lower-case UUID is no token (and the
        // upper-case one with "tenant-" is base64url).
        let alone = map(vec![("u", s(lower_uuid))]);
        assert_eq!(round_trip(&alone), None, "not before the format");
        let lifted = round_trip_uuids(&data).expect("lifted");
        let bytes = |uuid: &str| hex::decode(uuid.replace('-', "")).unwrap();
        assert_eq!(
            lifted.lifted,
            [bytes(lower_uuid), bytes(upper_uuid), bytes(lower_uuid)].concat()
        );
        let rest = String::from_utf8_lossy(&lifted.rest);
        assert!(
            rest.contains("tenant-") && rest.contains(" shipped"),
            "{rest}"
        );
        assert!(!rest.contains("550e8400"), "{rest}");
        // A UUID's escape: the escape, one segment, its kind (no length).
        let alone = round_trip_uuids(&alone).unwrap();
        assert_eq!(alone.rest.len(), 3 + 3, "{:?}", alone.rest);
        for text in [
            "550e8400-e29b-41d4-A716-446655440000",
            "550e8400-e29b-41d4-a716-44665544000",
            "550e8400e29b-41d4-a716-4466554400001",
            "550e8400-e29b-41d4-a716_446655440000",
        ] {
            // Mixed case, short, a dash out of place: no UUID, lifted as
            // before the format (mixed case as base64url).
            let data = map(vec![("v", s(text))]);
            assert_eq!(round_trip_uuids(&data), round_trip(&data), "{text}");
        }
        // Around a UUID the other tokens are found as before.
        let hex = "9f86d081884c7d659a2feaa0c55ad015";
        let joined = map(vec![("v", s(&format!("{hex}{lower_uuid}{hex}")))]);
        let lifted = round_trip_uuids(&joined).unwrap();
        assert_eq!(lifted.lifted.len(), 16 * 3);
    }

    /// `bytes` in base64 of `kind`'s alphabet, unpadded.
    fn base64(kind: Kind, bytes: &[u8]) -> String {
        let mut chars = Vec::new();
        unpack_chars(kind, bytes, (bytes.len() * 8).div_ceil(6), &mut chars);
        String::from_utf8(chars).unwrap()
    }

    /// `bytes` in base64url, unpadded, as a JSON Web Token writes them.
    pub(in crate::session::dictionary) fn base64url(bytes: &[u8]) -> String {
        base64(Kind::Url, bytes)
    }

    #[test]
    fn base64_of_text_is_kept_decoded_from_its_format_on() {
        let header = br#"{"alg":"RS256","kid":"k7Qz","typ":"JWT"}"#;
        let claims = r#"{"sub":"248289761001","name":"Zoë","iat":1795000000}"#;
        let signature: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(181) ^ 0x3c).collect();
        let jwt = format!(
            "{}.{}.{}",
            base64(Kind::Url, header),
            base64(Kind::Url, claims.as_bytes()),
            base64(Kind::Url, &signature)
        );
        let data = map(vec![("id_token", s(&jwt))]);
        // Before the format all three parts are random base64url.
        let before = round_trip_uuids(&data).unwrap();
        let newest = round_trip_newest(&data).unwrap();
        // From it the header and the claims stay in the rest as text, the
        // signature is lifted, six bits a character.
        assert_eq!(newest.lifted.len(), (86 * 6usize).div_ceil(8));
        assert!(before.lifted.len() > newest.lifted.len() + 80);
        let rest = String::from_utf8_lossy(&newest.rest);
        assert!(rest.contains(r#"{"alg":"RS256""#), "{rest}");
        assert!(rest.contains(claims), "{rest}");
        // Padded standard base64 of text: the run before the padding.
        let text = b"{\"flash\":\"Welcome back\"}";
        let padded = format!("{}=", base64(Kind::Std, text));
        let newest = round_trip_newest(&map(vec![("f", s(&padded))])).unwrap();
        assert!(newest.lifted.is_empty());
        let rest = String::from_utf8_lossy(&newest.rest);
        assert!(rest.contains(r#"{"flash":"Welcome back"}"#), "{rest}");
        // Runs that would not encode back as they were, or are no text,
        // are lifted as before: bits left over past the last byte (the
        // last character one above the canonical one), one character
        // more (whose byte is a control character), random bytes, and
        // bytes of a control character.
        let canonical = base64(Kind::Url, claims.as_bytes());
        let mut left_over = canonical.clone().into_bytes();
        *left_over.last_mut().unwrap() += 1;
        let controls = base64(Kind::Url, b"line one\x07line 2 of the text");
        for run in [
            String::from_utf8(left_over).unwrap(),
            format!("{canonical}Q"),
            base64(Kind::Url, &signature),
            controls,
        ] {
            let data = map(vec![("v", s(&run))]);
            assert_eq!(round_trip_newest(&data), round_trip_uuids(&data), "{run}");
        }
    }

    #[test]
    fn base64_runs_in_text_are_left_to_zstd_and_hex_is_not() {
        let hex = "9f86d081884c7d659a2feaa0c55ad015";
        let words = "Kx9vQ2mZ7pLw3RtY8nBc Zq1Wd4Hs6Jk0Fv5Gx2Lm was the code";
        assert_eq!(round_trip(&map(vec![("m", s(words))])), None);
        let with_hex = format!("{words} and the commit {hex}");
        let lifted = round_trip(&map(vec![("m", s(&with_hex))])).unwrap();
        assert_eq!(lifted.lifted, hex::decode(hex).unwrap());
        // Without the spaces the same characters are one token.
        let token = words.replace(' ', "");
        let lifted = round_trip(&map(vec![("m", s(&token))])).unwrap();
        assert_eq!(lifted.lifted.len(), (token.len() * 6).div_ceil(8));
    }

    #[test]
    fn every_length_and_alphabet_round_trips() {
        let alphabets: [&[u8]; 4] = [
            b"0123456789abcdef",
            b"0123456789ABCDEF",
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/ .",
        ];
        let mut seed = 7u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for alphabet in alphabets {
            for len in [15, 16, 17, 18, 19, 31, 32, 33, 255, 256, 300, 70_000] {
                let text: String = (0..len)
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize] as char)
                    .collect();
                let lifted = round_trip(&map(vec![("s", V::S(text.clone()))]));
                if !alphabet.contains(&b' ') {
                    assert_eq!(lifted.is_some(), len >= MIN_TOKEN, "{len} of {alphabet:?}");
                }
                round_trip(&map(vec![("b", V::B(text.into_bytes()))]));
                let noise: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let lifted = round_trip(&map(vec![("n", V::B(noise))]));
                assert_eq!(lifted.is_some(), len >= MIN_TOKEN);
            }
        }
    }

    #[test]
    fn what_is_not_messagepack_or_not_shortest_is_left_alone() {
        let hex = "9f86d081884c7d659a2feaa0c55ad015";
        // str16 for 32 bytes: not the shortest header.
        let mut long_header = vec![0x81, 0xa1, b'v', 0xda, 0, 32];
        long_header.extend_from_slice(hex.as_bytes());
        assert_eq!(lift(&long_header, Finds::default(), |_| false), None);
        let mut cut = map(vec![("v", s(hex))]);
        cut.pop();
        assert_eq!(lift(&cut, Finds::default(), |_| false), None);
        assert_eq!(lift(&[0xc1, 0x01], Finds::default(), |_| false), None);
        assert_eq!(lift(b"", Finds::default(), |_| false), None);
    }

    #[test]
    fn damaged_lifts_are_refused() {
        let data = map(vec![("v", s("9f86d081884c7d659a2feaa0c55ad015"))]);
        let l = lift(&data, Finds::default(), |_| false).unwrap();
        assert!(lower(&l.rest, &l.lifted[1..]).is_err(), "lifted cut short");
        let mut more = l.lifted.clone();
        more.push(0);
        assert!(lower(&l.rest, &more).is_err(), "lifted left over");
        assert!(lower(&l.rest[..l.rest.len() - 1], &l.lifted).is_err());
        for bad in [
            &[0xc1][..],
            // An encoded text segment of 36 characters without its 27
            // bytes.
            &[0xc1, 0x02, 0x07 | (36 << 3) as u8][..],
            &[0xc1, 0x02, 0xf8, 0xff][..],
        ] {
            assert!(lower(bad, &[1, 2, 3]).is_err(), "{bad:?}");
        }
    }
}
