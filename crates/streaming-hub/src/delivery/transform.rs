//! Transformations in delivery (SPEC §10): the event a subscription's handler is given, and what
//! its answer becomes (the body, the headers it added or changed, the path), or why it cannot be
//! sent. The handler runs on the transform pool (`hub_transform::Pool`), never here.

use std::borrow::Cow;

use hub_core::envelope::is_json_media_type;
use hub_store::StoredEvent;
use hub_transform::{Answer, Input};
use serde_json::Value as Json;
use serde_json::value::RawValue;

/// Headers a transform may never change: the hub signs and frames what it sends after the
/// transform, authenticates on its own, and names the tenant and the event (every `x-lerian-*`
/// header, see [`protected`]); hop-by-hop headers belong to the connection, not the delivery.
const PROTECTED: [&str; 19] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "host",
    "authorization",
    "ce-id",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-webhook-timestamp",
    "x-webhook-signature",
];

/// Whether a handler may not change header `name` (lower case).
fn protected(name: &str) -> bool {
    PROTECTED.contains(&name) || name.starts_with("x-lerian-")
}
/// Headers a transform may add or change, at most, and the longest value.
const MAX_HEADERS: usize = 64;
const MAX_HEADER_VALUE: usize = 4096;
/// The longest path a transform may append.
const MAX_PATH: usize = 1024;

/// What a delivery sends after its transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shaped {
    pub body: Vec<u8>,
    /// Headers added or changed (the content type apart), in the order the handler wrote them.
    pub headers: Vec<(String, String)>,
    /// Appended to a webhook's URL path (empty: nothing).
    pub path: String,
    pub content_type: String,
}

/// The event's media type (`application/json` unless it says otherwise).
fn content_type(event: &StoredEvent) -> &str {
    event.data_content_type.as_deref().unwrap_or("application/json")
}

/// Whether the handler sees the body as JSON: a JSON media type and a body that parses.
fn body_is_json(event: &StoredEvent) -> bool {
    is_json_media_type(content_type(event)) && serde_json::from_slice::<&RawValue>(&event.payload).is_ok()
}

/// `value` as a JSON string, appended to `out`.
fn push_str(out: &mut String, value: &str) {
    // Writing a string to a `String` cannot fail.
    out.push_str(&serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned()));
}

/// A JSON object of these string members, appended to `out`.
fn push_object<'a>(out: &mut String, members: impl Iterator<Item = (&'a str, &'a str)>) {
    out.push('{');
    for (n, (name, value)) in members.enumerate() {
        if n > 0 {
            out.push(',');
        }
        push_str(out, name);
        out.push(':');
        push_str(out, value);
    }
    out.push('}');
}

/// The event a handler is given: its attributes, its data (the body as it is when it is JSON,
/// else the body in base64), and `headers`, what the sink would send (names in lower case). Made
/// as JSON text at once: the body is spliced in, never parsed into values and written again.
pub fn input(event: &StoredEvent, headers: &[(String, String)]) -> Input {
    input_as(event, headers, body_is_json(event))
}

/// The same, for an event already judged ([`Given::stored`]: whether its body is JSON).
pub(super) fn input_given(event: &StoredEvent, given: &Given<'_>) -> Input {
    input_as(event, &given.headers, given.json)
}

fn input_as(event: &StoredEvent, headers: &[(String, String)], json: bool) -> Input {
    let mut out = String::with_capacity(event.payload.len() + 512);
    let id = event.ce_id.to_string();
    let attributes = [
        ("type", Some(event.ce_type.as_str())),
        ("source", Some(event.source.as_str())),
        ("subject", event.subject.as_deref()),
        ("id", Some(id.as_str())),
        ("time", Some(event.event_time.as_str())),
    ];
    for (n, (name, value)) in attributes.into_iter().enumerate() {
        out.push_str(if n == 0 { "{\"" } else { ",\"" });
        out.push_str(name);
        out.push_str("\":");
        match value {
            Some(v) => push_str(&mut out, v),
            None => out.push_str("null"),
        }
    }
    out.push_str(",\"extensions\":");
    push_object(&mut out, event.extensions.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    out.push_str(",\"data\":");
    match std::str::from_utf8(&event.payload) {
        Ok(text) if json => out.push_str(text),
        _ => push_str(&mut out, &hub_sinks::message::b64(&event.payload)),
    }
    out.push_str(",\"headers\":");
    let named: std::collections::BTreeMap<String, &str> =
        headers.iter().map(|(name, value)| (name.to_ascii_lowercase(), value.as_str())).collect();
    push_object(&mut out, named.iter().map(|(k, v)| (k.as_str(), *v)));
    out.push_str(",\"path\":\"\"}");
    Input::from_text(out)
}

/// What a handler was given, as far as judging its answer needs: the event's media type, whether
/// its `data` was the JSON body (else base64), and the headers the sink would send. Borrowed at
/// delivery; owned by a try, which judges after the event is gone.
#[derive(Debug, Clone)]
pub struct Given<'a> {
    pub content_type: Cow<'a, str>,
    pub json: bool,
    pub headers: Cow<'a, [(String, String)]>,
}

impl<'a> Given<'a> {
    /// A stored event, whose sink would send `shown`.
    pub fn stored(event: &'a StoredEvent, shown: &'a [(String, String)]) -> Self {
        Self {
            content_type: Cow::Borrowed(content_type(event)),
            json: body_is_json(event),
            headers: Cow::Borrowed(shown),
        }
    }

    /// An event a try gives whole: its `datacontenttype` (JSON unless it says otherwise) and
    /// `headers`.
    pub fn object(event: &Json) -> Given<'static> {
        let content_type = event["datacontenttype"].as_str().unwrap_or("application/json").to_owned();
        let headers: Vec<(String, String)> = event["headers"]
            .as_object()
            .map(|h| h.iter().filter_map(|(k, v)| Some((k.to_ascii_lowercase(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        Given {
            json: is_json_media_type(&content_type),
            content_type: Cow::Owned(content_type),
            headers: Cow::Owned(headers),
        }
    }

    /// The same, owning what it borrowed.
    pub fn into_owned(self) -> Given<'static> {
        Given {
            content_type: Cow::Owned(self.content_type.into_owned()),
            json: self.json,
            headers: Cow::Owned(self.headers.into_owned()),
        }
    }
}

/// The members of an answer the hub reads (the others are the handler's own business), borrowed
/// from its text.
#[derive(serde::Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    data: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    headers: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    path: Option<&'a RawValue>,
}

/// A member that is there, `null` included (`data: null` is an empty body, not a missing one).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue as serde::Deserialize>::deserialize(d).map(Some)
}

/// What the handler's `answer` makes of the event it was `given`; the reason when it cannot be
/// sent (the attempt fails as `transform_failed`, a try answers it as the error). `data` goes out
/// as the handler wrote it, its keys in its order.
pub fn shape(answer: &Answer, given: &Given<'_>) -> Result<Shaped, String> {
    if hub_core::envelope::nests_deeper_than(answer.text().as_bytes(), hub_core::envelope::MAX_JSON_DEPTH) {
        return Err(format!(
            "the answer nests arrays and objects more than {} levels deep",
            hub_core::envelope::MAX_JSON_DEPTH
        ));
    }
    let fields: Fields<'_> =
        serde_json::from_str(answer.text()).map_err(|_| "the handler must return the event or null".to_owned())?;
    let parsed = |raw: Option<&RawValue>| -> Result<Json, String> {
        raw.map_or(Ok(Json::Null), |raw| serde_json::from_str(raw.get()).map_err(|e| e.to_string()))
    };
    let was = |name: &str| given.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
    let mut headers = Vec::new();
    let mut media_type = given.content_type.clone().into_owned();
    match parsed(fields.headers)? {
        Json::Null => {}
        Json::Object(map) => {
            for (name, value) in map {
                let Json::String(value) = value else {
                    return Err(format!("headers[\"{name}\"] must be a string"));
                };
                let name = name.to_ascii_lowercase();
                if was(&name) == Some(value.as_str()) {
                    continue;
                }
                if protected(&name) {
                    return Err(format!("the handler may not change the {name} header: the hub sets it"));
                }
                if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(format!("\"{name}\" is not a valid header name"));
                }
                if value.len() > MAX_HEADER_VALUE || reqwest::header::HeaderValue::from_str(&value).is_err() {
                    return Err(format!(
                        "headers[\"{name}\"] must be a valid header value of at most {MAX_HEADER_VALUE} bytes"
                    ));
                }
                if name == "content-type" || name == "ce-datacontenttype" {
                    media_type = value;
                    continue;
                }
                headers.push((name, value));
                if headers.len() > MAX_HEADERS {
                    return Err(format!("the handler may add or change at most {MAX_HEADERS} headers"));
                }
            }
        }
        _ => return Err("headers must be an object of strings".into()),
    }
    let path = match parsed(fields.path)? {
        Json::Null => String::new(),
        Json::String(p) => checked_path(&p)?,
        _ => return Err("path must be a string".into()),
    };
    let Some(data) = fields.data else {
        return Err("the answer has no data: set data (null for an empty JSON body)".into());
    };
    let was_json = given.json;
    let text = data.get();
    let body = if text.starts_with('"') && !is_json_media_type(&media_type) {
        let text: String = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if was_json {
            text.into_bytes()
        } else {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| "data must stay base64 for an event whose body is not JSON".to_owned())?
        }
    } else {
        text.as_bytes().to_vec()
    };
    Ok(Shaped { body, headers, path, content_type: media_type })
}

/// A path a handler appends to a webhook's URL: path characters only (no query, no fragment, no
/// `..`), at most [`MAX_PATH`] bytes.
fn checked_path(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Ok(String::new());
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@/%".contains(c);
    if path.len() > MAX_PATH || !path.chars().all(allowed) {
        return Err(format!(
            "path must be at most {MAX_PATH} bytes of URL path characters (no query or fragment): {}",
            path.chars().take(64).collect::<String>()
        ));
    }
    // A receiver may decode `%2e` (and `%2f`, `%5c`) before it resolves dot segments: a dot
    // segment is refused however it is written, and so are encoded separators.
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") {
        return Err("path must not hold encoded slashes or backslashes (%2F, %5C)".into());
    }
    if lower.split('/').map(|segment| segment.replace("%2e", ".")).any(|segment| segment == ".." || segment == ".") {
        return Err("path must not hold . or .. segments, written plainly or percent-encoded".into());
    }
    Ok(path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(content_type: Option<&str>, payload: &[u8]) -> StoredEvent {
        StoredEvent {
            tenant_id: "t1".into(),
            seq: 1,
            ce_id: uuid::Uuid::now_v7(),
            source: "lender".into(),
            ce_type: "studio.lerian.lender.loan_application.approved".into(),
            resource_type: "loan_application".into(),
            event_type: "approved".into(),
            event_time: "2026-12-05T10:00:00Z".into(),
            schema_version: "1.0.0".into(),
            subject: Some("loan-42".into()),
            data_content_type: content_type.map(str::to_owned),
            data_schema: None,
            traceparent: None,
            tracestate: None,
            extensions: Default::default(),
            payload: payload.to_vec(),
            origin: hub_store::Origin::Http,
            received_at: chrono::Utc::now(),
            trace: None,
            erasure_id: None,
        }
    }

    /// The input as the handler parses it.
    fn given(e: &StoredEvent, shown: &[(String, String)]) -> Json {
        serde_json::from_str(input(e, shown).text()).expect("the input is JSON")
    }

    fn reply(answer: &Json) -> Answer {
        Answer::from_text(answer.to_string())
    }

    fn shown() -> Vec<(String, String)> {
        vec![
            ("x-lerian-event-id".into(), "e1".into()),
            ("content-type".into(), "application/json".into()),
            ("ce-id".into(), "e1".into()),
        ]
    }

    #[test]
    fn the_input_holds_the_attributes_the_data_and_the_headers() {
        let e = event(None, br#"{"amount": 100}"#);
        let i: Json = serde_json::from_str(input(&e, &shown()).text()).expect("the input is JSON");
        assert_eq!(i["data"], json!({"amount": 100}));
        assert_eq!(i["headers"]["x-lerian-event-id"], "e1");
        assert_eq!(i["type"], e.ce_type);
        assert_eq!(i["id"], e.ce_id.to_string());
        assert_eq!(i["path"], "");
        let binary = event(Some("application/octet-stream"), &[0, 159, 146, 150]);
        let i: Json = serde_json::from_str(input(&binary, &[]).text()).expect("json");
        assert_eq!(i["data"], "AJ+Slg==");
        let mut odd = event(None, "{\"ünï\": \"\\u0000\\\"\"}".as_bytes());
        odd.subject = Some("quote \" and \\ and \n".into());
        odd.extensions.insert("partitionkey".into(), "k\"1".into());
        let i: Json = serde_json::from_str(input(&odd, &[("X-A".into(), "\"".into())]).text()).expect("escaped");
        assert_eq!(
            (i["subject"].as_str(), i["extensions"]["partitionkey"].as_str()),
            (odd.subject.as_deref(), Some("k\"1"))
        );
        assert_eq!((i["data"]["ünï"].as_str(), i["headers"]["x-a"].as_str()), (Some("\u{0}\""), Some("\"")));
    }

    #[test]
    fn an_answer_becomes_a_body_headers_and_a_path() {
        let e = event(None, br#"{"amount": 100}"#);
        let mut answer = given(&e, &shown());
        answer["data"] = json!({"value": 100});
        answer["headers"]["x-team"] = json!("risk");
        answer["path"] = json!("/loans/42");
        let s = shape(&reply(&answer), &Given::stored(&e, &shown())).expect("shaped");
        assert_eq!(s.body, br#"{"value":100}"#);
        assert_eq!(s.headers, vec![("x-team".to_owned(), "risk".to_owned())], "only what changed is added");
        assert_eq!((s.path.as_str(), s.content_type.as_str()), ("/loans/42", "application/json"));
        // `data: null` is a body of `null`, not a missing one; members the hub does not read are
        // the handler's own.
        let mut empty = answer.clone();
        empty["data"] = Json::Null;
        empty["note"] = json!({"kept": "aside"});
        assert_eq!(shape(&reply(&empty), &Given::stored(&e, &shown())).expect("shaped").body, b"null");

        // Text for a chat tool.
        answer["headers"]["content-type"] = json!("text/plain");
        answer["data"] = json!("loan 42 approved");
        let s = shape(&reply(&answer), &Given::stored(&e, &shown())).expect("shaped");
        assert_eq!((s.body.as_slice(), s.content_type.as_str()), (&b"loan 42 approved"[..], "text/plain"));
        // A binary event left as it was goes as it came.
        let binary = event(Some("application/octet-stream"), &[0, 159, 146, 150]);
        let s = shape(&reply(&given(&binary, &[])), &Given::stored(&binary, &[])).expect("shaped");
        assert_eq!(s.body, vec![0, 159, 146, 150]);
    }

    #[test]
    fn what_the_hub_sets_cannot_be_changed_and_bad_answers_are_named() {
        let e = event(None, b"{}");
        let refused = |change: Json| {
            let mut answer = given(&e, &shown());
            for (k, v) in change.as_object().expect("object") {
                answer[k] = v.clone();
            }
            shape(&reply(&answer), &Given::stored(&e, &shown())).expect_err("refused")
        };
        assert!(refused(json!({"headers": {"ce-id": "forged"}})).contains("ce-id"));
        assert!(refused(json!({"headers": {"webhook-signature": "v1,x"}})).contains("webhook-signature"));
        assert!(refused(json!({"headers": {"Content-Length": "1"}})).contains("content-length"));
        assert!(refused(json!({"headers": {"x-n": 7}})).contains("must be a string"));
        assert!(refused(json!({"headers": {"bad name": "v"}})).contains("not a valid header name"));
        assert!(refused(json!({"headers": {"x-v": "a\nb"}})).contains("valid header value"));
        assert!(refused(json!({"path": "/../admin"})).contains(".."));
        // The hub's identity headers and hop-by-hop ones, CRLF, encoded dot segments, depth.
        for name in [
            "x-lerian-tenant-id",
            "x-lerian-event-id",
            "X-Lerian-Signature",
            "x-lerian-anything",
            "upgrade",
            "te",
            "keep-alive",
            "proxy-authorization",
            "expect",
        ] {
            assert!(refused(json!({"headers": {name: "forged"}})).contains(&name.to_ascii_lowercase()), "{name}");
        }
        assert!(refused(json!({"headers": {"x-v": "a\r\nx-lerian-tenant-id: other"}})).contains("valid header value"));
        for path in ["/.%2e/.%2e/admin", "/%2e%2e/admin", "/%2E./x", "/a/%2e", "/..%2fadmin", "/a%5c..%5cadmin"] {
            assert!(refused(json!({"path": path})).contains("path must not"), "{path}");
        }
        let mut deep = json!(1);
        for _ in 0..64 {
            deep = json!([deep]);
        }
        assert!(refused(json!({"data": deep})).contains("levels deep"));
        assert!(refused(json!({"path": "/a?token=1"})).contains("no query"));
        assert!(refused(json!({"path": 7})).contains("string"));
        let mut answer = given(&e, &shown());
        answer.as_object_mut().expect("object").remove("data");
        assert!(shape(&reply(&answer), &Given::stored(&e, &shown())).expect_err("no data").contains("no data"));
        // The same value is no change.
        let mut same = given(&e, &shown());
        same["headers"]["ce-id"] = json!("e1");
        assert!(shape(&reply(&same), &Given::stored(&e, &shown())).expect("same").headers.is_empty());
        let binary = event(Some("application/octet-stream"), &[1, 2]);
        let mut answer = given(&binary, &[]);
        answer["data"] = json!("not base64!");
        assert!(shape(&reply(&answer), &Given::stored(&binary, &[])).expect_err("base64").contains("base64"));
    }

    fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = Json> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,12}".prop_map(Json::String),
            "(/[a-z.%]{0,4}){0,3}".prop_map(Json::String),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
                prop::collection::btree_map(
                    "(data|headers|path|content-type|ce-id|webhook-signature|x-[a-z]{1,6}|.{0,6})",
                    inner,
                    0..6
                )
                .prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Whatever the event holds (any text in its attributes, extensions and headers, any
        /// bytes as its body), the handler's input is JSON holding exactly those values.
        #[test]
        fn the_input_is_json_whatever_the_event_holds(
            subject in proptest::option::of(".{0,16}"),
            ext in ".{0,12}",
            header in ".{0,12}",
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            json_body in proptest::prelude::any::<bool>(),
        ) {
            let payload = if json_body { serde_json::to_vec(&json!({"t": String::from_utf8_lossy(&body)})).expect("json") } else { body };
            let mut e = event(None, &payload);
            e.subject = subject.clone();
            e.extensions.insert("x".into(), ext.clone());
            let i: Json = serde_json::from_str(input(&e, &[("X-H".into(), header.clone())]).text()).expect("the input is JSON");
            proptest::prop_assert_eq!(i["subject"].as_str(), subject.as_deref());
            proptest::prop_assert_eq!(i["extensions"]["x"].as_str(), Some(ext.as_str()));
            proptest::prop_assert_eq!(i["headers"]["x-h"].as_str(), Some(header.as_str()));
            if json_body {
                proptest::prop_assert_eq!(i["data"].clone(), serde_json::from_slice::<Json>(&payload).expect("json"));
            } else if serde_json::from_slice::<&RawValue>(&payload).is_err() {
                let encoded = hub_sinks::message::b64(&payload);
                proptest::prop_assert_eq!(i["data"].as_str(), Some(encoded.as_str()));
            }
        }

        /// Whatever a handler answers (any JSON, or any text), shaping never panics, and what it
        /// lets through never changes what the hub sets nor climbs out of the destination's path.
        #[test]
        fn any_answer_is_shaped_or_refused_never_a_panic(answer in arbitrary_json(), text in ".{0,40}", binary in proptest::prelude::any::<bool>()) {
            let e = if binary { event(Some("application/octet-stream"), &[1, 2, 3]) } else { event(None, br#"{"a":1}"#) };
            let _ = shape(&Answer::from_text(text), &Given::stored(&e, &shown()));
            if let Ok(s) = shape(&Answer::from_text(answer.to_string()), &Given::stored(&e, &shown())) {
                proptest::prop_assert!(s.headers.iter().all(|(k, _)| !PROTECTED.contains(&k.as_str())));
                proptest::prop_assert!(s.path.split('/').all(|seg| seg != ".." && seg != "."));
                proptest::prop_assert!(!s.path.contains('?') && !s.path.contains('#'));
            }
        }
    }
}
