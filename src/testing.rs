//! Names the project's own tests and benchmarks use, re-exported from where they live. Not part
//! of the API (hidden from the docs); nothing in the crate imports this module.

/// The test seams a committer calls (`Tuning::hooks`); production code never sets them.
pub use crate::actors::hooks::{BeforeAppend, Clock, Hooks};
/// How a commit's answer is taken (`catalog::rest::answer`), for the benchmarks.
pub use crate::catalog::rest::answer::{Refs, adopt, refs_of};
