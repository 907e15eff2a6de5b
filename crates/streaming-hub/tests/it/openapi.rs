//! `/openapi.json` describes every route the router serves.

use crate::support::{Backend, TestHub};
use reqwest::StatusCode;

/// The routes of SPEC §5 this build serves; each must be documented.
const SPEC_ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/subscriptions"),
    ("get", "/v1/subscriptions"),
    ("get", "/v1/subscriptions/{id}"),
    ("patch", "/v1/subscriptions/{id}"),
    ("delete", "/v1/subscriptions/{id}"),
    ("get", "/v1/subscriptions/{id}/events"),
    ("post", "/v1/subscriptions/{id}/verify"),
    ("post", "/v1/subscriptions/{id}/rotate-secret"),
    ("get", "/v1/subscriptions/{id}/deliveries"),
    ("post", "/v1/subscriptions/{id}/redrive"),
    ("post", "/v1/events"),
    ("get", "/admin/quarantine"),
    ("get", "/admin/dlq"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("post", "/admin/api-keys"),
    ("get", "/admin/api-keys"),
    ("delete", "/admin/api-keys/{id}"),
];

#[tokio::test]
async fn the_document_lists_every_route_and_every_listed_route_is_served() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let (status, doc) = hub.send(hub.client.get(hub.url("/openapi.json"))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().expect("version").starts_with("3."));
    let paths = doc["paths"].as_object().expect("paths");
    for (method, path) in SPEC_ROUTES {
        assert!(paths.get(*path).and_then(|p| p.get(*method)).is_some(), "{method} {path} is not documented");
    }
    let mut operations = 0;
    for (path, ops) in paths {
        for (method, op) in ops.as_object().expect("operations") {
            operations += 1;
            let responses = op["responses"].as_object().expect("responses");
            assert!(!responses.is_empty(), "{method} {path} documents no response");
            let is_public = ["/healthz", "/readyz", "/metrics", "/openapi.json"].contains(&path.as_str());
            if !is_public {
                assert!(responses.contains_key("401"), "{method} {path} does not document its auth error");
                assert!(op.get("security").is_some(), "{method} {path} does not document its security");
            }
            // The router serves it: no 404 "no route" and no 405.
            let url = hub.url(&path.replace("{id}", "01234567-89ab-7def-8123-456789abcdef"));
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let response = hub.client.request(method.clone(), url).send().await.expect("request");
            let status = response.status();
            let body = response.text().await.expect("body");
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert!(!body.contains("no route for"), "{method} {path} is documented but not served");
        }
    }
    assert!(operations >= SPEC_ROUTES.len());
    // Error bodies share one documented schema.
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
}
