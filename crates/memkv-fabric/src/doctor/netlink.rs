//! The IPv4 neighbour table over rtnetlink (`RTM_GETNEIGH` dump): the same data as
//! `ip -4 neigh show`, with the exact NUD state bits (/proc/net/arp cannot tell NOARP apart).

use super::host::HostRoot;
use super::neigh::{Neighbour, format_mac};
use crate::dcb::wire::{align4, parse_nlas};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x01;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDR_LEN: usize = 16;
/// `struct ndmsg`: family, pad, pad16, ifindex, state, flags, type.
const NDMSG_LEN: usize = 12;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const AF_INET: u8 = 2;
/// A dump of a large table ends well within this; it only bounds a misbehaving kernel.
const DUMP_DEADLINE: Duration = Duration::from_secs(5);
/// Bounds the table, so a runaway dump cannot exhaust memory.
const MAX_ENTRIES: usize = 1 << 16;

/// Dumps the kernel's IPv4 neighbour table. Interface names come from `/sys/class/net/*/ifindex`.
pub fn ipv4_neighbours(root: &HostRoot) -> Result<Vec<Neighbour>, String> {
    let names = interface_names(root);
    let mut request = Vec::with_capacity(NLMSG_HDR_LEN + NDMSG_LEN);
    request.extend_from_slice(&((NLMSG_HDR_LEN + NDMSG_LEN) as u32).to_ne_bytes());
    request.extend_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    request.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    request.extend_from_slice(&1u32.to_ne_bytes());
    request.extend_from_slice(&0u32.to_ne_bytes());
    request.extend_from_slice(&[AF_INET, 0, 0, 0]);
    request.extend_from_slice(&[0u8; NDMSG_LEN - 4]);
    let socket = crate::route_socket::send_route_request(&request)?;
    let deadline = Instant::now() + DUMP_DEADLINE;
    let mut out = Vec::new();
    loop {
        let mut buf = Vec::with_capacity(64 * 1024);
        match socket.recv(&mut buf, 0) {
            Ok(_) => {
                if parse_dump_chunk(&buf, &names, &mut out)? {
                    return Ok(out);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("netlink recv: {e}")),
        }
        if out.len() > MAX_ENTRIES {
            return Err(format!(
                "neighbour table has more than {MAX_ENTRIES} entries"
            ));
        }
    }
}

fn interface_names(root: &HostRoot) -> HashMap<i32, String> {
    root.list("/sys/class/net")
        .into_iter()
        .filter_map(|name| {
            let index = root
                .read(&format!("/sys/class/net/{name}/ifindex"))?
                .parse::<i32>()
                .ok()?;
            Some((index, name))
        })
        .collect()
}

/// Parses the messages of one `recv`; true once `NLMSG_DONE` arrives. Never panics.
pub fn parse_dump_chunk(
    mut bytes: &[u8],
    names: &HashMap<i32, String>,
    out: &mut Vec<Neighbour>,
) -> Result<bool, String> {
    while bytes.len() >= NLMSG_HDR_LEN {
        let len = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
        if len < NLMSG_HDR_LEN || len > bytes.len() {
            return Err("netlink message length outside its buffer".into());
        }
        let payload = &bytes[NLMSG_HDR_LEN..len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = payload
                    .get(..4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .unwrap_or(0);
                if errno != 0 {
                    // The kernel sends a negated errno; i32::MIN has no positive counterpart,
                    // and negating it would panic.
                    return Err(match errno.checked_neg() {
                        Some(code) => {
                            format!("RTM_GETNEIGH: {}", std::io::Error::from_raw_os_error(code))
                        }
                        None => format!("RTM_GETNEIGH: malformed error code {errno}"),
                    });
                }
            }
            RTM_NEWNEIGH => {
                if let Some(n) = parse_ndmsg(payload, names)? {
                    out.push(n);
                }
            }
            _ => {}
        }
        bytes = &bytes[align4(len).min(bytes.len())..];
    }
    Ok(false)
}

fn parse_ndmsg(payload: &[u8], names: &HashMap<i32, String>) -> Result<Option<Neighbour>, String> {
    if payload.len() < NDMSG_LEN {
        return Err("neighbour message shorter than struct ndmsg".into());
    }
    if payload[0] != AF_INET {
        return Ok(None);
    }
    let ifindex = i32::from_ne_bytes([payload[4], payload[5], payload[6], payload[7]]);
    let state = u16::from_ne_bytes([payload[8], payload[9]]);
    let attrs = parse_nlas(&payload[NDMSG_LEN..]).map_err(|e| e.to_string())?;
    let Some(ip) = attrs
        .iter()
        .find(|a| a.kind == NDA_DST)
        .and_then(|a| <[u8; 4]>::try_from(a.value.as_slice()).ok())
        .map(Ipv4Addr::from)
    else {
        return Ok(None);
    };
    let mac = attrs
        .iter()
        .find(|a| a.kind == NDA_LLADDR && !a.value.is_empty())
        .map(|a| format_mac(&a.value));
    let dev = names
        .get(&ifindex)
        .cloned()
        .unwrap_or_else(|| format!("if{ifindex}"));
    Ok(Some(Neighbour {
        ip,
        dev,
        mac,
        state,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcb::build::push_nla;

    fn neigh_message(ifindex: i32, state: u16, ip: [u8; 4], mac: &[u8]) -> Vec<u8> {
        let mut payload = vec![AF_INET, 0, 0, 0];
        payload.extend_from_slice(&ifindex.to_ne_bytes());
        payload.extend_from_slice(&state.to_ne_bytes());
        payload.extend_from_slice(&[0, 1]);
        push_nla(&mut payload, NDA_DST, &ip);
        push_nla(&mut payload, NDA_LLADDR, mac);
        let mut msg = ((NLMSG_HDR_LEN + payload.len()) as u32)
            .to_ne_bytes()
            .to_vec();
        msg.extend_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        msg.extend_from_slice(&[0u8; 10]);
        msg.extend_from_slice(&payload);
        msg
    }

    #[test]
    fn a_dump_parses_entries_until_done() {
        let names = HashMap::from([(3, "vethA".to_owned())]);
        let mut bytes = neigh_message(3, 0x80, [192, 0, 2, 2], &[2, 0, 0, 0, 0, 1]);
        let mut done = 16u32.to_ne_bytes().to_vec();
        done.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        done.extend_from_slice(&[0u8; 10]);
        bytes.extend_from_slice(&done);
        let mut out = Vec::new();
        assert!(parse_dump_chunk(&bytes, &names, &mut out).unwrap());
        assert_eq!(
            out[0].to_string(),
            "192.0.2.2 dev vethA lladdr 02:00:00:00:00:01 PERMANENT"
        );
    }

    /// The proptest below rarely draws this errno: negating it overflows.
    #[test]
    fn an_error_reply_with_errno_i32_min_is_an_error_not_a_panic() {
        let mut msg = ((NLMSG_HDR_LEN + 4) as u32).to_ne_bytes().to_vec();
        msg.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        msg.extend_from_slice(&[0u8; 10]);
        msg.extend_from_slice(&i32::MIN.to_ne_bytes());
        let result = std::panic::catch_unwind(|| {
            let mut out = Vec::new();
            parse_dump_chunk(&msg, &HashMap::new(), &mut out)
        });
        assert!(
            matches!(result, Ok(Err(_))),
            "the decoder panicked or accepted the reply: {result:?}"
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut out = Vec::new();
            let _ = parse_dump_chunk(&bytes, &HashMap::new(), &mut out);
        }
    }
}
