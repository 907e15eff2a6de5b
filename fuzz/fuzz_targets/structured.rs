//! Structured mode over arbitrary documents: parts or a reason, never a panic, and the parts
//! judged to one verdict.
#![no_main]

use hub_core::structured::structured_to_binary;
use hub_core::{IngestPolicy, judge};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((headers, body)) = structured_to_binary(data) {
        let _ = judge(headers, &body, None, &IngestPolicy::default());
    }
});
