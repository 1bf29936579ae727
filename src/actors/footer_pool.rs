//! The footer reader pool: N reader actors and a dispatcher that hands each request to an idle
//! reader, so at most N footers are read at once and a slow object never blocks the others.

use std::collections::VecDeque;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::HandlerResult;
use crate::actors::context::SharedContext;
use crate::io::footer::read_footer;
use crate::protocol::messages::{CommitterMsg, FooterPoolMsg, FooterReaderMsg, FooterRequest};
use crate::runtime::retry::{Op, retry_transient};

pub(crate) struct FooterPool;

pub(crate) struct PoolState {
    idle: Vec<usize>,
    readers: Vec<ActorRef<FooterReaderMsg>>,
    queue: VecDeque<FooterRequest>,
}

impl Actor for FooterPool {
    type Msg = FooterPoolMsg;
    type State = PoolState;
    type Arguments = SharedContext;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        ctx: SharedContext,
    ) -> Result<PoolState, ActorProcessingErr> {
        let n = ctx.footer_readers();
        let mut readers = Vec::with_capacity(n);
        for index in 0..n {
            let (reader, _) = Actor::spawn_linked(
                None,
                FooterReader,
                ReaderArgs {
                    index,
                    ctx: Arc::clone(&ctx),
                    pool: myself.clone(),
                },
                myself.get_cell(),
            )
            .await?;
            readers.push(reader);
        }
        Ok(PoolState {
            idle: (0..n).rev().collect(),
            readers,
            queue: VecDeque::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: FooterPoolMsg,
        state: &mut PoolState,
    ) -> HandlerResult {
        match msg {
            FooterPoolMsg::Read(request) => state.queue.push_back(request),
            FooterPoolMsg::WorkerIdle(index) => state.idle.push(index),
        }
        while let (Some(_), Some(_)) = (state.idle.last(), state.queue.front()) {
            let (Some(index), Some(request)) = (state.idle.pop(), state.queue.pop_front()) else {
                break;
            };
            state.readers[index].cast(FooterReaderMsg::Read(request))?;
        }
        Ok(())
    }
}

/// One footer reader: reads one footer at a time, retrying transient faults with backoff.
pub(crate) struct FooterReader;

pub(crate) struct ReaderArgs {
    index: usize,
    ctx: SharedContext,
    pool: ActorRef<FooterPoolMsg>,
}

impl Actor for FooterReader {
    type Msg = FooterReaderMsg;
    type State = ReaderArgs;
    type Arguments = ReaderArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ReaderArgs,
    ) -> Result<ReaderArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: FooterReaderMsg,
        state: &mut ReaderArgs,
    ) -> HandlerResult {
        let FooterReaderMsg::Read(request) = msg;
        let ctx = &state.ctx;
        let mut shutdown = ctx.shutdown.clone();
        let started = std::time::Instant::now();
        let what = format!("reading the footer of {}", request.object_key);
        let result = retry_transient(Op::Footer, ctx.retry(), &mut shutdown, &what, None, || {
            read_footer(
                request.store.as_ref().unwrap_or(&ctx.store).as_ref(),
                &ctx.config.url.bucket,
                &request.object_key,
                request.file_size,
            )
        })
        .await;
        match result {
            Ok(Some(footer)) => {
                metrics::counter!("thadam_iceberg_footer_reads_total").increment(1);
                metrics::counter!("thadam_iceberg_footer_read_bytes_total")
                    .increment(footer.bytes_read);
                metrics::histogram!("thadam_iceberg_footer_read_duration_seconds")
                    .record(started.elapsed().as_secs_f64());
                reply(&request.reply_to, request.seq, Ok(Arc::new(footer)));
            }
            // Shutting down: the committer is stopping too; nothing to report.
            Ok(None) => {}
            Err(e) => reply(&request.reply_to, request.seq, Err(e)),
        }
        state.pool.cast(FooterPoolMsg::WorkerIdle(state.index))?;
        Ok(())
    }
}

fn reply(
    to: &ActorRef<CommitterMsg>,
    seq: u64,
    result: crate::error::Result<Arc<crate::protocol::footer::SegmentFooter>>,
) {
    // A committer that is gone has stopped with the service; its segment stays in the catalog.
    let _ = to.cast(CommitterMsg::FooterRead { seq, result });
}
