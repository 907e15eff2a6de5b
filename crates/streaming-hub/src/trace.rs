//! Traces: OpenTelemetry spans over an event's way through the hub, exported over OTLP.
//!
//! One trace per event: `ingest` (an HTTP post or a Kafka record; the child of the producer's
//! `traceparent` when it sent one) → `write` (until the event is durable) → `job` (one claimed
//! job of one subscription, in whichever replica takes it) → `attempt` (the call to the sink). The
//! write span's context is stored with the event (`hub_traceparent`), so a job's span continues
//! the trace in any process and at any later time; without it (events stored while traces were
//! off) a job continues the producer's trace, or starts its own.
//!
//! On when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and
//! neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none`); the standard `OTEL_*`
//! variables apply (headers, timeout, sampler, service name, batch delay), the protocol is
//! `http/protobuf`. Off, no span of this module is created. These spans go to the exporter
//! only, never into the logs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of every span of this module: the exporter's filter takes these and no other, the
/// log filter leaves them out.
pub const TARGET: &str = "streaming_hub::trace";

static ON: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The exporter, kept to flush what is buffered at exit.
#[derive(Debug)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Flushes buffered spans and stops the exporter's thread; call outside the async runtime.
    pub fn shutdown(self) {
        ON.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            eprintln!("traces: the exporter did not shut down cleanly: {e}");
        }
    }
}

/// What the `OTEL_*` variables ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    Off,
    /// Export to this endpoint (the variable's value, for the start line).
    Otlp(String),
}

/// Reads the standard variables from `vars`.
pub fn wanted(vars: &HashMap<String, String>) -> Wanted {
    let get = |k: &str| vars.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || get("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
    {
        return Wanted::Off;
    }
    match get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| get("OTEL_EXPORTER_OTLP_ENDPOINT")) {
        Some(endpoint) => Wanted::Otlp(endpoint.to_owned()),
        None => Wanted::Off,
    }
}

/// Builds the OTLP exporter and the layer that feeds it. Call before the async runtime starts
/// (the exporter's HTTP client runs on its own thread). The SDK reads the `OTEL_*` variables
/// itself.
pub fn start<S>(wanted: &Wanted) -> Result<Option<(impl tracing_subscriber::Layer<S>, Exporter)>, String>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::Layer as _;

    let Wanted::Otlp(_) = wanted else { return Ok(None) };
    // The exporter's client speaks TLS to an https endpoint with the process's provider.
    hub_sinks::install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("OTEL_EXPORTER_OTLP_ENDPOINT: cannot build the OTLP exporter: {e}"))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("streaming-hub");
    }
    let resource =
        resource.with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("streaming-hub");
    let only_ours = tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE);
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(only_ours);
    ON.store(true, Ordering::Relaxed);
    Ok(Some((layer, Exporter { provider })))
}

/// The context a W3C `traceparent` (and `tracestate`) names, if it is valid.
pub fn remote(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<opentelemetry::Context> {
    let traceparent = traceparent?;
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// Makes `span` the child of the first valid context among `parents`; a root otherwise.
pub fn continue_from(span: &tracing::Span, parents: &[Option<opentelemetry::Context>]) {
    if let Some(cx) = parents.iter().flatten().next() {
        // Fails only for a span that already started, which a fresh span has not.
        let _ = span.set_parent(cx.clone());
    }
}

/// The W3C `traceparent` of a span, to store and continue later.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// Records an attempt's outcome on its span.
pub fn attempted(span: &tracing::Span, outcome: &hub_sinks::Outcome) {
    if span.is_none() {
        return;
    }
    match outcome {
        hub_sinks::Outcome::Delivered { status, .. } => {
            span.record("outcome", "delivered");
            if let Some(status) = status {
                span.record("http.response.status_code", status);
            }
        }
        hub_sinks::Outcome::Failed(f) => {
            span.record("outcome", "failed");
            span.record("failure", f.kind.as_str());
            span.record("otel.status_code", "ERROR");
            if let Some(status) = f.status {
                span.record("http.response.status_code", status);
            }
        }
        hub_sinks::Outcome::Skipped => {
            span.record("outcome", "skipped");
        }
        hub_sinks::Outcome::Cancelled(_) => {
            span.record("outcome", "cancelled");
        }
    }
}

/// A span of this module when traces are on; `Span::none()` (free) otherwise.
#[macro_export]
macro_rules! trace_span {
    ($name:literal $(, $($fields:tt)*)?) => {
        if $crate::trace::on() {
            tracing::info_span!(target: "streaming_hub::trace", $name $(, $($fields)*)?)
        } else {
            tracing::Span::none()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_variables_turn_traces_on_and_off() {
        let vars = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        assert_eq!(wanted(&vars(&[])), Wanted::Off);
        assert_eq!(
            wanted(&vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])),
            Wanted::Otlp("http://c:4318".into())
        );
        assert_eq!(
            wanted(&vars(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/v1/traces")])),
            Wanted::Otlp("http://t:4318/v1/traces".into())
        );
        assert_eq!(
            wanted(&vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_SDK_DISABLED", "TRUE")])),
            Wanted::Off
        );
        assert_eq!(
            wanted(&vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_TRACES_EXPORTER", "none")])),
            Wanted::Off
        );
        assert_eq!(wanted(&vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])), Wanted::Off);
    }

    #[test]
    fn only_valid_trace_contexts_are_continued() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = remote(Some(good), Some("k=v")).expect("valid");
        assert_eq!(cx.span().span_context().trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(cx.span().span_context().is_remote());
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            assert!(remote(Some(bad), None).is_none(), "{bad:?}");
        }
        assert!(remote(None, Some("k=v")).is_none());
    }
}
