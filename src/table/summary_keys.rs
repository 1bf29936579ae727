//! The `thadam.*` keys the registrar writes into snapshot summaries and table properties, in one
//! place that everything below the append imports: what ties a snapshot to its segments and to
//! the watermark of its log (`table::committed`), and what a fleet of registrars on one table
//! reads of each other (`table::fleet`). The producer writes them; snapshot retention reads them.

// What a snapshot registered, and for which log.

/// Snapshot summary key: the segments this snapshot registered, as [`SegmentId`](crate::table::committed::SegmentId)s in base64,
/// 16 characters each, concatenated.
pub const SEGMENT_IDS: &str = "thadam.segment-ids";
/// Snapshot summary key: how many segments this snapshot registered (for people reading it).
pub const SEGMENT_COUNT: &str = "thadam.segments";
/// Snapshot summary key: the highest segment-catalog sequence number in this snapshot.
pub const CATALOG_SEQ: &str = "thadam.catalog-seq";
/// Snapshot summary key: which registrar (sink id and pipeline) wrote the snapshot.
pub const WRITER: &str = "thadam.writer";
/// Snapshot summary key: the watermark property ([`WATERMARK_PREFIX`]`...`) set in the same
/// commit, when one was. Snapshot retention expires a registrar snapshot only while that
/// property still covers its [`CATALOG_SEQ`] (see `table::retention`).
pub const WATERMARK_KEY: &str = "thadam.watermark";
/// Table property prefix of the per-catalog watermarks.
pub const WATERMARK_PREFIX: &str = "thadam.watermark.";

// The fleet (`table::fleet`).

/// The lane of the registrar that wrote the snapshot (a random id per committer, i.e. per
/// process and table), so that registrars sharing a table can count each other and take turns.
pub(crate) const LANE: &str = "thadam.lane";
/// The slot length that registrar needs (from its commit round trip), in ms: the fleet's slot
/// is the largest of them.
pub(crate) const SLOT_MS: &str = "thadam.slot-ms";
/// Written by a registrar with `commit.intents: false`: it commits only its own segments, so
/// the fleet never ranks it as the committer that carries everyone's.
pub(crate) const NO_INTENTS: &str = "thadam.no-intents";
/// The lanes of the nodes whose intents the snapshot carries (comma separated): a node that only
/// publishes never commits, and is known to the fleet by them.
pub(crate) const CARRIED_LANES: &str = "thadam.carried-lanes";
/// How many intents of other nodes the snapshot carried.
pub(crate) const CARRIED_INTENTS: &str = "thadam.carried-intents";
/// Per carried log, the watermark that covers its intents and the seq it must reach
/// (`committed::Guards`): snapshot retention expires such a snapshot only while each of them,
/// and its own, covers it.
pub(crate) const CARRIED_MARKS: &str = "thadam.carried-marks";
/// On a snapshot that consumed intents (carried other nodes', or registered its own published
/// segments itself): it took their data files by copy and names no intent's manifest in its
/// manifest list, so a `thadam-intent/1` manifest whose segments it holds may be deleted. The
/// releases before could name one (a manifest not read ahead went in as it was).
pub(crate) const INTENTS_COPIED: &str = "thadam.intents-copied";
