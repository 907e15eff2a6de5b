//! Portal sessions: granted by the operator, exchanged once, limited to a tenant and a scope,
//! never an admin route, ended by revocation or expiry.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Backend, Event, TestHub, until};

crate::on_both_backends!(a_portal_session_sees_its_tenant_in_its_scope_until_it_ends);

/// Creates a session and exchanges its grant: the session's id and token.
async fn open(hub: &TestHub, tenant: &str, scope: &str, ttl: u32) -> (String, String, Value) {
    let (status, created) = hub
        .send(hub.client.post(hub.url("/admin/portal-sessions")).bearer_auth(&hub.admin).json(&json!({
            "tenant_id": tenant, "scope": scope, "ttl_seconds": ttl})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let url = created["url"].as_str().expect("url");
    let grant = url.split_once("#/portal/").expect("the grant is in the fragment").1;
    assert!(url.starts_with(&hub.url("/console/")), "{url}");
    let (status, session) =
        hub.send(hub.client.post(hub.url("/v1/portal-sessions/exchange")).json(&json!({"grant": grant}))).await;
    assert_eq!(status, StatusCode::OK, "{session}");
    assert_eq!((session["tenant_id"].as_str(), session["scope"].as_str()), (Some(tenant), Some(scope)));
    // Once only.
    let (status, again) =
        hub.send(hub.client.post(hub.url("/v1/portal-sessions/exchange")).json(&json!({"grant": grant}))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{again}");
    (created["id"].as_str().expect("id").to_owned(), session["token"].as_str().expect("token").to_owned(), created)
}

async fn a_portal_session_sees_its_tenant_in_its_scope_until_it_ends(backend: Backend) {
    let hub = TestHub::start(backend).await;
    let (k1, k2) = (hub.tenant_key("t1").await, hub.tenant_key("t2").await);
    let mine = hub.subscribe(&k1, json!({"name": "t1-pull", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    hub.subscribe(&k2, json!({"name": "t2-private", "event_types": ["*.*"], "sink": {"type": "pull"}})).await;
    assert_eq!(hub.post_event(&k1, &Event::new("t1")).await.0, StatusCode::ACCEPTED);
    let mine = mine["id"].as_str().expect("id");

    // Read scope: its tenant's views, nothing of another tenant's, nothing changed.
    let (read_id, read, _) = open(&hub, "t1", "read", 600).await;
    let (status, subs) = hub.get(&read, "/v1/subscriptions").await;
    assert_eq!(status, StatusCode::OK, "{subs}");
    assert_eq!(subs["items"].as_array().map(Vec::len), Some(1));
    assert!(!subs.to_string().contains("t2-private"));
    assert_eq!(hub.get(&read, "/v1/events").await.0, StatusCode::OK);
    assert_eq!(hub.get(&read, "/v1/event-types").await.0, StatusCode::OK);
    let (status, _) = hub
        .post_json(
            &read,
            "/v1/filters/test",
            &json!({"filters": [], "event": {"specversion": "1.0", "id": "1", "source": "s", "type": "t"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "testing a filter changes nothing");
    for (status, body) in [
        hub.patch_json(&read, &format!("/v1/subscriptions/{mine}"), &json!({"enabled": false})).await,
        hub.post_json(
            &read,
            "/v1/subscriptions",
            &json!({"name": "x", "event_types": ["*.*"], "sink": {"type": "pull"}}),
        )
        .await,
        hub.delete(&read, &format!("/v1/subscriptions/{mine}")).await,
        hub.post_json(&read, &format!("/v1/subscriptions/{mine}/replay"), &json!({"from_seq": 1})).await,
    ] {
        assert_eq!((status, body["title"].as_str()), (StatusCode::FORBIDDEN, Some("portal_session_refused")), "{body}");
    }
    let (_, still) = hub.get(&k1, &format!("/v1/subscriptions/{mine}")).await;
    assert_eq!(still["enabled"], true, "nothing changed");
    // Never an admin route, never another tenant by header.
    assert_eq!(hub.get(&read, "/admin/tenants").await.0, StatusCode::FORBIDDEN);
    let (status, _) = hub
        .send(hub.client.get(hub.url("/v1/subscriptions")).bearer_auth(&read).header("x-streaming-hub-tenant", "t2"))
        .await;
    assert_eq!(status, StatusCode::OK, "the header means nothing to a session");
    let (_, only_mine) = hub
        .send(hub.client.get(hub.url("/v1/subscriptions")).bearer_auth(&read).header("x-streaming-hub-tenant", "t2"))
        .await;
    assert!(!only_mine.to_string().contains("t2-private"));

    // Manage scope changes things, but neither publishes nor reads a pull stream.
    let (_, manage, _) = open(&hub, "t1", "manage", 600).await;
    let (status, _) = hub.patch_json(&manage, &format!("/v1/subscriptions/{mine}"), &json!({"name": "renamed"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = hub.post_event(&manage, &Event::new("t1")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "publishing needs an API key");
    assert_eq!(hub.get(&manage, &format!("/v1/subscriptions/{mine}/events")).await.0, StatusCode::FORBIDDEN);

    // Revoked: refused at once.
    let (status, _) = hub
        .send(hub.client.delete(hub.url(&format!("/admin/portal-sessions/{read_id}"))).bearer_auth(&hub.admin))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(hub.get(&read, "/v1/subscriptions").await.0, StatusCode::UNAUTHORIZED);
    let (status, _) = hub
        .send(hub.client.delete(hub.url(&format!("/admin/portal-sessions/{read_id}"))).bearer_auth(&hub.admin))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "revoked already");

    // A short session expires; revoking it then finds no live session (SPEC §9).
    let (short_id, short, _) = open(&hub, "t1", "read", 5).await;
    assert_eq!(hub.get(&short, "/v1/subscriptions").await.0, StatusCode::OK);
    until("the short session expired", Duration::from_secs(15), async || {
        (hub.get(&short, "/v1/subscriptions").await.0 == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    let (status, body) = hub
        .send(hub.client.delete(hub.url(&format!("/admin/portal-sessions/{short_id}"))).bearer_auth(&hub.admin))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "an expired session is no live session: {body}");

    // Bad requests name their field; a tenant key cannot grant sessions.
    for (body, field) in [
        (json!({"tenant_id": "t1", "scope": "write"}), "scope"),
        (json!({"tenant_id": "t1", "scope": "read", "ttl_seconds": 1}), "ttl_seconds"),
        (json!({"tenant_id": "t1", "scope": "read", "ttl_seconds": 86401}), "ttl_seconds"),
        (json!({"tenant_id": "", "scope": "read"}), "tenant_id"),
    ] {
        let (status, e) =
            hub.send(hub.client.post(hub.url("/admin/portal-sessions")).bearer_auth(&hub.admin).json(&body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {e}");
        assert!(e["message"].as_str().expect("message").starts_with(field), "{e}");
    }
    let (status, _) = hub
        .send(
            hub.client
                .post(hub.url("/admin/portal-sessions"))
                .bearer_auth(&k1)
                .json(&json!({"tenant_id": "t1", "scope": "manage"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = hub
        .send(hub.client.post(hub.url("/v1/portal-sessions/exchange")).json(&json!({"grant": "shpg_made-up"})))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// Who may frame the console is the operator's choice; nobody by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_may_be_framed_only_where_the_operator_allows() {
    let hub = TestHub::start(Backend::Sqlite).await;
    let page = hub.client.get(hub.url("/console")).send().await.expect("console");
    assert!(page.headers()["content-security-policy"].to_str().expect("csp").ends_with("frame-ancestors 'none'"));
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let hub =
        TestHub::start_with(Backend::Sqlite, &[("STREAMING_HUB_PORTAL_FRAME_ANCESTORS", "https://app.bank.example")])
            .await;
    let page = hub.client.get(hub.url("/console")).send().await.expect("console");
    let csp = page.headers()["content-security-policy"].to_str().expect("csp").to_owned();
    assert!(csp.ends_with("frame-ancestors https://app.bank.example"), "{csp}");
    assert!(page.headers().get("x-frame-options").is_none(), "an allow-list has no X-Frame-Options form");
}
