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
    // How long the longest-waiting table has gone without a commit while segments wait: a table
    // another writer starves shows here even when it never committed.
    let now = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    let waiting = status
        .tables
        .values()
        .filter_map(|t| t.waiting_since_ms)
        .min()
        .map(|since| {
            format!(
                ", waiting {:.1}s",
                now.saturating_sub(since) as f64 / 1000.0
            )
        })
        .unwrap_or_default();
    let quarantined: u64 = status.tables.values().map(|t| t.quarantined).sum();
    let quarantined = if quarantined > 0 {
        format!(", quarantined {quarantined}")
    } else {
        String::new()
    };
    let carried: u64 = status.tables.values().map(|t| t.carried).sum();
    let carried = if carried > 0 {
        format!(", carried by other nodes {carried}")
    } else {
        String::new()
    };
    format!(
        "registered {registered} segments (+{}), skipped {}{carried}, backlog {}{waiting}{quarantined}, lag {lag}",
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
        let waiting_since = |s: &mut RegistrarStatus, ms: Option<u64>| {
            if let Some(t) = s.tables.get_mut("ns.a") {
                t.waiting_since_ms = ms;
            }
        };
        let mut status = board.snapshot();
        assert!(status.tables["ns.a"].waiting_since_ms.is_some(), "5 wait");
        waiting_since(&mut status, None);
        assert_eq!(
            line(&status, 25),
            "registered 40 segments (+15), skipped 2, backlog 5, lag 3.2s"
        );
        board.update("ns.b", |t| t.quarantined = 3);
        let mut status = board.snapshot();
        waiting_since(&mut status, Some(0));
        let l = line(&status, 40);
        assert!(
            l.starts_with("registered 40 segments (+0), skipped 2, backlog 5, waiting ")
                && l.ends_with(", quarantined 3, lag 3.2s"),
            "{l}"
        );
        waiting_since(&mut status, None);
        assert_eq!(
            line(&status, 40),
            "registered 40 segments (+0), skipped 2, backlog 5, quarantined 3, lag 3.2s"
        );
    }
}
