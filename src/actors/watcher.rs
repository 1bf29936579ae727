//! The catalog watcher: pulls uploaded segments from the feed and hands them to the supervisor
//! for routing. The feed is read on a task of its own so a feed waiting for the next record never
//! blocks the actor's mailbox (and so stop works while the feed is idle).

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;

use crate::actors::HandlerResult;
use crate::protocol::feed::SegmentFeed;
use crate::protocol::messages::SupervisorMsg;
use crate::shutdown::Shutdown;

pub struct Watcher;

pub struct WatcherArgs {
    pub feed: Box<dyn SegmentFeed>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub shutdown: Shutdown,
}

pub struct WatcherState {
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
        let task = tokio::spawn(pump(args.feed, args.supervisor, args.shutdown));
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
) {
    loop {
        let next = tokio::select! {
            next = feed.next() => next,
            _ = shutdown.requested() => return,
        };
        let msg = match next {
            Ok(Some(segment)) => SupervisorMsg::Route(segment),
            Ok(None) => SupervisorMsg::FeedEnded,
            Err(e) => SupervisorMsg::Fatal(e),
        };
        let last = !matches!(msg, SupervisorMsg::Route(_));
        if supervisor.cast(msg).is_err() || last {
            return;
        }
    }
}
