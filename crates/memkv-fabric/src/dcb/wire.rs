//! The dcbnl rtnetlink message (`struct dcbmsg` + attributes), encoded and parsed by hand:
//! netlink-packet-core handles the netlink header and NLMSG_ERROR, this handles the payload.

use netlink_packet_core::{
    NLM_F_REQUEST, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    NetlinkSerializable,
};
use serde::Serialize;
use thiserror::Error;

/// rtnetlink message types for DCB (linux/rtnetlink.h).
pub const RTM_GETDCB: u16 = 78;
/// dcbnl command: read the IEEE 802.1Qaz configuration (linux/dcbnl.h).
pub const DCB_CMD_IEEE_GET: u8 = 21;
/// Top-level attributes.
pub const DCB_ATTR_IFNAME: u16 = 1;
pub const DCB_ATTR_IEEE: u16 = 13;
/// Attributes nested in DCB_ATTR_IEEE.
pub const DCB_ATTR_IEEE_PFC: u16 = 2;
pub const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
/// Entry type nested in DCB_ATTR_IEEE_APP_TABLE.
pub const DCB_ATTR_IEEE_APP: u16 = 1;
/// `dcb_app.selector` for DSCP-to-priority entries.
pub const IEEE_8021QAZ_APP_SEL_DSCP: u8 = 5;
/// Netlink attribute type bits that are flags, not part of the type.
const NLA_TYPE_MASK: u16 = 0x3fff;
/// `IFNAMSIZ` includes the terminating NUL.
const IFNAMSIZ: usize = 16;
const DCBMSG_LEN: usize = 4;
pub const NLA_HDR_LEN: usize = 4;

/// One application-priority entry (`struct dcb_app`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DcbApp {
    pub selector: u8,
    pub priority: u8,
    /// For the DSCP selector, the DSCP value.
    pub protocol: u16,
}

/// The parts of the IEEE 802.1Qaz configuration memkv uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IeeeDcb {
    /// PFC enable bitmask, bit N = priority N; None when the reply carried no PFC attribute.
    pub pfc_enabled: Option<u8>,
    pub apps: Vec<DcbApp>,
}

impl IeeeDcb {
    /// DSCP-to-priority entries.
    pub fn dscp_map(&self) -> impl Iterator<Item = (u8, u8)> + '_ {
        self.apps
            .iter()
            .filter(|a| {
                a.selector == IEEE_8021QAZ_APP_SEL_DSCP && a.protocol < 64 && a.priority < 8
            })
            .map(|a| (a.protocol as u8, a.priority))
    }
}

/// What the kernel answered to DCB_CMD_IEEE_GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DcbReply {
    Ieee(IeeeDcb),
    /// NLMSG_ERROR with this (positive) errno, e.g. EOPNOTSUPP for a netdev without DCB.
    KernelError(i32),
}

/// A reply that is not a well-formed dcbnl answer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DcbParseError {
    #[error("malformed netlink message: {0}")]
    Netlink(String),
    #[error("malformed dcbnl payload: {0}")]
    Payload(&'static str),
    #[error("unexpected reply: {0}")]
    Unexpected(String),
}

/// A netlink attribute as type + value bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nla {
    pub kind: u16,
    pub value: Vec<u8>,
}

/// `struct dcbmsg` and its attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcbMessage {
    pub family: u8,
    pub cmd: u8,
    pub attrs: Vec<Nla>,
}

pub fn align4(n: usize) -> usize {
    (n + 3) & !3
}

impl NetlinkSerializable for DcbMessage {
    fn message_type(&self) -> u16 {
        RTM_GETDCB
    }

    fn buffer_len(&self) -> usize {
        DCBMSG_LEN
            + self
                .attrs
                .iter()
                .map(|a| align4(NLA_HDR_LEN + a.value.len()))
                .sum::<usize>()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        buffer[..DCBMSG_LEN].copy_from_slice(&[self.family, self.cmd, 0, 0]);
        let mut at = DCBMSG_LEN;
        for attr in &self.attrs {
            let len = NLA_HDR_LEN + attr.value.len();
            buffer[at..at + 2].copy_from_slice(&(len as u16).to_ne_bytes());
            buffer[at + 2..at + 4].copy_from_slice(&attr.kind.to_ne_bytes());
            buffer[at + 4..at + len].copy_from_slice(&attr.value);
            buffer[at + len..at + align4(len)].fill(0);
            at += align4(len);
        }
    }
}

impl NetlinkDeserializable for DcbMessage {
    type Error = DcbParseError;

    fn deserialize(_header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        if payload.len() < DCBMSG_LEN {
            return Err(DcbParseError::Payload("shorter than struct dcbmsg"));
        }
        Ok(DcbMessage {
            family: payload[0],
            cmd: payload[1],
            attrs: parse_nlas(&payload[DCBMSG_LEN..])?,
        })
    }
}

/// Splits a run of netlink attributes. Lengths are checked against the bytes actually present.
pub fn parse_nlas(mut bytes: &[u8]) -> Result<Vec<Nla>, DcbParseError> {
    let mut out = Vec::new();
    while bytes.len() >= NLA_HDR_LEN {
        let len = u16::from_ne_bytes([bytes[0], bytes[1]]) as usize;
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDR_LEN || len > bytes.len() {
            return Err(DcbParseError::Payload(
                "attribute length outside its message",
            ));
        }
        out.push(Nla {
            kind,
            value: bytes[NLA_HDR_LEN..len].to_vec(),
        });
        bytes = &bytes[align4(len).min(bytes.len())..];
    }
    Ok(out)
}

/// Validates an interface name for DCB_ATTR_IFNAME.
pub fn check_ifname(ifname: &str) -> Result<(), String> {
    if ifname.is_empty() || ifname.len() >= IFNAMSIZ {
        return Err(format!(
            "interface name {:?} must be 1..={} bytes",
            ifname.chars().take(32).collect::<String>(),
            IFNAMSIZ - 1
        ));
    }
    if ifname
        .bytes()
        .any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace())
    {
        return Err(format!(
            "interface name {ifname:?} has a forbidden character"
        ));
    }
    Ok(())
}

/// Builds the complete RTM_GETDCB / DCB_CMD_IEEE_GET request for `ifname`.
pub fn encode_ieee_get(ifname: &str, sequence: u32) -> Result<Vec<u8>, String> {
    check_ifname(ifname)?;
    let mut name = ifname.as_bytes().to_vec();
    name.push(0);
    let inner = DcbMessage {
        family: 0,
        cmd: DCB_CMD_IEEE_GET,
        attrs: vec![Nla {
            kind: DCB_ATTR_IFNAME,
            value: name,
        }],
    };
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = sequence;
    let mut msg = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(inner));
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    Ok(buf)
}

/// Parses one kernel reply to [`encode_ieee_get`]. Never panics, whatever the bytes.
pub fn parse_dcb_reply(bytes: &[u8]) -> Result<DcbReply, DcbParseError> {
    let msg = NetlinkMessage::<DcbMessage>::deserialize(bytes)
        .map_err(|e| DcbParseError::Netlink(e.to_string()))?;
    match msg.payload {
        NetlinkPayload::Error(err) => match err.code {
            Some(code) => Ok(DcbReply::KernelError(
                code.get().checked_neg().unwrap_or(i32::MAX),
            )),
            None => Err(DcbParseError::Unexpected(
                "an ACK instead of DCB data".into(),
            )),
        },
        NetlinkPayload::InnerMessage(dcb) => {
            if msg.header.message_type != RTM_GETDCB || dcb.cmd != DCB_CMD_IEEE_GET {
                return Err(DcbParseError::Unexpected(format!(
                    "message type {} command {}",
                    msg.header.message_type, dcb.cmd
                )));
            }
            parse_ieee(&dcb.attrs).map(DcbReply::Ieee)
        }
        other => Err(DcbParseError::Unexpected(format!(
            "netlink control message {}",
            other.message_type()
        ))),
    }
}

fn parse_ieee(attrs: &[Nla]) -> Result<IeeeDcb, DcbParseError> {
    let mut out = IeeeDcb::default();
    let Some(ieee) = attrs.iter().find(|a| a.kind == DCB_ATTR_IEEE) else {
        return Ok(out);
    };
    for attr in parse_nlas(&ieee.value)? {
        match attr.kind {
            // struct ieee_pfc { u8 pfc_cap; u8 pfc_en; ... }
            DCB_ATTR_IEEE_PFC => {
                let en = attr
                    .value
                    .get(1)
                    .ok_or(DcbParseError::Payload("PFC attribute shorter than 2 bytes"))?;
                out.pfc_enabled = Some(*en);
            }
            DCB_ATTR_IEEE_APP_TABLE => {
                for app in parse_nlas(&attr.value)? {
                    if app.kind != DCB_ATTR_IEEE_APP {
                        continue;
                    }
                    let [selector, priority, p0, p1] = app.value[..] else {
                        return Err(DcbParseError::Payload("dcb_app entry is not 4 bytes"));
                    };
                    out.apps.push(DcbApp {
                        selector,
                        priority,
                        protocol: u16::from_ne_bytes([p0, p1]),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcb::build;
    use proptest::prelude::*;

    #[test]
    fn request_has_header_dcbmsg_and_ifname() {
        let req = encode_ieee_get("lo", 7).unwrap();
        assert_eq!(req.len(), 16 + 4 + 8);
        assert_eq!(u32::from_ne_bytes(req[0..4].try_into().unwrap()), 28);
        assert_eq!(
            u16::from_ne_bytes(req[4..6].try_into().unwrap()),
            RTM_GETDCB
        );
        assert_eq!(
            u16::from_ne_bytes(req[6..8].try_into().unwrap()),
            NLM_F_REQUEST
        );
        assert_eq!(u32::from_ne_bytes(req[8..12].try_into().unwrap()), 7);
        assert_eq!(&req[16..20], &[0, DCB_CMD_IEEE_GET, 0, 0]);
        assert_eq!(u16::from_ne_bytes(req[20..22].try_into().unwrap()), 7);
        assert_eq!(
            u16::from_ne_bytes(req[22..24].try_into().unwrap()),
            DCB_ATTR_IFNAME
        );
        assert_eq!(&req[24..27], b"lo\0");
    }

    #[test]
    fn bad_interface_names_are_refused() {
        assert!(encode_ieee_get("", 1).is_err());
        assert!(encode_ieee_get("a-name-far-too-long", 1).is_err());
        assert!(encode_ieee_get("a/b", 1).is_err());
    }

    #[test]
    fn reply_with_pfc_and_apps_parses() {
        let bytes = build::ieee_reply("eth0", Some(0b1000), &[(26, 3), (48, 6)]);
        let DcbReply::Ieee(dcb) = parse_dcb_reply(&bytes).unwrap() else {
            panic!("expected DCB data");
        };
        assert_eq!(dcb.pfc_enabled, Some(0b1000));
        assert_eq!(dcb.dscp_map().collect::<Vec<_>>(), vec![(26, 3), (48, 6)]);
    }

    #[test]
    fn error_reply_yields_positive_errno() {
        let bytes = build::error_reply(libc::EOPNOTSUPP);
        assert_eq!(
            parse_dcb_reply(&bytes),
            Ok(DcbReply::KernelError(libc::EOPNOTSUPP))
        );
    }

    #[test]
    fn truncated_and_lying_lengths_are_errors() {
        let bytes = build::ieee_reply("eth0", Some(8), &[(26, 3)]);
        for cut in [0, 3, 15, 17, 19] {
            assert!(parse_dcb_reply(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_nla = bytes.clone();
        bad_nla[20] = 0xff; // IFNAME attribute claims 255 bytes
        assert!(parse_dcb_reply(&bad_nla).is_err());
        let mut short_app = build::ieee_reply("eth0", None, &[]);
        // Append a 3-byte app entry inside a fresh table by rebuilding by hand.
        let mut table = Vec::new();
        build::push_nla(&mut table, DCB_ATTR_IEEE_APP, &[5, 3, 26]);
        let mut ieee = Vec::new();
        build::push_nla(&mut ieee, DCB_ATTR_IEEE_APP_TABLE, &table);
        let mut payload = vec![0, DCB_CMD_IEEE_GET, 0, 0];
        build::push_nla(&mut payload, DCB_ATTR_IEEE, &ieee);
        short_app.truncate(16);
        short_app.extend_from_slice(&payload);
        let len = short_app.len() as u32;
        short_app[0..4].copy_from_slice(&len.to_ne_bytes());
        assert_eq!(
            parse_dcb_reply(&short_app),
            Err(DcbParseError::Payload("dcb_app entry is not 4 bytes"))
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_dcb_reply(&bytes);
        }

        #[test]
        fn well_framed_messages_with_arbitrary_payloads_never_panic(
            message_type in prop_oneof![Just(1u16), Just(2), Just(3), Just(4), Just(RTM_GETDCB), any::<u16>()],
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let len = 16 + payload.len();
            let mut bytes = (len as u32).to_ne_bytes().to_vec();
            bytes.extend_from_slice(&message_type.to_ne_bytes());
            bytes.extend_from_slice(&[0u8; 10]);
            bytes.extend_from_slice(&payload);
            let _ = parse_dcb_reply(&bytes);
        }

        #[test]
        fn mutated_valid_replies_never_panic(
            flips in proptest::collection::vec((0usize..256, any::<u8>()), 1..8),
            cut in 0usize..256,
        ) {
            let mut bytes = build::ieee_reply("eth0", Some(8), &[(26, 3), (10, 1)]);
            for (at, val) in flips {
                let at = at % bytes.len();
                bytes[at] = val;
            }
            bytes.truncate(cut.max(16));
            let _ = parse_dcb_reply(&bytes);
        }
    }
}
