//! The standalone runner killed with SIGKILL at random moments while registering 300 segments,
//! restarted until done: every segment is registered exactly once.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Harness, assert_exactly_once};

fn runner() -> PathBuf {
    common::example_binary("registrar")
}

/// A small deterministic generator, seeded per run and printed, so a failure can be replayed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_never_loses_or_doubles_a_segment() {
    let mut h = Harness::new("crash");
    let config = h.config_file();
    let seed = std::env::var("THADAM_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    println!("crash test seed: {seed} (replay with THADAM_CRASH_SEED={seed})");
    let mut rng = Lcg(seed);
    let log = std::fs::File::create(h.dir.path().join("runner.log")).expect("log");

    let mut keys = Vec::new();
    let mut kills = 0;
    let mut next = 0u64;
    for round in 0..20 {
        // New segments keep arriving while the registrar is killed again and again.
        for _ in 0..15 {
            keys.push(h.ship_telemetry(next, 10).await);
            next += 1;
        }
        let mut child = Command::new(runner())
            .args(["--config"])
            .arg(&config)
            .args(["--max-batch", &(1 + rng.next(8)).to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log.try_clone().expect("log"))
            .spawn()
            .expect("runner starts");
        tokio::time::sleep(Duration::from_millis(30 + rng.next(1200))).await;
        if child.try_wait().expect("status").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        } else {
            panic!(
                "round {round}: the runner exited by itself; see {}",
                h.dir.path().display()
            );
        }
        child.wait().expect("reaped");
    }
    // The last start runs to the end.
    let status = tokio::task::spawn_blocking({
        let config = config.clone();
        move || {
            Command::new(runner())
                .arg("--config")
                .arg(&config)
                .arg("--until-caught-up")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .status()
                .expect("runner")
        }
    });
    let status = tokio::time::timeout(Duration::from_secs(180), status)
        .await
        .expect("caught up in time (hang guard)")
        .expect("join");
    assert!(status.success(), "the final run exited {status}");
    println!(
        "survived {kills} SIGKILLs while registering {} segments",
        keys.len()
    );
    assert!(kills >= 20);

    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    assert_eq!(keys.len(), 300);
}
