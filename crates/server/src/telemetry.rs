//! Logging and traces: levels from RUST_LOG (default `info`), text or JSON lines on standard
//! error, and, when an OTLP endpoint is configured, the spans exported over OTLP/HTTP
//! (protobuf). Each request's span carries its request id (see `http::observe`), so every line
//! it logs does, and so does its exported span.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, fmt};

use crate::config::LogFormat;

/// Haggle's own variable for the collector's base URL (`http://collector:4318`); the exporter
/// posts to its `/v1/traces`.
pub const OTLP_ENDPOINT: &str = "HAGGLE_OTLP_ENDPOINT";
/// The standard variables, which the exporter reads itself when Haggle's is unset.
const STANDARD_ENDPOINTS: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

/// Keeps the trace exporter for the life of the process; dropping it sends the spans still
/// queued.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("haggle: sending the last spans failed: {error}");
        }
    }
}

/// Installs the process's subscriber. Call it outside any async runtime: the exporter runs its
/// own thread.
pub fn init(format: LogFormat) -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (text, json) = match format {
        LogFormat::Text => {
            (Some(fmt::layer().with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal())), None)
        }
        LogFormat::Json => {
            (None, Some(fmt::layer().json().flatten_event(true).with_current_span(true).with_writer(std::io::stderr)))
        }
    };
    let (provider, failure) = match tracer_provider() {
        Ok(provider) => (provider, None),
        Err(error) => (None, Some(error)),
    };
    let traces =
        provider.as_ref().map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer("haggle")));
    let _ = tracing_subscriber::registry().with(filter).with(text).with(json).with(traces).try_init();
    if let Some(error) = failure {
        tracing::warn!(%error, "the OTLP trace exporter could not be made; spans are not exported");
    } else if provider.is_some() {
        tracing::info!("exporting spans over OTLP/HTTP");
    }
    Telemetry { provider }
}

/// The provider exporting spans, if an endpoint is configured.
fn tracer_provider() -> Result<Option<SdkTracerProvider>, String> {
    let configured = |name: &str| std::env::var(name).ok().filter(|value| !value.trim().is_empty());
    let builder = SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
    let builder = match configured(OTLP_ENDPOINT) {
        Some(base) => builder.with_endpoint(format!("{}/v1/traces", base.trim().trim_end_matches('/'))),
        None if STANDARD_ENDPOINTS.iter().any(|name| configured(name).is_some()) => builder,
        None => return Ok(None),
    };
    let exporter = builder.build().map_err(|error| error.to_string())?;
    let resource = Resource::builder().with_service_name("haggle").build();
    Ok(Some(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build()))
}
