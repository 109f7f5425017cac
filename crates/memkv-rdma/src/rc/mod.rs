//! Reliable-connected transport: the verbs of one queue pair (`verbs`), its shared state and
//! what the completion thread sees of it (`pair`), and its operations (`ops`). The public
//! handle is [`crate::RcQueuePair`] in `qp`.

pub(crate) mod ops;
pub(crate) mod pair;
pub(crate) mod verbs;
