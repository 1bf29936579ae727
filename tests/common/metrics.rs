//! Reading the registrar's metrics back in tests: one Prometheus recorder per test binary (the
//! `metrics` recorder is process-global), and the sum of a counter over matching label sets.
//! Tests running in parallel each look at their own labels (their own table, op or cause).

use std::sync::OnceLock;

use metrics_exporter_prometheus::PrometheusHandle;

/// The test binary's recorder, installed on first use (call it before starting a registrar).
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| thadam_iceberg::ops::http::install_prometheus().expect("recorder"))
}

/// The sum of counter `name` over the series whose labels include every `(label, value)`
/// (0 when none).
pub fn counter(name: &str, labels: &[(&str, &str)]) -> f64 {
    let prefix = format!("{name}{{");
    recorder()
        .render()
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
