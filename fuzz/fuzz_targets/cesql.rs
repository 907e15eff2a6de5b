//! CESQL over arbitrary text: an expression parses or is refused with a position inside the
//! text, and a parsed expression evaluates to a value (and maybe an error) against an event with
//! typed and string attributes, without panicking and within bounded depth.
#![no_main]

use hub_core::routing::cesql::Expression;
use hub_core::routing::{Filters, JsonEvent};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let event = serde_json::json!({
        "specversion": "1.0", "id": "0192", "source": "lender", "type": "studio.lerian.lender.loan.approved",
        "subject": "loan-7", "amount": "1200", "flag": true, "count": 3, "datacontenttype": "application/json",
        "data": {"amount": 1200}
    });
    let object = event.as_object().expect("object");
    let view = JsonEvent::new(object);
    match Expression::parse(text) {
        Ok(expr) => {
            let _ = expr.evaluate(&view);
            let _ = expr.passes(&view);
        }
        Err(e) => assert!(e.position >= 1 && e.position <= text.chars().count() + 1, "{e}"),
    }
    // The same text as a subscription's `sql` filter: compiled or refused with its path.
    if let Ok(filters) = Filters::compile(&serde_json::json!([{ "sql": text }])) {
        let _ = filters.explain(&view);
    }
});
