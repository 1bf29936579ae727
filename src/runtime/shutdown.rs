//! Shutdown by broadcast: the registrar flips one watch channel, every actor and task holding a
//! [`Shutdown`] sees it, and backoff sleeps end early. (The pattern of mini-redis's shutdown.rs.)

use std::time::Duration;

use tokio::sync::watch;

/// The sending side, held by the registrar handle and the supervisor.
#[derive(Debug, Clone)]
pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

/// A listener. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger { tx }, Shutdown { rx })
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }
}

impl Shutdown {
    pub fn is_requested(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits until shutdown is requested (or every trigger is gone).
    pub async fn requested(&mut self) {
        let _ = self.rx.wait_for(|v| *v).await;
    }

    /// Sleeps for `d`; returns false if shutdown came first.
    pub async fn sleep(&mut self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = self.requested() => false,
        }
    }
}
