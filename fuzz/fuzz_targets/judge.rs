//! The judge over arbitrary records: headers split from the input at NUL bytes, the rest the
//! body. Every input must get exactly one verdict, never a panic.
#![no_main]

use hub_core::{IngestPolicy, judge};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte: how many header pairs; then `key\0value\0` pairs; the rest is the body.
    let Some((&count, mut rest)) = data.split_first() else { return };
    let mut headers: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for _ in 0..(count % 24) {
        let mut parts = rest.splitn(3, |b| *b == 0);
        let (Some(k), Some(v)) = (parts.next(), parts.next()) else { break };
        headers.push((k.to_vec(), v.to_vec()));
        rest = parts.next().unwrap_or_default();
    }
    let pairs: Vec<(String, Vec<u8>)> =
        headers.into_iter().map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v)).collect();
    let _ = judge(pairs.iter().map(|(k, v)| (k.as_str(), v.as_slice())), rest, None, &IngestPolicy::default());
    let _ = judge(
        pairs.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        rest,
        Some("lerian.streaming.lender"),
        &IngestPolicy::default(),
    );
});
