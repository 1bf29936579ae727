//! The registrar's input interface: anything that yields uploaded segments in catalog order.
//!
//! The file-backed segment catalog implements it ([`crate::protocol::segment_log::SegmentLogTail`]);
//! an embedding runtime that keeps its own catalog implements it too, or uses [`ChannelFeed`].
//!
//! A feed must replay every `Uploaded` entry it still holds each time the registrar starts: the
//! registrar keeps no cursor of its own and skips what the table already has, which is what makes a
//! crash anywhere harmless.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::error::Result;
use crate::protocol::segment::UploadedSegment;

#[async_trait]
pub trait SegmentFeed: Send + 'static {
    /// Waits for the next uploaded segment. `Ok(None)` means the feed has ended for good.
    async fn next(&mut self) -> Result<Option<UploadedSegment>>;

    /// Random access to what the feed holds, so that a table's watermark can be checked against
    /// the history it was written from (see `table::committed`). A feed without it (`None`, the
    /// default) promises that a `catalog_id` never reuses a `seq` for another record: its
    /// watermarks are trusted as they are.
    fn history(&self) -> Option<Arc<dyn SegmentHistory>> {
        None
    }
}

/// Looks up records of a segment catalog by sequence number.
pub trait SegmentHistory: Send + Sync + 'static {
    /// The `Uploaded` records at `seqs` in the catalog `catalog_id`, as it is now. A seq whose
    /// record is absent (past the end, another kind, another catalog id at this path) is left
    /// out of the map. Blocking: call it off the async threads.
    fn uploaded_at(&self, catalog_id: &str, seqs: &[u64]) -> Result<HashMap<u64, UploadedSegment>>;

    /// The latest `Uploaded` record of `dataset` for `object_key` after `seq` in the catalog
    /// `catalog_id`, if any: a re-ship that supersedes the record at `seq`. Blocking. The default
    /// knows of none (a feed without it supersedes only records it delivers in time).
    fn later_uploaded(
        &self,
        _catalog_id: &str,
        _dataset: &str,
        _object_key: &str,
        _seq: u64,
    ) -> Result<Option<UploadedSegment>> {
        Ok(None)
    }
}

/// A feed that an embedding runtime pushes into through a [`FeedSender`].
pub struct ChannelFeed {
    rx: mpsc::Receiver<UploadedSegment>,
}

/// The runtime's end of a [`ChannelFeed`]. Dropping every sender ends the feed.
#[derive(Clone)]
pub struct FeedSender {
    tx: mpsc::Sender<UploadedSegment>,
}

impl ChannelFeed {
    /// A bounded feed: `send` waits when the registrar is `capacity` segments behind.
    pub fn new(capacity: usize) -> (FeedSender, ChannelFeed) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (FeedSender { tx }, ChannelFeed { rx })
    }
}

impl FeedSender {
    /// Hands one uploaded segment to the registrar. Fails only when the registrar has stopped.
    pub async fn send(&self, segment: UploadedSegment) -> Result<()> {
        self.tx.send(segment).await.map_err(|_| {
            crate::error::Error::internal("the registrar has stopped; the segment was not taken")
        })
    }
}

#[async_trait]
impl SegmentFeed for ChannelFeed {
    async fn next(&mut self) -> Result<Option<UploadedSegment>> {
        Ok(self.rx.recv().await)
    }
}
