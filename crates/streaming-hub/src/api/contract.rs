//! What every operation of the OpenAPI document says beyond its own annotation: the refusals the
//! server makes before a handler runs. An operation with a JSON body may answer `400` (the body is
//! not JSON, or not the shape asked), `413` (over the request size limit) and `415` (not
//! `application/json`); one with query parameters `400` (a parameter is invalid). Each in the
//! error shape. Applied once to the whole document, so no operation can forget one.
//!
//! The filter dialects' schemas are written here by hand, in JSON Schema (OpenAPI 3.1): what
//! a derive cannot say — attribute names as map keys, non-empty maps, the recursive content
//! pattern and its matchers — so a client or a tester generating from the document sends
//! filters the hub takes. What JSON Schema cannot say (CESQL's grammar, a content pattern's size
//! budget) is refused with a `422` naming the filter.

use utoipa::openapi::path::Operation;
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, ResponseBuilder};

fn error(description: &str) -> RefOr<utoipa::openapi::Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
            .build(),
    )
}

fn document(op: &mut Operation) {
    let responses = &mut op.responses.responses;
    let mut add = |status: &str, description: &str| {
        responses.entry(status.to_owned()).or_insert_with(|| error(description));
    };
    if op.request_body.is_some() {
        add("400", "Malformed JSON, or a body of the wrong shape");
        add("413", "The request body is over the size limit");
        add("415", "The request body is not application/json");
    }
    let has_query = op.parameters.as_ref().is_some_and(|ps| {
        ps.iter().any(|p| matches!(p, RefOr::T(p) if p.parameter_in == utoipa::openapi::path::ParameterIn::Query))
    });
    if has_query {
        add("400", "A query parameter is invalid; the message names it");
    }
}

/// Documents the server's own refusals on every operation.
pub fn complete(doc: &mut OpenApi) {
    for item in doc.paths.paths.values_mut() {
        for op in
            [&mut item.get, &mut item.post, &mut item.put, &mut item.patch, &mut item.delete].into_iter().flatten()
        {
            document(op);
        }
    }
}

/// A CloudEvents attribute name as the attribute dialects take it.
const ATTRIBUTE_NAME: &str = "^[a-z0-9]{1,64}$";

fn attribute_map(dialect: &str, description: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "description": description,
        "required": [dialect],
        "additionalProperties": false,
        "properties": {
            dialect: {
                "type": "object",
                "minProperties": 1,
                "maxProperties": 32,
                "propertyNames": {"pattern": ATTRIBUTE_NAME},
                "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 1024}
            }
        }
    })
}

fn string_matcher(name: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "object", "required": [name], "additionalProperties": false,
        "properties": {name: {"type": "string", "maxLength": 1024}}
    })
}

/// The filter schemas, by component name.
fn filter_schemas() -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    let scalar = json!({"oneOf": [
        {"type": "string", "maxLength": 1024}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}
    ]});
    let op = json!({"type": "string", "enum": ["=", "<", "<=", ">", ">="]});
    let num = json!({"type": "number"});
    vec![
        (
            "ExactFilter",
            attribute_map("exact", "Every named attribute (lower-case CloudEvents name) equals its value."),
        ),
        ("PrefixFilter", attribute_map("prefix", "Every named attribute starts with its value.")),
        ("SuffixFilter", attribute_map("suffix", "Every named attribute ends with its value.")),
        (
            "DataFilter",
            json!({
                "type": "object", "required": ["data"], "additionalProperties": false,
                "description": "A content pattern over the JSON body.",
                "properties": {"data": {"$ref": "#/components/schemas/ContentPattern"}}
            }),
        ),
        (
            "ContentPattern",
            json!({
                "type": "object",
                "description": "Fields of the body: an object looks inside the field, an array lists what it may be; `$or` matches when one of its patterns does.",
                "minProperties": 1,
                "maxProperties": 64,
                "propertyNames": {"minLength": 1, "maxLength": 1024},
                "properties": {
                    "$or": {"type": "array", "minItems": 1, "maxItems": 16,
                            "items": {"$ref": "#/components/schemas/ContentPattern"}}
                },
                "additionalProperties": {"oneOf": [
                    {"$ref": "#/components/schemas/ContentPattern"},
                    {"type": "array", "minItems": 1, "maxItems": 64,
                     "items": {"$ref": "#/components/schemas/ContentMatcher"}}
                ]}
            }),
        ),
        (
            "ContentMatcher",
            json!({"oneOf": [
                scalar,
                string_matcher("prefix"),
                string_matcher("suffix"),
                string_matcher("equals-ignore-case"),
                string_matcher("wildcard"),
                {"type": "object", "required": ["exists"], "additionalProperties": false,
                 "properties": {"exists": {"type": "boolean"}}},
                {"type": "object", "required": ["numeric"], "additionalProperties": false,
                 "properties": {"numeric": {"oneOf": [
                     {"type": "array", "prefixItems": [op, num], "minItems": 2, "maxItems": 2},
                     {"type": "array", "prefixItems": [op, num, op, num], "minItems": 4, "maxItems": 4}
                 ]}}},
                {"type": "object", "required": ["anything-but"], "additionalProperties": false,
                 "properties": {"anything-but": {"oneOf": [
                     scalar,
                     {"type": "array", "minItems": 1, "maxItems": 64, "items": scalar},
                     string_matcher("prefix"),
                     string_matcher("suffix"),
                     string_matcher("wildcard"),
                     string_matcher("equals-ignore-case")
                 ]}}}
            ]}),
        ),
    ]
}

/// OpenAPI links from the operations that create or list things to those that take their ids, so
/// a client (or a stateful tester) can follow a subscription, a replay, a key or an event from
/// where it appears: `(path, method, status, link name, target operationId, parameters)`.
fn links() -> Vec<(&'static str, &'static str, &'static str, String, &'static str, serde_json::Value)> {
    use serde_json::json;
    let by_id = json!({"id": "$response.body#/id"});
    let mut out: Vec<_> = [
        "getSubscription",
        "updateSubscription",
        "deleteSubscription",
        "listDeliveries",
        "getOrdering",
        "pullEvents",
        "redriveDeliveries",
        "replaySubscription",
        "rotateSigningSecret",
        "listPublicKeys",
        "listUndelivered",
        "simulateSelection",
        "verifySubscription",
    ]
    .into_iter()
    .map(|op| ("/v1/subscriptions", "post", "201", op.to_owned(), op, by_id.clone()))
    .collect();
    out.push((
        "/v1/subscriptions/{id}/replay",
        "post",
        "202",
        "getReplay".to_owned(),
        "getReplay",
        json!({"id": "$request.path.id", "replay_id": "$response.body#/replay_id"}),
    ));
    out.push(("/admin/erasures", "post", "202", "getErasure".to_owned(), "getErasure", by_id.clone()));
    out.push(("/admin/api-keys", "post", "201", "revokeApiKey".to_owned(), "revokeApiKey", by_id));
    out.push((
        "/v1/events",
        "get",
        "200",
        "getEvent".to_owned(),
        "getEvent",
        json!({"ce_id": "$response.body#/items/0/ce_id"}),
    ));
    out
}

/// The document as served: `complete`'s, with the filter schemas written by hand and the links.
pub fn served(doc: &OpenApi) -> serde_json::Value {
    let mut json = serde_json::to_value(doc).unwrap_or_default();
    // Bodies the handler reads as optional (an empty body takes the defaults).
    for pointer in [
        "/paths/~1v1~1subscriptions~1{id}~1redrive/post/requestBody",
        "/paths/~1v1~1subscriptions~1{id}~1verify/post/requestBody",
        "/paths/~1v1~1subscriptions~1{id}~1replay/post/requestBody",
    ] {
        if let Some(body) = json.pointer_mut(pointer).and_then(serde_json::Value::as_object_mut) {
            body.insert("required".to_owned(), serde_json::Value::Bool(false));
        }
    }
    for (path, method, status, name, operation, parameters) in links() {
        let pointer = format!("/paths/{}/{method}/responses/{status}", path.replace('~', "~0").replace('/', "~1"));
        if let Some(response) = json.pointer_mut(&pointer).and_then(serde_json::Value::as_object_mut) {
            let links = response.entry("links").or_insert_with(|| serde_json::json!({}));
            links[name.as_str()] = serde_json::json!({"operationId": operation, "parameters": parameters});
        }
    }
    state_roles(&mut json);
    if let Some(schemas) = json.pointer_mut("/components/schemas").and_then(serde_json::Value::as_object_mut) {
        for (name, schema) in filter_schemas() {
            schemas.insert(name.to_owned(), schema);
        }
    }
    json
}

/// Each authenticated operation states the role it needs (`x-streaming-hub-role`, the rule of
/// `sso::roles`): `viewer`, `operator` or `admin` in a tenant for `/v1`, `platform-viewer` or
/// `platform-admin` for `/admin`. A tenant's API key, a managing portal session and the admin
/// token hold every role; a person holds what their token grants.
fn state_roles(json: &mut serde_json::Value) {
    use crate::sso::roles;
    let Some(paths) = json.pointer_mut("/paths").and_then(serde_json::Value::as_object_mut) else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, op) in item.iter_mut() {
            let method = match method.as_str() {
                "get" => axum::http::Method::GET,
                "post" => axum::http::Method::POST,
                "put" => axum::http::Method::PUT,
                "patch" => axum::http::Method::PATCH,
                "delete" => axum::http::Method::DELETE,
                _ => continue,
            };
            let Some(op) = op.as_object_mut() else { continue };
            if op.get("security").and_then(serde_json::Value::as_array).is_none_or(Vec::is_empty) {
                continue;
            }
            let role = if path.starts_with("/admin") {
                roles::platform_route_needs(&method).as_str()
            } else if path.starts_with("/v1/") {
                roles::tenant_route_needs(&method, path).as_str()
            } else {
                continue;
            };
            op.insert("x-streaming-hub-role".to_owned(), role.into());
        }
    }
}
