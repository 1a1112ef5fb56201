//! Key names written straight into one `String`: every call names two or
//! three keys, and `format!` with a nested tag allocated and formatted
//! each piece again, a tenth of a client's time per call in a profile of
//! `sessionpack bench actix`.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends `value` in lowercase hex, zero-padded to at least `width`
/// digits: what `{value:0width$x}` writes.
pub(crate) fn push_hex(out: &mut String, value: u64, width: usize) {
    let mut buf = [0u8; 16];
    let mut n = 0;
    let mut v = value;
    loop {
        buf[n] = DIGITS[(v & 0xf) as usize];
        n += 1;
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    out.extend(std::iter::repeat_n('0', width.saturating_sub(n)));
    out.extend(buf[..n].iter().rev().map(|&b| char::from(b)));
}

/// Appends a hash tag, braces included: `{value:0width$x}` in braces.
pub(crate) fn push_tag(out: &mut String, value: u32, width: usize) {
    out.push('{');
    push_hex(out, u64::from(value), width);
    out.push('}');
}

/// Appends `bytes` in lowercase hex, two digits each.
pub(crate) fn push_hex_bytes(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// `namespace:{tag}`, with room for `more` bytes after it.
pub(crate) fn tagged(namespace: &str, tag: u32, width: usize, more: usize) -> String {
    let mut out = String::with_capacity(namespace.len() + width + 3 + more);
    out.push_str(namespace);
    out.push(':');
    push_tag(&mut out, tag, width);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_format_writes() {
        for value in [0u64, 1, 9, 10, 15, 16, 255, 4096, 0xdead_beef, u64::MAX] {
            for width in [0usize, 1, 2, 3, 5, 8, 17] {
                let mut out = String::from("x");
                push_hex(&mut out, value, width);
                assert_eq!(out, format!("x{value:0width$x}"));
            }
        }
        let mut out = String::new();
        push_tag(&mut out, 0x2a, 4);
        assert_eq!(out, "{002a}");
        let bytes = [0u8, 1, 0x7f, 0x80, 0xab, 0xff];
        let mut out = String::new();
        push_hex_bytes(&mut out, &bytes);
        assert_eq!(out, hex::encode(bytes));
        assert_eq!(tagged("sp", 3, 2, 0), "sp:{03}");
    }
}
