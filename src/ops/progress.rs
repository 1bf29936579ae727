//! The progress line: at a steady interval, while a registrar has a backlog (or has just
//! registered something), one log line with what is registered, what waits, and the lag.

use std::time::Duration;

use crate::runtime::status::{RegistrarStatus, StatusBoard};

/// `registered 120 segments (+20), backlog 80, lag 3.2s`: the numbers of one line.
pub fn line(status: &RegistrarStatus, registered_before: u64) -> String {
    let registered = status.registered();
    let lag = status
        .lag_ms()
        .map(|ms| format!("{:.1}s", ms as f64 / 1000.0))
        .unwrap_or_else(|| "-".to_string());
    let quarantined: u64 = status.tables.values().map(|t| t.quarantined).sum();
    let quarantined = if quarantined > 0 {
        format!(", quarantined {quarantined}")
    } else {
        String::new()
    };
    format!(
        "registered {registered} segments (+{}), skipped {}, backlog {}{quarantined}, lag {lag}",
        registered.saturating_sub(registered_before),
        status.tables.values().map(|t| t.skipped).sum::<u64>(),
        status.backlog(),
    )
}

/// Logs a progress line for each sink every `every` while it has a backlog or made progress
/// since the last line; quiet when idle. Runs until the task is dropped or aborted.
pub async fn report(sinks: Vec<(String, StatusBoard)>, every: Duration) {
    let mut last: Vec<u64> = vec![0; sinks.len()];
    let mut ticks = tokio::time::interval(every.max(Duration::from_millis(100)));
    ticks.tick().await;
    loop {
        ticks.tick().await;
        for ((sink, board), before) in sinks.iter().zip(last.iter_mut()) {
            let status = board.snapshot();
            if status.backlog() > 0 || status.registered() != *before {
                tracing::info!(
                    sink = %sink,
                    registered = status.registered(),
                    backlog = status.backlog(),
                    lag_ms = status.lag_ms(),
                    "progress: {}",
                    line(&status, *before)
                );
                *before = status.registered();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_registered_backlog_and_lag() {
        let board = StatusBoard::default();
        board.update("ns.a", |t| {
            t.registered = 30;
            t.backlog = 5;
            t.lag_ms = Some(3200);
        });
        board.update("ns.b", |t| {
            t.registered = 10;
            t.skipped = 2;
            t.lag_ms = Some(800);
        });
        assert_eq!(
            line(&board.snapshot(), 25),
            "registered 40 segments (+15), skipped 2, backlog 5, lag 3.2s"
        );
        board.update("ns.b", |t| t.quarantined = 3);
        assert_eq!(
            line(&board.snapshot(), 40),
            "registered 40 segments (+0), skipped 2, backlog 5, quarantined 3, lag 3.2s"
        );
    }
}
