//! Counts as people write them on a command line: `1000000`, `1_000_000`,
//! `1,000,000`, `1M`, `2.5k`, `1e6`.

/// Parses a positive count: digits with `_` or `,` between them, a
/// decimal or exponent form (`2.5M`, `1e6`) that comes to a whole number,
/// and a suffix `k` (thousand), `M` (million) or `G`/`B` (billion). Zero
/// is refused: there is nothing to plan or measure for no sessions.
pub fn positive(text: &str) -> Result<u64, String> {
    let bad =
        || format!("{text:?}: a count such as 1000000, 1_000_000, 1M, 2.5k or 1e6, at least 1");
    let trimmed = text.trim();
    let (number, scale) = match trimmed.char_indices().last() {
        Some((i, 'k' | 'K')) => (&trimmed[..i], 1e3),
        Some((i, 'M' | 'm')) => (&trimmed[..i], 1e6),
        Some((i, 'G' | 'g' | 'B' | 'b')) => (&trimmed[..i], 1e9),
        _ => (trimmed, 1.0),
    };
    let digits: String = number.chars().filter(|c| !matches!(c, '_' | ',')).collect();
    if digits.is_empty() || !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(bad());
    }
    let n = if let Ok(n) = digits.parse::<u64>() {
        (n as f64) * scale
    } else {
        digits.parse::<f64>().map_err(|_| bad())? * scale
    };
    // Only whole counts within u64 (below 2^53, exactly).
    if !(1.0..=9.007e15).contains(&n) || n.fract() != 0.0 {
        return Err(bad());
    }
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::positive;

    #[test]
    fn counts_are_read_as_people_write_them() {
        for (text, n) in [
            ("1000000", 1_000_000),
            ("1_000_000", 1_000_000),
            ("1,000,000", 1_000_000),
            ("1M", 1_000_000),
            ("1m", 1_000_000),
            ("2.5k", 2_500),
            ("1e6", 1_000_000),
            ("1.5e3", 1_500),
            ("100M", 100_000_000),
            ("2B", 2_000_000_000),
            ("1", 1),
        ] {
            assert_eq!(positive(text), Ok(n), "{text}");
        }
        for text in [
            "0", "0M", "", "M", "-5", "1.5", "abc", "1e-3", "1e30", "nan", "inf",
        ] {
            assert!(positive(text).is_err(), "{text}");
        }
    }
}
