//! How one session moves bytes to its server: its own RC queue pair, or (when the server
//! answered Connect with its DC target) the rail's shared pool of DC initiators. Both take the
//! same batches of transfers; the rest of the client does not care which it has.

use std::sync::Arc;

use memkv_rdma::{
    DcPeer, DcSupport, DciPool, LentPieces, LocalMemory, QpOptions, RcQueuePair, RdmaDevice,
    RdmaError, SharedPieces, Transfer,
};

pub(crate) enum Channel {
    Rc(Arc<RcQueuePair>),
    Dc { pool: Arc<DciPool>, peer: DcPeer },
}

impl Channel {
    pub async fn write_batch<L: LocalMemory + ?Sized>(
        &self,
        local: &L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        match self {
            Channel::Rc(qp) => qp.write_batch(local, transfers).await,
            Channel::Dc { pool, peer } => pool.write_batch(peer, local, transfers).await,
        }
    }

    pub async fn read_batch<L: LocalMemory + ?Sized>(
        &self,
        local: &mut L,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        match self {
            Channel::Rc(qp) => qp.read_batch(local, transfers).await,
            Channel::Dc { pool, peer } => pool.read_batch(peer, local, transfers).await,
        }
    }

    pub async fn write_shared(
        &self,
        shared: &SharedPieces<'_>,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        match self {
            Channel::Rc(qp) => qp.write_shared(shared, transfers).await,
            Channel::Dc { pool, peer } => pool.write_shared(peer, shared, transfers).await,
        }
    }

    pub async fn read_lent(
        &self,
        lent: &mut LentPieces<'_>,
        transfers: &[Transfer],
    ) -> Result<(), RdmaError> {
        match self {
            Channel::Rc(qp) => qp.read_lent(lent, transfers).await,
            Channel::Dc { pool, peer } => pool.read_lent(peer, lent, transfers).await,
        }
    }

    /// A broken RC pair is rebuilt by a new Connect. A DC pool repairs its initiators itself,
    /// so it needs a new session only when every initiator is broken.
    pub fn is_broken(&self) -> bool {
        match self {
            Channel::Rc(qp) => qp.is_broken(),
            Channel::Dc { pool, .. } => pool.broken_dcis() >= pool.num_dcis(),
        }
    }

    /// Doorbells rung for this session alone; a DC pool's are counted once per rail.
    pub fn doorbells(&self) -> u64 {
        match self {
            Channel::Rc(qp) => qp.doorbells(),
            Channel::Dc { .. } => 0,
        }
    }

    /// "RC" or "DC", for reports.
    pub fn transport(&self) -> &'static str {
        match self {
            Channel::Rc(_) => "RC",
            Channel::Dc { .. } => "DC",
        }
    }
}

/// The rail's DC initiators when its device can do DC (mlx5); otherwise why not, and every
/// server gets an RC queue pair on this rail.
pub(crate) fn dci_pool(
    device: &Arc<RdmaDevice>,
    num_dcis: u32,
    options: QpOptions,
) -> std::result::Result<Arc<DciPool>, String> {
    if let DcSupport::Unsupported(why) = device.dc_support() {
        tracing::debug!(rail = device.name(), "DC not used ({why}); RC");
        return Err(why.to_string());
    }
    device
        .create_dci_pool(num_dcis, options)
        .map(Arc::new)
        .map_err(|e| {
            tracing::warn!(
                rail = device.name(),
                "DC initiators not created ({e}); using RC"
            );
            format!("DC initiators not created: {e}")
        })
}
