//! Message and data types the actors exchange, and the registrar's input (the segment catalog).
//!
//! Actors talk only through the types in this module: see `messages` for who sends what to whom.

pub mod feed;
pub mod footer;
pub mod messages;
pub mod segment;
pub mod segment_log;
