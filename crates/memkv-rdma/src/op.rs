//! The one-sided operations memkv posts, with the names errors and metrics give them. Pure.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Write,
    Read,
}

impl Op {
    /// As errors and logs name it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "RDMA WRITE",
            Op::Read => "RDMA READ",
        }
    }

    /// As the `op` metric label names it.
    pub fn label(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
        }
    }
}
