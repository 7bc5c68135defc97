//! [`Metrics`]: what the HTTP layer counts between scrapes: a latency histogram per route,
//! method and status (its `_count` is the request count), the connections open now, and
//! `shardlite_build_info`. The `/metrics` handler renders them with the backend's figures and
//! the process's, read at each scrape.

use std::time::Duration;

use prometheus_client::{
    encoding::{text, EncodeLabelSet},
    metrics::{
        family::Family,
        gauge,
        histogram::{exponential_buckets, Histogram},
        info::Info,
    },
    registry::Registry,
};

/// The labels of a request's metrics.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    method: &'static str,
    status: u16,
}

type HistogramFamily = Family<RequestLabels, Histogram, fn() -> Histogram>;

/// The server's own metrics, kept between scrapes.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: HistogramFamily,
    connections: gauge::Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        // 50 µs .. 1.6 s: a cached GET is tens of µs, a durable commit a few ms.
        let requests: HistogramFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(5e-5, 2.0, 16)));
        registry.register(
            "shardlite_http_request_duration_seconds",
            "Time from a request's headers to its response, by route, method and status; _count counts requests",
            requests.clone(),
        );
        let connections = gauge::Gauge::default();
        registry.register("shardlite_http_connections_open", "HTTP connections open now", connections.clone());
        // An info metric: rendered `shardlite_build_info{...} 1`.
        let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
        let build = Info::new(vec![("version", env!("CARGO_PKG_VERSION")), ("profile", profile)]);
        registry.register("shardlite_build", "The build serving: its version and profile", build);
        Self { registry, requests, connections }
    }
}

impl Metrics {
    /// Records one answered request.
    pub fn observe(&self, route: &'static str, method: &'static str, status: u16, elapsed: Duration) {
        self.requests.get_or_create(&RequestLabels { route, method, status }).observe(elapsed.as_secs_f64());
    }

    /// The open-connections gauge, for the accept loop to move.
    pub fn connections(&self) -> &gauge::Gauge {
        &self.connections
    }

    /// Appends every metric kept here to `out`, in the OpenMetrics text format.
    pub fn encode(&self, out: &mut String) -> Result<(), std::fmt::Error> {
        text::encode_registry(out, &self.registry)
    }
}
