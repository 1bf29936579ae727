//! Readiness of a process that runs one or more registrars: each sink is starting (connecting
//! to the catalog), running (then its status board decides), or failed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::registrar::{RegistrarBuilder, RegistrarHandle};
use crate::runtime::status::StatusBoard;

#[derive(Debug, Clone)]
enum SinkHealth {
    Starting,
    Running(StatusBoard),
    Failed(String),
}

/// Shared, cheap to clone; what `/readyz` answers from.
#[derive(Debug, Clone, Default)]
pub struct Health {
    sinks: Arc<Mutex<BTreeMap<String, SinkHealth>>>,
    stopping: Arc<Mutex<bool>>,
}

impl Health {
    fn set(&self, sink: &str, state: SinkHealth) {
        if let Ok(mut sinks) = self.sinks.lock() {
            sinks.insert(sink.to_string(), state);
        }
    }

    /// The sink is connecting to its catalog.
    pub fn starting(&self, sink: &str) {
        self.set(sink, SinkHealth::Starting);
    }

    /// The sink runs; its readiness is its status board's.
    pub fn running(&self, sink: &str, board: StatusBoard) {
        self.set(sink, SinkHealth::Running(board));
    }

    /// The sink could not start (its error is the reason; errors never carry secrets).
    pub fn failed(&self, sink: &str, error: &Error) {
        self.set(sink, SinkHealth::Failed(error.to_string()));
    }

    /// The process is shutting down: not ready any more, whatever the sinks say.
    pub fn stopping(&self) {
        if let Ok(mut s) = self.stopping.lock() {
            *s = true;
        }
    }

    /// Starts `registrar` (made with [`crate::Registrar::builder`], the one way to start),
    /// tracking it here: starting, then running or failed.
    pub async fn start(&self, registrar: RegistrarBuilder) -> Result<RegistrarHandle> {
        let sink = registrar.sink_id().to_string();
        self.starting(&sink);
        match registrar.start().await {
            Ok(handle) => {
                self.running(&sink, handle.status_board());
                Ok(handle)
            }
            Err(e) => {
                self.failed(&sink, &e);
                Err(e)
            }
        }
    }

    /// `Ok` with a short summary when every sink is ready; otherwise every reason, one per sink.
    pub fn readiness(&self) -> std::result::Result<String, String> {
        if self.stopping.lock().map(|s| *s).unwrap_or(true) {
            return Err("shutting down".to_string());
        }
        let sinks = match self.sinks.lock() {
            Ok(s) => s.clone(),
            Err(_) => return Err("health state lost".to_string()),
        };
        if sinks.is_empty() {
            return Err("no registrar started yet".to_string());
        }
        let mut ready = Vec::new();
        let mut not_ready = Vec::new();
        for (sink, state) in sinks {
            match state {
                SinkHealth::Starting => {
                    not_ready.push(format!("sink {sink}: connecting to the catalog"))
                }
                SinkHealth::Failed(why) => not_ready.push(format!("sink {sink}: {why}")),
                SinkHealth::Running(board) => {
                    let status = board.snapshot();
                    match status.readiness() {
                        Ok(()) => {
                            ready.push(format!("sink {sink}: {} table(s)", status.tables.len()))
                        }
                        Err(why) => not_ready.push(format!("sink {sink}: {why}")),
                    }
                }
            }
        }
        if not_ready.is_empty() {
            Ok(format!("ready: {}", ready.join("; ")))
        } else {
            Err(format!("not ready: {}", not_ready.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sink_must_be_ready() {
        let health = Health::default();
        assert!(health.readiness().is_err(), "nothing started");
        health.starting("a");
        assert!(
            health
                .readiness()
                .unwrap_err()
                .contains("sink a: connecting")
        );
        let board = StatusBoard::default();
        board.set_catalog_ok();
        board.update("ns.t", |t| t.resolved = true);
        health.running("a", board.clone());
        assert!(health.readiness().is_ok());
        health.failed("b", &Error::auth_failed("the catalog answered 401"));
        let why = health.readiness().unwrap_err();
        assert!(
            why.contains("sink b") && why.contains("auth.failed"),
            "{why}"
        );
        health.running("b", board);
        assert!(health.readiness().is_ok());
        health.stopping();
        assert!(health.readiness().is_err());
    }
}
