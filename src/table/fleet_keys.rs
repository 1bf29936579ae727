//! The snapshot summary keys a fleet of registrars on one table reads and writes, in one place:
//! the pacing reads lanes and slots from them, the producer writes them, snapshot retention reads
//! what a carrying snapshot carried. (The keys of exactly-once itself, segment ids and
//! watermarks, are `table::committed`'s.)

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
