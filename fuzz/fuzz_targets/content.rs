//! Filter lists and content patterns over arbitrary JSON: the first line is a `filters` value,
//! the rest an event's body. Compiling is total (a list or an error naming its path), and a
//! compiled list matches any body without panicking.
#![no_main]

use hub_core::routing::{Filters, JsonEvent};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (filters, body) = text.split_once('\n').unwrap_or((text, "{}"));
    let Ok(filters) = serde_json::from_str::<serde_json::Value>(filters) else { return };
    // A bare pattern is tried as a `data` filter too, so the fuzzer reaches patterns quickly.
    let lists = [filters.clone(), serde_json::json!([{ "data": filters }])];
    let body: serde_json::Value = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    let event = serde_json::json!({"specversion": "1.0", "id": "1", "subject": "s", "data": body});
    let object = event.as_object().expect("object");
    let view = JsonEvent::new(object);
    for list in lists {
        match Filters::compile(&list) {
            Ok(f) => {
                let all = f.matches(&view);
                let each = f.explain(&view);
                assert_eq!(all, each.iter().all(|r| r.matches), "matches is every filter matching");
            }
            Err(e) => assert!(e.path.starts_with("filters"), "{e}"),
        }
    }
});
