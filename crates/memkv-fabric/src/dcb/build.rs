//! Builders for dcbnl reply bytes in the kernel's layout, used by tests and as fuzz seeds.

use super::wire::{
    DCB_ATTR_IEEE, DCB_ATTR_IEEE_APP, DCB_ATTR_IEEE_APP_TABLE, DCB_ATTR_IEEE_PFC, DCB_ATTR_IFNAME,
    DCB_CMD_IEEE_GET, IEEE_8021QAZ_APP_SEL_DSCP, NLA_HDR_LEN, RTM_GETDCB, align4,
};

/// Encodes a DCB_CMD_IEEE_GET reply carrying `pfc_en` (if any) and DSCP app entries.
pub fn ieee_reply(ifname: &str, pfc_en: Option<u8>, dscp_to_prio: &[(u8, u8)]) -> Vec<u8> {
    let mut ieee = Vec::new();
    if let Some(en) = pfc_en {
        // struct ieee_pfc is 136 bytes on x86-64; only the first bytes matter here.
        let mut pfc = vec![0u8; 136];
        pfc[0] = 8;
        pfc[1] = en;
        push_nla(&mut ieee, DCB_ATTR_IEEE_PFC, &pfc);
    }
    let mut table = Vec::new();
    for (dscp, prio) in dscp_to_prio {
        let mut app = vec![IEEE_8021QAZ_APP_SEL_DSCP, *prio];
        app.extend_from_slice(&u16::from(*dscp).to_ne_bytes());
        push_nla(&mut table, DCB_ATTR_IEEE_APP, &app);
    }
    push_nla(&mut ieee, DCB_ATTR_IEEE_APP_TABLE, &table);
    let mut name = ifname.as_bytes().to_vec();
    name.push(0);
    let mut payload = vec![0, DCB_CMD_IEEE_GET, 0, 0];
    push_nla(&mut payload, DCB_ATTR_IFNAME, &name);
    push_nla(&mut payload, DCB_ATTR_IEEE, &ieee);
    frame(RTM_GETDCB, &payload)
}

/// Encodes an NLMSG_ERROR reply carrying `-errno`.
pub fn error_reply(errno: i32) -> Vec<u8> {
    let mut payload = (-errno).to_ne_bytes().to_vec();
    payload.extend_from_slice(&[0u8; 16]);
    frame(2, &payload)
}

pub fn push_nla(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = NLA_HDR_LEN + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len() + (align4(len) - len), 0);
}

fn frame(message_type: u16, payload: &[u8]) -> Vec<u8> {
    let len = 16 + payload.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&message_type.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&1u32.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(payload);
    out
}
