//! The catalog watcher: pulls uploaded segments from the feed and hands them to the supervisor
//! for routing. The feed is read on a task of its own so a feed waiting for the next record never
//! blocks the actor's mailbox (and so stop works while the feed is idle).
//!
//! Backpressure: a record is read only once the `memory.segments` budget has room for it (a
//! [`SegmentPermit`] that travels with the segment to its committer), so the feed is read as fast
//! as committers finish with segments, and the mailboxes downstream never hold more than the
//! budget, however long the backlog.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;

use crate::actors::HandlerResult;
use crate::error::{Error, ErrorCode};
use crate::protocol::feed::SegmentFeed;
use crate::protocol::messages::{SegmentPermit, SupervisorMsg};
use crate::protocol::segment::UploadedSegment;
use crate::runtime::shutdown::Shutdown;

pub(crate) struct Watcher;

pub(crate) struct WatcherArgs {
    pub feed: Box<dyn SegmentFeed>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub shutdown: Shutdown,
    /// `memory.segments`: how many segments may be out of the feed and not yet done with.
    pub max_in_memory: usize,
}

pub(crate) struct WatcherState {
    task: JoinHandle<()>,
}

impl Actor for Watcher {
    type Msg = ();
    type State = WatcherState;
    type Arguments = WatcherArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<()>,
        args: WatcherArgs,
    ) -> Result<WatcherState, ActorProcessingErr> {
        let budget = Arc::new(tokio::sync::Semaphore::new(args.max_in_memory.max(1)));
        let task = tokio::spawn(pump(args.feed, args.supervisor, args.shutdown, budget));
        Ok(WatcherState { task })
    }

    async fn handle(&self, _: ActorRef<()>, _: (), _: &mut WatcherState) -> HandlerResult {
        Ok(())
    }

    async fn post_stop(&self, _: ActorRef<()>, state: &mut WatcherState) -> HandlerResult {
        state.task.abort();
        Ok(())
    }
}

async fn pump(
    mut feed: Box<dyn SegmentFeed>,
    supervisor: ActorRef<SupervisorMsg>,
    mut shutdown: Shutdown,
    budget: Arc<tokio::sync::Semaphore>,
) {
    let mut order = FeedOrder::default();
    loop {
        // Room first, then the record: a record read is never held back.
        let permit = tokio::select! {
            permit = SegmentPermit::acquire(&budget) => permit,
            _ = shutdown.requested() => return,
        };
        let Some(permit) = permit else { return };
        let next = tokio::select! {
            next = feed.next() => next,
            _ = shutdown.requested() => return,
        };
        let msg = match next {
            Ok(Some(segment)) => match order.check(&segment) {
                Ok(()) => SupervisorMsg::Route(segment, permit),
                Err(e) => SupervisorMsg::Fatal(e),
            },
            Ok(None) => SupervisorMsg::FeedEnded,
            Err(e) => SupervisorMsg::Fatal(e),
        };
        let last = !matches!(msg, SupervisorMsg::Route(..));
        if supervisor.cast(msg).is_err() || last {
            return;
        }
    }
}

/// The last seq seen per catalog id and dataset: a committer commits its table's segments in
/// the order it gets them and the watermark says "everything below is registered", so a feed
/// that delivers a seq at or below one it already delivered would have that segment silently
/// covered. It is refused instead. Memory: one entry per (catalog, dataset).
#[derive(Debug, Default)]
struct FeedOrder {
    last: HashMap<(Option<String>, String), u64>,
}

impl FeedOrder {
    fn check(&mut self, segment: &UploadedSegment) -> Result<(), Error> {
        let key = (segment.catalog_id.clone(), segment.dataset.clone());
        match self.last.get(&key) {
            Some(&last) if segment.seq <= last => Err(Error::new(
                ErrorCode::FeedOutOfOrder,
                format!(
                    "the feed delivered segment seq {} (key {}) of dataset {} in catalog {} after \
                     seq {last}; a feed must deliver each dataset's segments in strictly \
                     increasing seq order (replay from the start on every start, never resend \
                     within one run)",
                    segment.seq,
                    segment.object_key,
                    segment.dataset,
                    segment.catalog_id.as_deref().unwrap_or("(none)"),
                ),
            )),
            _ => {
                self.last.insert(key, segment.seq);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u64, dataset: &str, catalog: Option<&str>) -> UploadedSegment {
        UploadedSegment {
            catalog_id: catalog.map(str::to_string),
            ..crate::testing::segment(seq, dataset, &format!("k{seq}"))
        }
    }

    #[test]
    fn seqs_must_increase_per_catalog_and_dataset() {
        let mut order = FeedOrder::default();
        assert!(order.check(&seg(5, "a", Some("c"))).is_ok());
        assert!(
            order.check(&seg(3, "b", Some("c"))).is_ok(),
            "another dataset"
        );
        assert!(
            order.check(&seg(4, "a", Some("d"))).is_ok(),
            "another catalog"
        );
        assert!(order.check(&seg(6, "a", Some("c"))).is_ok());
        let e = order.check(&seg(6, "a", Some("c"))).expect_err("repeat");
        assert_eq!(e.code(), ErrorCode::FeedOutOfOrder);
        assert!(
            e.message().contains("seq 6") && e.message().contains("after seq 6"),
            "{e}"
        );
        assert!(order.check(&seg(2, "a", Some("c"))).is_err(), "backwards");
        assert!(order.check(&seg(1, "x", None)).is_ok());
        assert!(
            order.check(&seg(1, "x", None)).is_err(),
            "without a catalog id too"
        );
    }
}
