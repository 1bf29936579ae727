//! Log capture for the tests that check what the registrar logs: a buffer tracing writes into,
//! for the whole test process or for one thread, and a check that no secret reached a log, an
//! error or a `Debug` output.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use tracing::subscriber::DefaultGuard;

/// What a capture has collected, shared with the subscriber that writes it.
#[derive(Clone, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> LogBuffer {
        self.clone()
    }
}

/// Every log line this test process writes from now on (tracing, and `log` records through the
/// bridge), at debug level and above, ours at trace. Installed once, as the global default, so
/// the registrar's tasks on every worker thread are captured.
pub fn captured_logs() -> LogBuffer {
    static BUFFER: OnceLock<LogBuffer> = OnceLock::new();
    BUFFER
        .get_or_init(|| {
            let buffer = LogBuffer::default();
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(
                    "debug,thadam_iceberg=trace",
                ))
                .with_ansi(false)
                .with_writer(buffer.clone())
                .try_init()
                .expect("the log capture is the only global subscriber");
            buffer
        })
        .clone()
}

/// Every log line the current thread writes at `level` and above, until the guard is dropped
/// (for a test on a current-thread runtime, whose tasks all log on its thread).
pub fn thread_logs(level: tracing::Level) -> (LogBuffer, DefaultGuard) {
    let buffer = LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(buffer.clone())
        .with_max_level(level)
        .with_ansi(false)
        .finish();
    (buffer, tracing::subscriber::set_default(subscriber))
}

/// Fails if any secret occurs in any text.
pub fn assert_no_secret(secrets: &[String], texts: &[(&str, &str)]) {
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        for (what, text) in texts {
            if let Some(line) = text.lines().find(|l| l.contains(secret.as_str())) {
                // Show where, with the secret itself masked.
                let line = line.replace(secret.as_str(), "<SECRET>");
                panic!(
                    "a secret appears in {what}: {}",
                    &line[..line.len().min(600)]
                );
            }
        }
    }
}
