//! The fleet of registrars sharing a table, below the append that asks it: the lanes each node
//! sees in the table's snapshots and the turns it takes among them ([`lanes`]), the slot rules
//! those turns follow ([`slots`]), the intents through which a node that is not the committer
//! has its batch carried ([`intents`]), and the roll call through which a fleet that starts
//! together picks its committer before anyone commits ([`roll_call`]).

pub(crate) mod intents;
pub(crate) mod lanes;
pub(crate) mod roll_call;
pub(crate) mod slots;
