//! DCB (IEEE 802.1Qaz) detection for RoCEv2 ports over rtnetlink dcbnl.

pub mod build;
pub mod query;
pub mod select;
pub mod wire;

pub use query::{DcbSource, NetlinkDcb, SYSFS_NET, dcb_netdev, interpret_reply, query_ieee_dcb};
pub use select::{DcbDetection, select_lossless_class};
pub use wire::{DcbApp, DcbParseError, DcbReply, IeeeDcb, parse_dcb_reply};
