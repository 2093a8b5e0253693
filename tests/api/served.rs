//! `haggle serve` processes for tests that read what a process keeps to itself (its metrics
//! recorder is the process's): each with its own client, and a scrape read with a Prometheus
//! parser.

use std::collections::HashMap;

use openmetrics_parser::PrometheusValue;
use openmetrics_parser::prometheus::parse_prometheus;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{ServerProcess, TestDb, eventually};

pub const ADMIN: &str = "metrics-operator-token-0123456789";

/// A server process with its own client.
pub struct Server {
    pub process: ServerProcess,
    http: reqwest::Client,
}

impl Server {
    pub fn spawn(db: &TestDb, env: &[(&str, &str)]) -> Server {
        let mut all = vec![("DATABASE_URL", db.url.as_str()), ("HAGGLE_ADMIN_TOKEN", ADMIN)];
        all.extend_from_slice(env);
        Server { process: ServerProcess::spawn(&all), http: reqwest::Client::new() }
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.process.base));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Scrapes as the operator, waiting out a refusal for wrong tokens sent before.
    pub async fn scrape(&self) -> Metrics {
        let response = eventually("a scrape", || async {
            let response =
                self.http.get(format!("{}/metrics", self.process.base)).bearer_auth(ADMIN).send().await.unwrap();
            (response.status() != StatusCode::TOO_MANY_REQUESTS).then_some(response)
        })
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
        Metrics::parse(&response.text().await.unwrap())
    }

    pub async fn agent(&self, name: &str, tier: Option<&str>) -> (String, String) {
        let (status, body) = self.call(reqwest::Method::POST, "/v1/agents", None, Some(json!({ "name": name }))).await;
        assert_eq!(status, 201, "{body}");
        let id = body["agent"]["id"].as_str().unwrap().to_owned();
        if let Some(tier) = tier {
            let path = format!("/v1/admin/agents/{id}");
            let (status, _) =
                self.call(reqwest::Method::PATCH, &path, Some(ADMIN), Some(json!({ "tier": tier }))).await;
            assert_eq!(status, 200);
        }
        (id, body["api_key"].as_str().unwrap().to_owned())
    }
}

/// A scrape, read by a Prometheus text-format parser: every sample, by family name.
pub struct Metrics {
    samples: Vec<(String, HashMap<String, String>, PrometheusValue)>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let exposition =
            parse_prometheus(text).unwrap_or_else(|error| panic!("not the text format: {error:?}\n{text}"));
        let mut samples = Vec::new();
        for (name, family) in &exposition.families {
            for sample in family.iter_samples() {
                let labels = sample.get_labelset().expect("a family's sample has its labels");
                let labels = labels.iter().map(|(label, value)| (label.clone(), value.clone())).collect();
                samples.push((name.clone(), labels, sample.value.clone()));
            }
        }
        Metrics { samples }
    }

    /// The value of the counter or gauge with these labels (0 if absent).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels).map_or(0.0, |value| match value {
            PrometheusValue::Counter(counter) => counter.value.as_f64(),
            PrometheusValue::Gauge(value) | PrometheusValue::Unknown(value) => value.as_f64(),
            other => panic!("{name} is not a counter or gauge: {other:?}"),
        })
    }

    /// The number of observations of the histogram with these labels (0 if absent).
    pub fn observations(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.find(name, labels).map_or(0, |value| match value {
            PrometheusValue::Histogram(histogram) => histogram.count.expect("a histogram has its count"),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
    }

    pub fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<&PrometheusValue> {
        let wanted: HashMap<String, String> =
            labels.iter().map(|(label, value)| (label.to_string(), value.to_string())).collect();
        self.samples.iter().find(|(family, have, _)| family == name && *have == wanted).map(|(_, _, value)| value)
    }

    /// Every series the scrape holds, by name and labels (a histogram's once).
    pub fn series(&self) -> Vec<String> {
        let mut series: Vec<String> = self
            .samples
            .iter()
            .map(|(name, labels, _)| {
                let mut labels: Vec<String> =
                    labels.iter().map(|(label, value)| format!("{label}={value:?}")).collect();
                labels.sort();
                format!("{name}{{{}}}", labels.join(","))
            })
            .collect();
        series.sort();
        series
    }

    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|(family, _, _)| family == name)
    }

    /// Every value of a label, over every sample.
    pub fn label_values(&self, label: &str) -> Vec<&str> {
        self.samples.iter().filter_map(|(_, labels, _)| labels.get(label).map(String::as_str)).collect()
    }
}
