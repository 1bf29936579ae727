//! What one commit carries of the fleet's intents, and what it consumes of this node's own.

use std::collections::BTreeSet;
use std::sync::Arc;

use iceberg::spec::DataFile;
use object_store::path::Path as ObjectPath;

use super::record::Intent;
use crate::table::committed::{Guards, SegmentId};

/// One of this node's published intents, not yet known to be in the table. `seqs` follow the
/// intent's ids (and data files) one for one.
#[derive(Debug, Clone)]
pub(super) struct Published {
    pub key: ObjectPath,
    pub intent: Arc<Intent>,
    pub seqs: Vec<u64>,
}

/// What one commit carries besides the committer's own new files.
#[derive(Debug, Default, Clone)]
pub(crate) struct Carried {
    /// The data files of other nodes' intents that the table lacks: they go into the commit's
    /// own new manifest with its own new files (never a publisher's manifest as it is).
    pub files: Vec<DataFile>,
    /// The ids of their segments, encoded as in `thadam.segment-ids`.
    pub encoded_ids: String,
    pub ids: Vec<SegmentId>,
    /// Watermark properties raised for the publishers' logs.
    pub marks: Vec<(String, String)>,
    /// Per log of the intents carried: the watermark property that covers their segments once it
    /// reaches the highest of their seqs (an empty property: none ever does), for snapshot
    /// retention.
    pub guards: Guards,
    /// The lanes of the nodes whose intents it carries (`thadam.carried-lanes`): a node that only
    /// publishes is seen by the fleet through them (see `pacing`).
    pub lanes: BTreeSet<String>,
    /// The intents carried: key, when published (the publisher's clock).
    pub(super) keys: Vec<(ObjectPath, i64)>,
    /// The manifests of the `thadam-intent/1` intents carried, whose files the commit copied: no
    /// snapshot names them, and the carrier deletes them once its commit landed.
    pub(super) copied: Vec<String>,
    /// This node's intents whose segments the commit registers as its own new files: deleted
    /// once it landed (with their manifests, which no snapshot names).
    pub(super) withdrawn: Vec<Published>,
}

impl Carried {
    /// Whether it adds nothing to the commit.
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// How many intents of other nodes it carries.
    pub(crate) fn others(&self) -> usize {
        self.keys.len()
    }

    /// Whether the commit consumes intents (carries others', or registers this node's own
    /// published segments itself): its snapshot says it names no intent's manifest.
    pub(crate) fn consumes(&self) -> bool {
        !self.keys.is_empty() || !self.withdrawn.is_empty()
    }
}
