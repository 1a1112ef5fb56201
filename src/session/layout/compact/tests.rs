use super::value::check_of;
use super::*;
use crate::session::record;

#[test]
fn values_round_trip_in_both_forms() {
    let record = record::encode(&1_234_567u64, &()).unwrap();
    let n = 1_234_567 * SCALE + 1_800_000_000;
    assert_eq!(
        parse_value(n.to_string().as_bytes()),
        Some(Value::Here {
            expires_at: 1_800_000_000,
            record: record.clone()
        })
    );
    // Identity 0 is the expiry alone.
    assert_eq!(
        parse_value(b"1800000000"),
        Some(Value::Here {
            expires_at: 1_800_000_000,
            record: vec![0]
        })
    );
    let mut binary = 1_800_000_000u32.to_be_bytes().to_vec();
    binary.extend_from_slice(&[0x05, 0x81, 0xa1, b'a', 0x01]);
    assert_eq!(
        parse_value(&binary),
        Some(Value::Here {
            expires_at: 1_800_000_000,
            record: vec![0x05, 0x81, 0xa1, b'a', 0x01]
        })
    );
    let mut marker = 1_800_000_000u32.to_be_bytes().to_vec();
    marker.push(OUT_OF_LINE);
    assert_eq!(
        parse_value(&marker),
        Some(Value::OutOfLine {
            expires_at: 1_800_000_000
        })
    );
    for garbage in [&b""[..], b"\x6b\x00", b"12x", b"99999999999999999999999"] {
        assert_eq!(parse_value(garbage), None, "{garbage:?}");
        assert_eq!(StoredRecord::of_value(garbage), None);
    }
    assert_eq!(
        StoredRecord::of_value(n.to_string().as_bytes()),
        Some(StoredRecord::Inline(record.len()))
    );
    assert_eq!(
        StoredRecord::of_value(&binary),
        Some(StoredRecord::Inline(5))
    );
    assert_eq!(
        StoredRecord::of_value(&marker),
        Some(StoredRecord::OutOfLine)
    );
}

#[test]
fn a_checked_pieced_value_parses_to_its_record_head_and_check() {
    let record: Vec<u8> = (0..200u8).collect();
    for (checked, short) in [(false, false), (true, false), (true, true)] {
        let form = Form::Pieced {
            size: 64,
            checked,
            short,
        };
        let payload = form.payload(&record);
        let value = form.value(&payload, 1_800_000_000);
        let pieces = form.pieces(&payload);
        // The expiry, marker and count, and the head: one full value.
        assert_eq!(value.len(), 64);
        let Some(Value::Pieced {
            expires_at,
            pieces: count,
            short: named_short,
            head,
            check,
        }) = parse_value(&value)
        else {
            panic!("not pieced: {value:?}");
        };
        assert_eq!(expires_at, 1_800_000_000);
        assert_eq!(count, pieces.len());
        assert_eq!(named_short, short);
        assert_eq!(check, checked.then(|| check_of(&record)));
        let joined = [head, pieces.concat()].concat();
        assert_eq!(joined, record);
    }
    // A checked count whose value is too short to hold its check is in
    // neither form.
    let mut short = 1_800_000_000u32.to_be_bytes().to_vec();
    short.extend_from_slice(&[PIECED, CHECKED | 1, 0xab, 0xcd]);
    assert_eq!(parse_value(&short), None);
}

#[test]
fn short_piece_names_are_four_bytes_from_random_parts_of_the_field() {
    // A stamped id's field: its last four bytes are the issue time.
    let field: Vec<u8> = (10..28u8).collect();
    assert_eq!(piece_field(&field, 3, true), [10, 22, 23, 3]);
    assert_eq!(
        piece_field(&field, 3, false),
        [field.clone(), vec![3]].concat()
    );
    // Fields of sessions with the same first byte and those two bytes
    // share names; any other byte apart, they do not.
    let mut other = field.clone();
    other[5] ^= 1;
    assert_eq!(piece_field(&other, 1, true), piece_field(&field, 1, true));
    other[12] ^= 1;
    assert_ne!(piece_field(&other, 1, true), piece_field(&field, 1, true));
}

#[test]
fn the_integer_form_never_overflows_a_signed_64_bit_integer() {
    let largest = (INTEGER_FORM.end - 1) * SCALE + u64::from(u32::MAX);
    assert!(largest <= i64::MAX as u64);
}

#[test]
fn groups_hold_128_buckets_under_one_tag() {
    let layout = GroupedBuckets::new(Buckets::new("sp", 20).unwrap());
    assert_eq!(layout.groups(), 1 << 13);
    assert_eq!(layout.bucket_key(0x3fa07), "sp:{07f4}:7");
    assert_eq!(layout.index_key(0x7f4), "sp:{07f4}:i");
    assert_eq!(layout.group_buckets(0x7f4), 0x3fa00..0x3fa80);
    let small = GroupedBuckets::new(Buckets::new("sp", 4).unwrap());
    assert_eq!(small.groups(), 1);
    assert_eq!(small.bucket_key(15), "sp:{0}:f");
    assert_eq!(
        layout.out_of_line_key(0x3fa07, &[0x00, 0xab, 0x0f]),
        "sp:{07f4}:7:o:00ab0f"
    );
    assert_eq!(Buckets::new("sp", 9).unwrap().tag(0x1f), "{01f}");
}

#[test]
fn pieces_are_cut_at_63_bytes_where_that_takes_no_more() {
    use super::value::{piece_size_for, pieces_of_len};
    // One value (58 bytes of payload at 64, 57 at 63) and a piece.
    assert_eq!(piece_size_for(64, 65), 63);
    assert_eq!(piece_size_for(64, 120), 63);
    // 121 and 122 fit a value and a piece of 64, not of 63.
    assert_eq!(piece_size_for(64, 121), 64);
    assert_eq!(piece_size_for(64, 122), 64);
    assert_eq!(piece_size_for(64, 123), 63);
    // A limit of 63 or less is the size; a larger one is kept where 63
    // would take more pieces.
    assert_eq!(piece_size_for(48, 200), 48);
    assert_eq!(piece_size_for(128, 100), 128);
    assert_eq!(piece_size_for(128, 130), 128);
    assert_eq!(piece_size_for(66, 120), 63);
    for largest in [7, 48, 63, 64, 65, 96, 128, 512] {
        for len in 1..=516 {
            let size = piece_size_for(largest, len);
            assert!(size <= largest);
            assert_eq!(pieces_of_len(len, size), pieces_of_len(len, largest));
        }
    }
}
