//! The pull cursor rule (SPEC §4).
//!
//! Reading is the acknowledgement: a page moves the durable cursor to the highest seq returned.
//! `after` greater than the cursor moves it past everything up to `after` (skipped events are
//! never redelivered); `after` smaller reads an older page without rewinding; `after` beyond the
//! newest seq is refused. The cursor only ever moves forward.

/// The seq a read starts after: `after` when given, else the cursor.
pub fn read_after(cursor: i64, after: Option<i64>) -> i64 {
    after.unwrap_or(cursor)
}

/// Whether a read may start after `after`: only up to `newest`, the tenant's newest seq. An
/// `after` beyond it (a typo, a timestamp passed by mistake) would acknowledge every event to
/// come up to it, so it is refused and nothing moves; a cursor only ever skips events that exist.
pub fn after_is_known(after: i64, newest: i64) -> bool {
    (0..=newest.max(0)).contains(&after)
}

/// The cursor once a page whose highest seq is `highest` (none when empty) has been returned.
pub fn advance(cursor: i64, after: Option<i64>, highest: Option<i64>) -> i64 {
    cursor.max(read_after(cursor, after)).max(highest.unwrap_or(i64::MIN))
}

/// `next_cursor` of a page: its highest seq when the page is full, `None` on a short page.
pub fn next_cursor(returned: usize, limit: u32, highest: Option<i64>) -> Option<i64> {
    if returned > 0 && returned == limit as usize { highest } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_rule() {
        // (cursor, after, highest returned) -> (read after, new cursor)
        let cases = [
            ("first read", 0, None, Some(3), 0, 3),
            ("empty read", 5, None, None, 5, 5),
            ("normal paging", 5, Some(5), Some(9), 5, 9),
            ("forward jump skips", 5, Some(20), Some(25), 20, 25),
            ("forward jump past the end", 5, Some(20), None, 20, 20),
            ("backward read never rewinds", 10, Some(2), Some(6), 2, 10),
            ("backward read may still move forward", 10, Some(2), Some(12), 2, 12),
        ];
        for (case, cursor, after, highest, from, to) in cases {
            assert_eq!(read_after(cursor, after), from, "{case}");
            assert_eq!(advance(cursor, after, highest), to, "{case}");
        }
    }

    #[test]
    fn an_after_beyond_the_newest_seq_is_refused() {
        let cases = [
            ("below the newest", 3, 10, true),
            ("at the newest", 10, 10, true),
            ("zero", 0, 10, true),
            ("one beyond", 11, 10, false),
            ("far beyond", i64::MAX, 10, false),
            ("a millisecond timestamp", 1_764_700_000_000, 10, false),
            ("an empty inbox", 5, 0, false),
            ("negative", -1, 10, false),
        ];
        for (case, after, newest, known) in cases {
            assert_eq!(after_is_known(after, newest), known, "{case}");
        }
    }

    #[test]
    fn next_cursor_is_null_on_a_short_page() {
        assert_eq!(next_cursor(100, 100, Some(42)), Some(42));
        assert_eq!(next_cursor(99, 100, Some(42)), None);
        assert_eq!(next_cursor(0, 100, None), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        /// The cursor never moves back, and never past the newest seq through `after`.
        #[test]
        fn the_cursor_only_moves_forward_and_only_over_what_exists(
            cursor in 0i64..1_000_000,
            after in proptest::option::of(proptest::prelude::any::<i64>()),
            newest in 0i64..1_000_000,
            returned in 0usize..200,
        ) {
            let after = after.filter(|a| after_is_known(*a, newest));
            proptest::prop_assert!(after.is_none_or(|a| a <= newest));
            let from = read_after(cursor, after);
            // A page holds seqs above `from`, up to `newest`.
            let highest = (returned > 0 && from < newest).then(|| (from + returned as i64).min(newest));
            let moved = advance(cursor, after, highest);
            proptest::prop_assert!(moved >= cursor);
            proptest::prop_assert!(moved <= cursor.max(newest));
        }
    }
}
