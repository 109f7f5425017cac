//! Signing the admin API's state-changing requests (`POST /v1/drives/...`) with the shared
//! auth key, so that only holders of the key change a server, from anywhere, over HTTP or
//! HTTPS alike. The header is
//! `x-memkv-auth: v2 <instance> <unix seconds> <nonce> <hex HMAC-SHA256>`; the MAC covers the
//! server instance, method, path, time, a fresh 16-byte nonce (32 hex digits) and the body
//! under a key derived from the auth key for this use alone.
//!
//! The instance (32 hex digits) is drawn at random by each server when it starts and shown in
//! its `GET /v1/status`; a client reads it before signing. Servers of a fleet share one key,
//! so a signature that named no server would be good on all of them, and a server remembers
//! only the signatures it accepted itself, and only until it restarts. Naming the instance
//! makes a signature good for one server, one run: a server accepts a signature within
//! [`ADMIN_AUTH_WINDOW_SECS`] of its own clock, made for its own instance, and each signature
//! once (it remembers those it accepted for longer than that), so a captured request can be
//! replayed neither to it, nor to another server, nor to it after a restart. The nonce lets a
//! client send the same request twice in one second.

use crate::auth::{AuthKey, hmac_parts, keyed};

/// The request header that carries the signature.
pub const ADMIN_AUTH_HEADER: &str = "x-memkv-auth";
/// How far a signature's time may be from the server's clock, either way.
pub const ADMIN_AUTH_WINDOW_SECS: u64 = 60;
/// The header's version: the first word of its value.
pub const ADMIN_AUTH_VERSION: &str = "v2";
/// Bytes of a server's instance id (shown as twice as many hex digits).
pub const ADMIN_INSTANCE_LEN: usize = 16;

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminAuthError {
    #[error(
        "the request is not signed (header {ADMIN_AUTH_HEADER} missing); state-changing admin requests need the auth key"
    )]
    Missing,
    #[error(
        "header {ADMIN_AUTH_HEADER} is malformed: expected \"v2 <32 hex digits: server instance> <unix seconds> <32 hex digits> <64 hex digits>\""
    )]
    Malformed,
    #[error(
        "header {ADMIN_AUTH_HEADER} is version v1, which names no server instance: the client is older than the server; upgrade memkv on the client"
    )]
    ClientTooOld,
    #[error(
        "the request was signed for server instance {signed_for}, and this server is instance {this}: it was meant for another server, or for this one before it restarted; read GET /v1/status again and sign afresh"
    )]
    OtherInstance { signed_for: String, this: String },
    #[error(
        "the signature's time is {skew_secs} s from the server's clock (limit {ADMIN_AUTH_WINDOW_SECS} s); check both clocks"
    )]
    Stale { skew_secs: u64 },
    #[error(
        "the signature does not match: the request was signed with another auth key, or altered"
    )]
    Mismatch,
}

/// A parsed and verified signature: its MAC, which the server remembers to refuse replays.
pub type AdminSignature = [u8; 32];

/// Bytes of the nonce a client draws afresh for each request.
pub const ADMIN_NONCE_LEN: usize = 16;

/// A server's instance id, as `GET /v1/status` shows it, from `random` drawn at its start.
pub fn admin_instance_id(random: [u8; ADMIN_INSTANCE_LEN]) -> String {
    hex(&random)
}

/// Whether `text` is an instance id as a server shows it: 32 lowercase hex digits.
pub fn is_admin_instance_id(text: &str) -> bool {
    text.len() == 2 * ADMIN_INSTANCE_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn mac(
    key: &AuthKey,
    instance: &str,
    method: &str,
    path: &str,
    unix_secs: u64,
    nonce: &[u8; ADMIN_NONCE_LEN],
    body: &[u8],
) -> [u8; 32] {
    // A key of its own for v2, so no v1 MAC can ever pass for a v2 one.
    let admin_key = hmac_parts(&keyed(key.as_bytes()), &[b"memkv admin request key v2"]);
    hmac_parts(
        &keyed(&admin_key),
        &[
            instance.as_bytes(),
            b"\n",
            method.as_bytes(),
            b"\n",
            path.as_bytes(),
            b"\n",
            unix_secs.to_string().as_bytes(),
            b"\n",
            nonce,
            b"\n",
            body,
        ],
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The header value that signs `method path` with `body` at `unix_secs`, for the server whose
/// `GET /v1/status` showed `instance`; `nonce` must be drawn afresh from a random source for
/// each request.
pub fn sign_admin_request(
    key: &AuthKey,
    instance: &str,
    method: &str,
    path: &str,
    unix_secs: u64,
    nonce: [u8; ADMIN_NONCE_LEN],
    body: &[u8],
) -> String {
    let tag = mac(key, instance, method, path, unix_secs, &nonce, body);
    format!(
        "{ADMIN_AUTH_VERSION} {instance} {unix_secs} {} {}",
        hex(&nonce),
        hex(&tag)
    )
}

/// Checks `header` (the value of [`ADMIN_AUTH_HEADER`], if present) against the request, at
/// the server's time `now_secs`, for the server whose instance id is `instance`.
/// Constant-time in the MAC comparison.
pub fn verify_admin_request(
    key: &AuthKey,
    instance: &str,
    header: Option<&str>,
    method: &str,
    path: &str,
    now_secs: u64,
    body: &[u8],
) -> Result<AdminSignature, AdminAuthError> {
    let header = header.ok_or(AdminAuthError::Missing)?;
    let mut parts = header.split_ascii_whitespace();
    match parts.next() {
        Some(ADMIN_AUTH_VERSION) => {}
        Some("v1") => return Err(AdminAuthError::ClientTooOld),
        _ => return Err(AdminAuthError::Malformed),
    }
    let (Some(signed_for), Some(secs), Some(nonce), Some(tag), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(AdminAuthError::Malformed);
    };
    if !is_admin_instance_id(signed_for) {
        return Err(AdminAuthError::Malformed);
    }
    let unix_secs: u64 = secs.parse().map_err(|_| AdminAuthError::Malformed)?;
    let nonce = decode_hex::<ADMIN_NONCE_LEN>(nonce).ok_or(AdminAuthError::Malformed)?;
    let given = decode_hex::<32>(tag).ok_or(AdminAuthError::Malformed)?;
    if signed_for != instance {
        return Err(AdminAuthError::OtherInstance {
            signed_for: signed_for.to_owned(),
            this: instance.to_owned(),
        });
    }
    let skew_secs = now_secs.abs_diff(unix_secs);
    if skew_secs > ADMIN_AUTH_WINDOW_SECS {
        return Err(AdminAuthError::Stale { skew_secs });
    }
    let expected = mac(key, instance, method, path, unix_secs, &nonce, body);
    let differs = expected
        .iter()
        .zip(given.iter())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differs != 0 {
        return Err(AdminAuthError::Mismatch);
    }
    Ok(expected)
}

fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> AuthKey {
        AuthKey::from_bytes([byte; 32])
    }

    const PATH: &str = "/v1/drives/remove";
    const BODY: &[u8] = br#"{"media":"/dev/nvme1n1"}"#;
    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";

    fn sign(key_byte: u8, instance: &str, secs: u64, nonce: u8) -> String {
        sign_admin_request(
            &key(key_byte),
            instance,
            "POST",
            PATH,
            secs,
            [nonce; 16],
            BODY,
        )
    }

    #[test]
    fn a_signed_request_verifies_once_signed_with_the_same_key() {
        let header = sign(1, A, 1_000, 7);
        assert!(header.starts_with("v2 "), "{header}");
        assert!(verify_admin_request(&key(1), A, Some(&header), "POST", PATH, 1_030, BODY).is_ok());
        assert_eq!(
            verify_admin_request(&key(2), A, Some(&header), "POST", PATH, 1_000, BODY),
            Err(AdminAuthError::Mismatch)
        );
    }

    #[test]
    fn a_request_signed_for_one_server_instance_is_refused_by_another() {
        let header = sign(1, A, 1_000, 7);
        assert_eq!(
            verify_admin_request(&key(1), B, Some(&header), "POST", PATH, 1_000, BODY),
            Err(AdminAuthError::OtherInstance {
                signed_for: A.into(),
                this: B.into()
            })
        );
        // Naming the other instance in the header does not help: the MAC covers it.
        let relabelled = header.replacen(A, B, 1);
        assert_eq!(
            verify_admin_request(&key(1), B, Some(&relabelled), "POST", PATH, 1_000, BODY),
            Err(AdminAuthError::Mismatch)
        );
    }

    #[test]
    fn a_v1_header_is_refused_as_a_client_older_than_the_server() {
        let v1 = format!("v1 1000 {} {}", "07".repeat(16), "00".repeat(32));
        let e = verify_admin_request(&key(1), A, Some(&v1), "POST", PATH, 1_000, BODY);
        assert_eq!(e, Err(AdminAuthError::ClientTooOld));
        assert!(e.unwrap_err().to_string().contains("older than the server"));
    }

    #[test]
    fn any_change_to_the_request_breaks_the_signature() {
        let header = sign(1, A, 1_000, 7);
        let check = |method, path, body: &[u8]| {
            verify_admin_request(&key(1), A, Some(&header), method, path, 1_000, body)
        };
        assert_eq!(
            check("POST", "/v1/drives/add", BODY),
            Err(AdminAuthError::Mismatch)
        );
        assert_eq!(check("PUT", PATH, BODY), Err(AdminAuthError::Mismatch));
        assert_eq!(check("POST", PATH, b"{}"), Err(AdminAuthError::Mismatch));
        let later = header.replacen(" 1000 ", " 1001 ", 1);
        assert_eq!(
            verify_admin_request(&key(1), A, Some(&later), "POST", PATH, 1_000, BODY),
            Err(AdminAuthError::Mismatch)
        );
    }

    #[test]
    fn the_same_request_signed_twice_gives_two_signatures() {
        let a = sign(1, A, 1_000, 1);
        let b = sign(1, A, 1_000, 2);
        assert_ne!(a, b);
        let check = |h: &str| verify_admin_request(&key(1), A, Some(h), "POST", PATH, 1_000, BODY);
        assert_ne!(check(&a).unwrap(), check(&b).unwrap());
    }

    #[test]
    fn missing_malformed_and_stale_signatures_are_named() {
        let verify =
            |h: Option<&str>, now| verify_admin_request(&key(1), A, h, "POST", PATH, now, BODY);
        assert_eq!(verify(None, 0), Err(AdminAuthError::Missing));
        assert_eq!(verify(Some("v3 1 00"), 0), Err(AdminAuthError::Malformed));
        assert_eq!(verify(Some("v2 x abc"), 0), Err(AdminAuthError::Malformed));
        assert_eq!(
            verify(Some(&format!("v2 {A} 1 00 00")), 0),
            Err(AdminAuthError::Malformed)
        );
        let header = sign(1, A, 1_000, 7);
        assert_eq!(
            verify(Some(&header), 1_000 + ADMIN_AUTH_WINDOW_SECS + 1),
            Err(AdminAuthError::Stale {
                skew_secs: ADMIN_AUTH_WINDOW_SECS + 1
            })
        );
        assert!(verify(Some(&header), 1_000 - ADMIN_AUTH_WINDOW_SECS).is_ok());
    }

    #[test]
    fn instance_ids_are_32_lowercase_hex_digits() {
        let id = admin_instance_id([0xab; ADMIN_INSTANCE_LEN]);
        assert_eq!(id, "ab".repeat(16));
        assert!(is_admin_instance_id(&id));
        for bad in [
            "",
            "ab",
            &"AB".repeat(16),
            &"ag".repeat(16),
            &"ab".repeat(17),
        ] {
            assert!(!is_admin_instance_id(bad), "{bad}");
        }
    }
}
