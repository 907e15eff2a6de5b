//! `POST /v1/events`: HTTP ingest in CloudEvents binary mode (`ce-*` headers, body = data) and
//! structured mode (`application/cloudevents+json`), judged by the same rules as Kafka records.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hub_core::structured_to_binary;
use hub_store::Origin;
use serde::Serialize;

use super::AppState;
use super::auth::Principal;
use super::error::{ApiError, ErrorBody, RawBody};
use crate::ingest::{self, Outcome};

/// The verdict on a posted event that was not quarantined.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct IngestAnswer {
    /// `accepted`, `duplicate` or `discarded`.
    pub verdict: &'static str,
    /// The event's seq in its tenant's inbox (the stored one for a duplicate); null when discarded.
    pub seq: Option<i64>,
}

fn essence(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// The CloudEvents and trace headers of the request; `Content-Type` is the data content type in
/// binary mode (an explicit `ce-datacontenttype`, coming later, wins).
fn binary_headers(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        out.push(("ce-datacontenttype".to_owned(), ct.as_bytes().to_vec()));
    }
    for (name, value) in headers {
        let name = name.as_str();
        if name.starts_with("ce-") || name == "traceparent" || name == "tracestate" {
            out.push((name.to_owned(), value.as_bytes().to_vec()));
        }
    }
    out
}

#[utoipa::path(
    post, path = "/v1/events", tag = "events", operation_id = "ingestEvent",
    request_body(
        content = Object,
        description = "Binary mode: the `ce-*` attributes as headers and the event data as the body \
                       (`Content-Type` is the data content type). Structured mode: \
                       `Content-Type: application/cloudevents+json` and the whole CloudEvent as JSON.",
    ),
    params(
        ("ce-specversion" = String, Header, description = "1.0 (binary mode; in structured mode every attribute is a field of the JSON body instead)"),
        ("ce-id" = String, Header, description = "A UUIDv7"),
        ("ce-source" = String, Header, description = "The producing application"),
        ("ce-type" = String, Header, description = "studio.lerian.<source>.<resource>.<event>"),
        ("ce-time" = String, Header, description = "RFC 3339"),
        ("ce-schemaversion" = String, Header, description = "Semantic version"),
        ("ce-resourcetype" = String, Header, description = "e.g. loan_application"),
        ("ce-eventtype" = String, Header, description = "e.g. approved"),
        ("ce-tenantid" = String, Header, description = "The owning tenant; a tenant key may post only its own"),
        ("ce-subject" = Option<String>, Header, description = "The aggregate id"),
        ("ce-datacontenttype" = Option<String>, Header, description = "Default application/json"),
        ("ce-dataschema" = Option<String>, Header, description = "A URI"),
        ("ce-systemevent" = Option<String>, Header, description = "`true` marks a tenant-less platform event (discarded)"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context, carried to deliveries"),
    ),
    responses(
        (status = 202, description = "Accepted, duplicate or discarded", body = IngestAnswer),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 403, description = "A tenant key posting for another tenant, or naming none (`forbidden`); a tenant this cell does not serve (`tenant_not_served`)", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the tenant posts over its rate; see Retry-After", body = ErrorBody),
        (status = 413, description = "Request over 2 MiB", body = ErrorBody),
        (status = 415, description = "Batched CloudEvents", body = ErrorBody),
        (status = 422, description = "Quarantined; the message names the header at fault", body = ErrorBody),
    ),
    security(("api_key" = []), ("admin_token" = []))
)]
pub async fn ingest(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let now = state.clock.now();
    let parsed = match essence(content_type).as_str() {
        "application/cloudevents-batch+json" => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "batched CloudEvents are not accepted: post one event per request",
            ));
        }
        "application/cloudevents+json" => structured_to_binary(&body),
        _ => Ok((binary_headers(&headers), body.to_vec())),
    };
    let judged = match parsed {
        Ok((ce_headers, data)) => {
            authorize(&principal, &ce_headers)?;
            admitted(&state, &ce_headers)?;
            ingest::judge_record(
                &ce_headers,
                &data,
                None,
                Origin::Http,
                &state.intake.policy,
                &state.catalog.payloads,
                now,
            )
        }
        Err(reason) => {
            let ce_headers = binary_headers(&headers);
            authorize(&principal, &ce_headers)?;
            admitted(&state, &ce_headers)?;
            ingest::quarantine_record(&ce_headers, &body, reason, Origin::Http, now)
        }
    };
    // Concurrent posts share a transaction (group commit); the answer comes after the commit.
    let ingest::Judged { record, reason, spans } = judged;
    let written = match record {
        None => None,
        Some(record) => Some(state.intake.writer.write(record).await?),
    };
    let outcome = ingest::outcome(reason, written);
    if let Some(spans) = spans {
        spans.finish(&outcome);
    }
    Ok(respond(outcome))
}

/// A tenant key may only ingest for its own tenant, named in `ce-tenantid` (SPEC §8); the admin
/// token for any (a missing tenant is then quarantined like any malformed record).
/// A portal session never ingests.
fn authorize(principal: &Principal, headers: &[(String, Vec<u8>)]) -> Result<(), ApiError> {
    let tenant = match principal {
        Principal::Admin { .. } => return Ok(()),
        Principal::Portal { read_only, .. } => {
            return super::auth::portal_may(&axum::http::Method::POST, "/v1/events", *read_only);
        }
        Principal::Tenant { role, .. } if *role < crate::sso::Role::Operator => {
            return Err(ApiError::forbidden("this route needs the operator role (this API key's role is lower)"));
        }
        Principal::Tenant { tenant, .. } => tenant,
        Principal::Person(person) => {
            let claimed = claimed_tenant(headers)
                .ok_or_else(|| ApiError::forbidden("a person may only ingest events naming a tenant in ce-tenantid"))?;
            return match person.grants.role_in(&claimed) {
                Some(role) if role >= crate::sso::Role::Operator => Ok(()),
                _ => Err(ApiError::forbidden(format!("this route needs the operator role in tenant {claimed}"))),
            };
        }
    };
    let claimed = headers.iter().rev().find(|(k, _)| k.eq_ignore_ascii_case("ce-tenantid")).map(|(_, v)| v.as_slice());
    match claimed {
        Some(value) if value == tenant.as_str().as_bytes() => Ok(()),
        _ => Err(ApiError::forbidden(format!(
            "an API key of tenant {tenant} may only ingest events whose ce-tenantid is {tenant}"
        ))),
    }
}

/// The valid tenant id a record names in `ce-tenantid`, if any.
fn claimed_tenant(headers: &[(String, Vec<u8>)]) -> Option<hub_core::TenantId> {
    headers
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case("ce-tenantid"))
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
        .and_then(|t| hub_core::TenantId::parse(t).ok())
}

/// The tenant a record names, read once for the two checks before it is judged:
/// - a tenant posts at most `STREAMING_HUB_INGEST_RATE` events a second (burst
///   `STREAMING_HUB_INGEST_BURST`), per process; over it, `429` with `Retry-After` and nothing is
///   stored;
/// - in a cell (`STREAMING_HUB_TENANTS`), an event of a tenant the cell does not serve is refused
///   (`403` `tenant_not_served`), never taken and dropped: the producer must post to its cell.
///
/// A record naming no valid tenant passes both (it is refused or quarantined when judged).
fn admitted(state: &AppState, headers: &[(String, Vec<u8>)]) -> Result<(), ApiError> {
    let Some(tenant) = claimed_tenant(headers) else { return Ok(()) };
    within_tenant_rate(state, &tenant)?;
    if !state.intake.policy.serves(&tenant) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "tenant_not_served",
            format!("tenant {tenant} is not served by this hub (STREAMING_HUB_TENANTS): post to its cell"),
        ));
    }
    Ok(())
}

/// One more event of `tenant` within its ingest rate, or `429` with `Retry-After`.
pub fn within_tenant_rate(state: &AppState, tenant: &hub_core::TenantId) -> Result<(), ApiError> {
    state.limiters.ingest.check(tenant).map_err(|wait| {
        let rate = state.settings.quotas.ingest_rate;
        super::limiter::rate_limited(wait, format!("more than {rate} events a second for this tenant; retry later"))
    })
}

fn respond(outcome: Outcome) -> Response {
    match outcome {
        Outcome::Accepted { seq } => {
            (StatusCode::ACCEPTED, Json(IngestAnswer { verdict: "accepted", seq: Some(seq) })).into_response()
        }
        Outcome::Duplicate { seq } => {
            (StatusCode::ACCEPTED, Json(IngestAnswer { verdict: "duplicate", seq: Some(seq) })).into_response()
        }
        Outcome::Discarded => {
            (StatusCode::ACCEPTED, Json(IngestAnswer { verdict: "discarded", seq: None })).into_response()
        }
        Outcome::Quarantined(reason) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "quarantined", reason.to_string()).into_response()
        }
    }
}
