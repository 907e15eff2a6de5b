//! CloudEvents structured mode (`application/cloudevents+json`), turned into the binary form.
//!
//! The attributes become `ce-*` headers and `data` (or `data_base64`) becomes the body, so one
//! [`crate::judge`] decides both modes with the same rules. For a JSON `data` the body is the
//! exact bytes the producer sent inside the document, not a re-serialization.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::value::RawValue;

use crate::envelope::{QuarantineReason, ReasonCode, is_json_media_type};

/// Header list and body of the binary-mode equivalent of a structured event.
pub type BinaryParts = (Vec<(String, Vec<u8>)>, Vec<u8>);

/// Converts a structured-mode document. An error means the record is malformed and is
/// quarantined with the returned reason.
pub fn structured_to_binary(document: &[u8]) -> Result<BinaryParts, QuarantineReason> {
    let invalid = |message: &str| QuarantineReason {
        code: ReasonCode::InvalidBody,
        field: "body".to_owned(),
        message: message.to_owned(),
    };
    let fields: BTreeMap<String, &RawValue> =
        serde_json::from_slice(document).map_err(|_| invalid("a structured CloudEvent must be a JSON object"))?;

    let mut headers = Vec::with_capacity(fields.len());
    let mut content_type = None;
    for (name, raw) in &fields {
        if name == "data" || name == "data_base64" {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(raw.get()).map_err(|_| invalid("a structured CloudEvent must be a JSON object"))?;
        let text = match value {
            serde_json::Value::String(s) => s,
            serde_json::Value::Bool(b) => b.to_string(),
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Null => continue,
            _ => {
                return Err(QuarantineReason {
                    code: ReasonCode::InvalidHeader,
                    field: format!("ce-{name}"),
                    message: "a CloudEvents attribute must be a string, number or boolean".to_owned(),
                });
            }
        };
        if name == "datacontenttype" {
            content_type = Some(text.clone());
        }
        headers.push((format!("ce-{name}"), text.into_bytes()));
    }

    let body = match (fields.get("data"), fields.get("data_base64")) {
        (Some(_), Some(_)) => return Err(invalid("data and data_base64 are mutually exclusive")),
        (None, None) => Vec::new(),
        (None, Some(encoded)) => {
            let text: String =
                serde_json::from_str(encoded.get()).map_err(|_| invalid("data_base64 must be a base64 string"))?;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| invalid("data_base64 must be a base64 string"))?
        }
        (Some(data), None) => {
            let json = content_type.as_deref().is_none_or(is_json_media_type);
            match serde_json::from_str::<String>(data.get()) {
                // A string `data` for a non-JSON type carries the body as text.
                Ok(text) if !json => text.into_bytes(),
                _ => data.get().as_bytes().to_vec(),
            }
        }
    };
    Ok((headers, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IngestPolicy, Verdict, judge};

    const DOC: &str = r#"{"specversion":"1.0","id":"01890a5d-ac96-774b-bcce-b302099a8057",
        "source":"lender","type":"studio.lerian.lender.loan_application.approved",
        "time":"2026-11-30T10:00:00Z","schemaversion":"1.0.0","resourcetype":"loan_application",
        "eventtype":"approved","tenantid":"t1","data":{"amount": 10,"n":[1, 2]}}"#;

    #[test]
    fn attributes_become_headers_and_data_keeps_its_bytes() {
        let (headers, body) = structured_to_binary(DOC.as_bytes()).expect("valid document");
        assert_eq!(body, br#"{"amount": 10,"n":[1, 2]}"#);
        assert!(headers.iter().any(|(k, v)| k == "ce-tenantid" && v == b"t1"));
        let verdict = judge(headers, &body, None, &IngestPolicy::default());
        assert!(matches!(verdict, Verdict::Accept(_)), "{verdict:?}");
    }

    #[test]
    fn base64_and_text_data() {
        let doc = DOC.replace(r#""data":{"amount": 10,"n":[1, 2]}"#, r#""data_base64":"eyJhIjoxfQ==""#);
        assert_eq!(structured_to_binary(doc.as_bytes()).expect("valid").1, br#"{"a":1}"#);
        let doc =
            DOC.replace(r#""data":{"amount": 10,"n":[1, 2]}"#, r#""datacontenttype":"text/plain","data":"hello""#);
        assert_eq!(structured_to_binary(doc.as_bytes()).expect("valid").1, b"hello");
    }

    #[test]
    fn malformed_documents_are_rejected_with_a_reason() {
        for bad in [
            "[]",
            "{",
            "\"x\"",
            r#"{"id":{"nested":1}}"#,
            r#"{"data":1,"data_base64":"AA=="}"#,
            r#"{"data_base64":"@@"}"#,
        ] {
            assert!(structured_to_binary(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_boolean_systemevent_is_a_discard() {
        let (headers, body) = structured_to_binary(br#"{"systemevent":true}"#).expect("object");
        assert!(matches!(judge(headers, &body, None, &IngestPolicy::default()), Verdict::Discard(_)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        /// Any bytes posted as a structured-mode document get parts or a reason, never a panic,
        /// and parts the judge then takes to one verdict.
        #[test]
        fn any_document_gets_parts_or_a_reason(doc in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            if let Ok((headers, body)) = structured_to_binary(&doc) {
                let _ = judge(headers, &body, None, &IngestPolicy::default());
            }
        }

        /// Documents that are JSON objects with arbitrary attribute names and values.
        #[test]
        fn any_json_object_gets_parts_or_a_reason(
            fields in proptest::collection::btree_map("\\PC{0,12}", proptest::prelude::any::<String>(), 0..12),
            data in proptest::option::of(proptest::prelude::any::<String>()),
        ) {
            let mut doc = serde_json::Map::new();
            for (k, v) in fields {
                doc.insert(k, serde_json::Value::String(v));
            }
            if let Some(d) = data {
                doc.insert("data".into(), serde_json::Value::String(d));
            }
            let bytes = serde_json::to_vec(&doc).expect("json");
            if let Ok((headers, body)) = structured_to_binary(&bytes) {
                let _ = judge(headers, &body, None, &IngestPolicy::default());
            }
        }
    }
}
