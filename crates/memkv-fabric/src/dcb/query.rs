//! Asks the kernel for a netdev's IEEE DCB configuration over rtnetlink.

use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant};

use super::select::{DcbDetection, select_lossless_class};
use super::wire::{DcbReply, encode_ieee_get, parse_dcb_reply};

/// Largest reply accepted; dcbnl replies fit in one page, so this is generous.
const REPLY_CAPACITY: usize = 64 * 1024;
/// rtnetlink answers within the send call; this only bounds a misbehaving kernel.
const REPLY_DEADLINE: Duration = Duration::from_secs(2);

/// Where DCB facts come from: the kernel, or (in tests) a labelled test double.
pub trait DcbSource {
    fn detect(&self, netdev: &str) -> DcbDetection;
}

/// The real source: one RTM_GETDCB / DCB_CMD_IEEE_GET request per call.
#[derive(Debug, Clone, Copy, Default)]
pub struct NetlinkDcb;

impl DcbSource for NetlinkDcb {
    fn detect(&self, netdev: &str) -> DcbDetection {
        let port = dcb_netdev(Path::new(SYSFS_NET), netdev);
        match query_ieee_dcb(&port) {
            Ok(reply) => interpret_reply(&port, reply),
            Err(reason) => DcbDetection::Failed { reason },
        }
    }
}

/// The real sysfs netdev class directory.
pub const SYSFS_NET: &str = "/sys/class/net";

/// The netdev whose DCB (PFC, ETS, ECN) carries `netdev`'s traffic: a VLAN's one lower
/// device (`lower_<dev>` in `class_net/<netdev>`), where the port's lossless class is
/// configured (`mlnx_qos -i <port>`; a VLAN device has no dcbnl of its own, so asking it
/// gets "not supported"); otherwise `netdev` itself (a bond's several lower devices are not
/// one port).
pub fn dcb_netdev(class_net: &Path, netdev: &str) -> String {
    let lower: Vec<String> = crate::doctor::host::list_dir(&class_net.join(netdev))
        .into_iter()
        .filter_map(|e| e.strip_prefix("lower_").map(str::to_owned))
        .collect();
    match <[String; 1]>::try_from(lower) {
        Ok([one]) => one,
        Err(_) => netdev.to_owned(),
    }
}

/// Turns a parsed kernel reply into a detection result.
pub fn interpret_reply(netdev: &str, reply: DcbReply) -> DcbDetection {
    match reply {
        DcbReply::Ieee(dcb) => select_lossless_class(&dcb),
        DcbReply::KernelError(errno) if errno == libc::EOPNOTSUPP => DcbDetection::NotSupported {
            netdev: netdev.to_owned(),
        },
        DcbReply::KernelError(errno) if errno == libc::ENODEV => DcbDetection::Failed {
            reason: format!("no netdev named {netdev}"),
        },
        DcbReply::KernelError(errno) => DcbDetection::Failed {
            reason: std::io::Error::from_raw_os_error(errno).to_string(),
        },
    }
}

/// Sends one DCB_CMD_IEEE_GET for `ifname` and returns the parsed reply.
pub fn query_ieee_dcb(ifname: &str) -> Result<DcbReply, String> {
    let request = encode_ieee_get(ifname, 1)?;
    let socket = crate::route_socket::send_route_request(&request)?;
    let deadline = Instant::now() + REPLY_DEADLINE;
    let mut buf = Vec::with_capacity(REPLY_CAPACITY);
    loop {
        match socket.recv(&mut buf, 0) {
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("netlink recv: {e}")),
        }
    }
    parse_dcb_reply(&buf).map_err(|e| e.to_string())
}
