//! The OpenAPI `webhooks` section: what a receiver gets from a webhook subscription, in either
//! signature scheme (docs/RECEIVERS.md tells the same in prose).

use utoipa::openapi::path::{HttpMethod, Operation, OperationBuilder, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::{ContentBuilder, ObjectBuilder, OpenApi, PathsBuilder, Required, ResponseBuilder, Type};

fn header(name: &str, required: bool, description: &str) -> utoipa::openapi::path::Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Header)
        .required(if required { Required::True } else { Required::False })
        .description(Some(description))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

/// Headers every delivery carries, whatever the signature scheme.
fn correlation() -> Vec<utoipa::openapi::path::Parameter> {
    vec![
        header("X-Lerian-Event-Id", true, "The event's `ce-id`: the same on every redelivery; deduplicate by it."),
        header("X-Lerian-Delivery-Id", true, "A new UUIDv7 per attempt."),
        header("X-Lerian-Event-Type", true, "The event key `<resourcetype>.<eventtype>` (no producer name)."),
        header("X-Lerian-Tenant-Id", true, "The tenant the event belongs to."),
        header("X-Lerian-Subscription-Id", true, "The subscription delivering it."),
        header("X-Lerian-Attempt", true, "1 to 8."),
        header("X-Lerian-Schema-Version", true, "The event's `ce-schemaversion`."),
        header("X-Lerian-Event-Time", true, "The event's `ce-time`."),
        header("X-Lerian-Subject", false, "The event's `ce-subject`, when it has one."),
        header("traceparent", false, "W3C trace context, when the event carried it."),
        header("tracestate", false, "W3C trace context, when the event carried it."),
    ]
}

fn delivery(
    operation_id: &str,
    summary: &str,
    description: &str,
    signing: Vec<utoipa::openapi::path::Parameter>,
) -> Operation {
    let body = RequestBodyBuilder::new()
        .description(Some("The event body exactly as the producer sent it; verify the signature on these raw bytes before parsing. `Content-Type` is the event's `ce-datacontenttype` (default `application/json`)."))
        .required(Some(Required::True))
        .content("application/json", ContentBuilder::new().schema(Some(ObjectBuilder::new())).build())
        .build();
    OperationBuilder::new()
        .operation_id(Some(operation_id))
        .summary(Some(summary))
        .description(Some(description))
        .parameters(Some(signing.into_iter().chain(correlation())))
        .request_body(Some(body))
        .response("2XX", ResponseBuilder::new().description("Accepted: answer only once the event is stored durably."))
        .response(
            "default",
            ResponseBuilder::new().description(
                "Anything else, or no answer within the subscription's timeout, is retried: 0 s, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, with jitter.",
            ),
        )
        .build()
}

/// Adds the `webhooks` section.
pub struct ReceiverWebhooks;

impl utoipa::Modify for ReceiverWebhooks {
    fn modify(&self, openapi: &mut OpenApi) {
        let lerian = delivery(
            "receiveDelivery",
            "A delivery to a webhook subscription (signature `lerian`, the default)",
            "Refuse a timestamp more than 5 minutes from now; compare the signature in constant time with every `X-Webhook-Signature` value (two during the 24 h after a rotation). The verification probe is such a delivery of event type `streaming_hub.verification` whose body holds a `challenge`: answer 2xx with a body that contains it.",
            vec![
                header("X-Webhook-Timestamp", true, "Unix seconds of this attempt."),
                header(
                    "X-Webhook-Signature",
                    true,
                    "`v1,sha256=<hex>`: HMAC-SHA256 keyed with the signing secret's UTF-8 bytes (`whsec_` included) over `\"v1:\" + timestamp + \".\" + body`. Repeated once per secret during a rotation.",
                ),
            ],
        );
        let standard = delivery(
            "receiveStandardWebhooksDelivery",
            "A delivery to a webhook subscription with `signature: standard-webhooks`",
            "Signed as the Standard Webhooks specification says; its reference libraries verify it.",
            vec![
                header("webhook-id", true, "The event id (the same on every redelivery)."),
                header("webhook-timestamp", true, "Unix seconds of this attempt."),
                header(
                    "webhook-signature",
                    true,
                    "`v1,<base64>` of HMAC-SHA256 keyed with the base64-decoded part of the `whsec_` secret over `webhook-id + \".\" + webhook-timestamp + \".\" + body`; space-separated, one per secret during a rotation.",
                ),
            ],
        );
        openapi.webhooks = Some(
            PathsBuilder::new()
                .path("delivery", PathItem::new(HttpMethod::Post, lerian))
                .path("standardWebhooksDelivery", PathItem::new(HttpMethod::Post, standard))
                .build(),
        );
    }
}
