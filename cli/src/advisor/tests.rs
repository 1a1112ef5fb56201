use super::*;

#[test]
fn the_listpack_value_limit_is_raised_only_as_far_as_records_need() {
    // 99% at 44 B + 4: the default fits.
    assert_eq!(recommend_hash_value(&[44; 100], 64), 64);
    // 109 B + 4 needs 128; one outlier in a hundred does not count.
    let mut sizes = vec![109; 99];
    sizes.push(5000);
    assert_eq!(recommend_hash_value(&sizes, 64), 128);
    // Never lowered; huge records stop at the largest step.
    assert_eq!(recommend_hash_value(&[10; 5], 256), 256);
    assert_eq!(recommend_hash_value(&[4000; 5], 64), 512);
    assert_eq!(recommend_hash_value(&[], 64), 64);
}

#[test]
fn an_out_of_line_record_costs_a_key_of_its_own() {
    let mut w = Workload::new(1_000_000);
    w.id_bytes = 16;
    w.identity = 0;
    w.attrs_bytes = 599;
    let out = predict(LayoutKind::Compact, 13, &w).bytes_per_session;
    w.limits.hash_value = 1024;
    let inline = predict(LayoutKind::Compact, 13, &w).bytes_per_session;
    assert!(out > inline + 80.0, "{out} vs {inline}");
}

#[test]
fn a_record_in_pieces_costs_a_field_and_an_entry_per_piece() {
    let mut w = Workload::new(1_000_000);
    w.id_bytes = 16;
    w.identity = 0;
    // 109 bytes and the record's 4-byte check: one piece under a short
    // name (four bytes) either way, so cut at 63 (a one-byte header): 57
    // in the value, 56 in the piece.
    w.attrs_bytes = 108;
    let field = 16 - 1;
    let p = pieces(109, field, &w.limits).unwrap();
    assert_eq!(p.count, 1);
    assert_eq!(p.bytes, lp_string(63) + lp_string(4) + lp_string(56));
    // 118 and 4: 58 and 64 at the limit, where 63 would take a second piece.
    let p = pieces(118, field, &w.limits).unwrap();
    assert_eq!(p.count, 1);
    assert_eq!(p.bytes, lp_string(64) + lp_string(4) + lp_string(64));
    let pieced = predict(LayoutKind::Compact, 13, &w).bytes_per_session;
    w.limits.hash_value = 128;
    let inline = predict(LayoutKind::Compact, 13, &w).bytes_per_session;
    assert!(
        pieced > inline && pieced < inline + 30.0,
        "{pieced} vs {inline}"
    );
    assert!(inline < 150.0 && inline > 120.0, "{inline}");
    // Fits one value, or too long for pieces.
    assert_eq!(pieces(60, field, &w.limits), None);
    assert_eq!(pieces(513, field, &ListpackLimits::REDIS7_DEFAULTS), None);
    assert_eq!(
        pieces(512, field, &ListpackLimits::REDIS7_DEFAULTS).map(|p| p.count),
        Some(8)
    );
    assert_eq!(
        entries_per_session(512, field, &ListpackLimits::REDIS7_DEFAULTS),
        9
    );
}

#[test]
fn jemalloc_classes() {
    let classes: Vec<u64> = [1, 8, 9, 24, 25, 48, 128, 129, 160, 161, 257, 400, 1025]
        .into_iter()
        .map(size_class)
        .collect();
    assert_eq!(
        classes,
        [8, 8, 16, 32, 32, 48, 128, 160, 160, 192, 320, 448, 1280]
    );
}

#[test]
fn key_per_session_figures_match_the_design_measurements() {
    // DESIGN.md, Redis 7.0.15, 1M sessions: 224.8, 144.8, 160.8.
    let w = Workload::new(1_000_000);
    let json = predict(LayoutKind::JsonSetex, 0, &w).bytes_per_session;
    let packed = predict(LayoutKind::PackedSetex, 0, &w).bytes_per_session;
    let hash = predict(LayoutKind::HashPerSession, 0, &w).bytes_per_session;
    assert!((json - 224.8).abs() < 0.5, "{json}");
    assert!((packed - 144.8).abs() < 0.5, "{packed}");
    assert!((hash - 160.8).abs() < 0.5, "{hash}");
}

#[test]
fn other_identity_forms_cost_their_bytes() {
    let int = Workload::new(1_000_000);
    assert_eq!(int.identity_bytes(), 5);
    let uuid = Workload {
        identity_form: Form::Uuid,
        ..int
    };
    let name = Workload {
        identity_form: Form::Name(24),
        ..int
    };
    assert_eq!((uuid.identity_bytes(), name.identity_bytes()), (18, 25));
    for layout in LayoutKind::ALL {
        let at = |w: &Workload| predict(layout, 13, w).bytes_per_session;
        assert!(at(&uuid) > at(&int), "{layout}");
        assert!(at(&name) > at(&int), "{layout}");
    }
    // An identity-only integer session is one listpack integer in its
    // compact bucket; a UUID's is a 22-byte string.
    let compact = |w: &Workload| predict(LayoutKind::Compact, 13, w).bytes_per_session;
    assert!(compact(&uuid) - compact(&int) > 12.0);
}

#[test]
fn poisson_tail_is_sane() {
    assert!((poisson_tail(1.0, 0) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
    assert!(poisson_tail(10.0, 100) < 1e-40);
    assert!((poisson_tail(128.0, 128) - 0.476).abs() < 0.01);
    let pmf = poisson_pmf(2000.0);
    assert!((pmf.iter().sum::<f64>() - 1.0).abs() < 1e-9);
}

#[test]
fn recommendations_leave_headroom_in_the_tail() {
    let limits = ListpackLimits::REDIS7_DEFAULTS;
    // The write-up's N / 128 * 1.2 rule gives 2^14 for 1M... and 2^20
    // for 100M, where ~1 in 1000 buckets overflows.
    assert_eq!(
        recommend_bits(1_000_000, &limits, DEFAULT_MAX_CONVERTED),
        14
    );
    assert_eq!(
        recommend_bits(10_000_000, &limits, DEFAULT_MAX_CONVERTED),
        17
    );
    assert!(expected_converted(100_000_000, 20, &limits) > 100.0);
    assert_eq!(
        recommend_bits(100_000_000, &limits, DEFAULT_MAX_CONVERTED),
        21
    );
}

#[test]
fn too_many_buckets_cost_more_than_none() {
    // DESIGN.md: 16^5 buckets holding 1M sessions is worse than json-setex.
    let w = Workload::new(1_000_000);
    let sparse = predict(LayoutKind::Bucketed, 20, &w).bytes_per_session;
    let json = predict(LayoutKind::JsonSetex, 0, &w).bytes_per_session;
    assert!(sparse > 150.0, "{sparse}");
    assert!(predict(LayoutKind::Bucketed, 16, &w).bytes_per_session < 80.0);
    assert!(sparse < json * 1.2);
}
