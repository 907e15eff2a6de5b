//! Portal sessions: a grant is exchanged once, a session lives until it expires or is revoked.

use chrono::{Duration, TimeZone, Utc};
use hub_store::{NewPortalSession, PersonSession, PortalSession, PruneKind};
use uuid::Uuid;

use crate::support::TestDb;

pub async fn a_grant_is_exchanged_once_and_a_session_ends_when_revoked_or_expired(db: &TestDb) {
    let s = &db.store;
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let session = |scope: &str, ttl: i64| PortalSession {
        id: Uuid::now_v7(),
        tenant_id: "t1".into(),
        scope: scope.into(),
        created_at: t0,
        expires_at: t0 + Duration::minutes(ttl),
        exchanged_at: None,
        revoked_at: None,
    };
    let read = session("read", 10);
    s.create_portal_session(&NewPortalSession { session: read.clone(), grant_hash: b"grant-1".to_vec() })
        .await
        .expect("create");
    assert_eq!(s.portal_session(b"session-1", t0).await.expect("lookup"), None, "not exchanged yet");
    assert_eq!(s.exchange_portal_grant(b"grant-x", b"session-1", t0).await.expect("exchange"), None, "no such grant");
    let got = s.exchange_portal_grant(b"grant-1", b"session-1", t0 + Duration::minutes(1)).await.expect("exchange");
    let got = got.expect("exchanged");
    assert_eq!((got.id, got.scope.as_str(), got.tenant_id.as_str()), (read.id, "read", "t1"));
    assert_eq!(got.exchanged_at, Some(t0 + Duration::minutes(1)));
    // Once only: a second exchange of the same grant gets nothing, and binds nothing.
    assert_eq!(
        s.exchange_portal_grant(b"grant-1", b"session-2", t0 + Duration::minutes(2)).await.expect("again"),
        None
    );
    assert_eq!(s.portal_session(b"session-2", t0).await.expect("lookup"), None);
    assert_eq!(
        s.portal_session(b"session-1", t0 + Duration::minutes(9)).await.expect("lookup").map(|p| p.id),
        Some(read.id)
    );
    assert_eq!(s.portal_session(b"session-1", t0 + Duration::minutes(10)).await.expect("lookup"), None, "expired");

    // Revoked: the session ends, a second revocation finds nothing; an unexchanged grant of a
    // revoked session cannot be exchanged.
    let manage = session("manage", 60);
    s.create_portal_session(&NewPortalSession { session: manage.clone(), grant_hash: b"grant-2".to_vec() })
        .await
        .expect("create");
    assert!(s.revoke_portal_session(manage.id, t0).await.expect("revoke"));
    assert!(!s.revoke_portal_session(manage.id, t0).await.expect("again"));
    assert!(!s.revoke_portal_session(Uuid::now_v7(), t0).await.expect("none"));
    assert_eq!(s.exchange_portal_grant(b"grant-2", b"session-3", t0).await.expect("exchange"), None);
    // An expired grant cannot be exchanged.
    let short = session("read", 1);
    s.create_portal_session(&NewPortalSession { session: short.clone(), grant_hash: b"grant-3".to_vec() })
        .await
        .expect("create");
    assert_eq!(s.exchange_portal_grant(b"grant-3", b"session-4", t0 + Duration::minutes(1)).await.expect("late"), None);
    // An expired session is no live session: revoking it finds nothing (the API's 404).
    assert!(!s.revoke_portal_session(short.id, t0 + Duration::minutes(1)).await.expect("expired"));
    assert!(!s.revoke_portal_session(read.id, t0 + Duration::minutes(10)).await.expect("expired, exchanged"));
    // Expired sessions age out.
    assert_eq!(s.prune(PruneKind::Sessions, t0 + Duration::minutes(30), 100).await.expect("prune"), Some(2));
}

pub async fn issuer_keys_rotate_and_retired_ones_are_dropped_after_their_overlap(db: &TestDb) {
    let s = &db.store;
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let key = |at| hub_store::IssuerKeyRecord {
        kid: Uuid::now_v7(),
        sealed_key: vec![7; 48],
        created_at: at,
        retired_at: None,
    };
    let first = key(t0);
    s.add_issuer_key(&first, None).await.expect("first");
    assert_eq!(s.issuer_keys().await.expect("read"), vec![first.clone()]);
    // A rotation: the new key signs, the first is retired at that moment.
    let second = key(t0 + Duration::hours(1));
    s.add_issuer_key(&second, Some(t0 + Duration::hours(1))).await.expect("rotate");
    let kept = s.issuer_keys().await.expect("read");
    assert_eq!(kept.len(), 2);
    assert_eq!((kept[0].kid, kept[0].retired_at), (first.kid, Some(t0 + Duration::hours(1))));
    assert_eq!((kept[1].kid, kept[1].retired_at), (second.kid, None));
    // Before the overlap ends nothing is dropped; after it, only the retired key.
    assert_eq!(s.drop_issuer_keys(t0 + Duration::minutes(59)).await.expect("drop"), 0);
    assert_eq!(s.drop_issuer_keys(t0 + Duration::hours(25)).await.expect("drop"), 1);
    assert_eq!(s.issuer_keys().await.expect("read"), vec![second]);
}

pub async fn a_person_session_lives_until_sign_out_or_expiry(db: &TestDb) {
    let s = &db.store;
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let session = |subject: &str, ttl: i64| PersonSession {
        id: Uuid::now_v7(),
        issuer: "https://idp.example.com".into(),
        subject: subject.into(),
        roles: vec!["acme:admin".into(), "platform-viewer".into(), "quoted \"role\"".into()],
        created_at: t0,
        expires_at: t0 + Duration::hours(ttl),
    };
    let (ana, bo) = (session("ana", 8), session("bo", 1));
    s.create_person_session(&ana, b"cookie-ana").await.expect("create");
    s.create_person_session(&bo, b"cookie-bo").await.expect("create");
    assert_eq!(s.person_session(b"cookie-ana", t0 + Duration::hours(7)).await.expect("lookup"), Some(ana.clone()));
    assert_eq!(s.person_session(b"cookie-x", t0).await.expect("lookup"), None, "no such cookie");
    // Expired: no session, though its row waits for the pruner.
    assert_eq!(s.person_session(b"cookie-bo", t0 + Duration::hours(1)).await.expect("lookup"), None);
    // Sign-out ends it at once, once.
    assert!(s.end_person_session(b"cookie-ana").await.expect("end"));
    assert!(!s.end_person_session(b"cookie-ana").await.expect("again"));
    assert_eq!(s.person_session(b"cookie-ana", t0).await.expect("lookup"), None);
    // The pruner takes the expired session, with the portal's.
    assert_eq!(s.prune(PruneKind::Sessions, t0 + Duration::hours(2), 100).await.expect("prune"), Some(1));
    assert_eq!(s.prune(PruneKind::Sessions, t0 + Duration::hours(2), 100).await.expect("prune"), Some(0));
}
