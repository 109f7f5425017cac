//! Signing the admin API's state-changing requests (`POST /v1/drives/...`) with the shared
//! auth key, so that only holders of the key change a server, from anywhere, over HTTP or
//! HTTPS alike. The header `x-memkv-auth: v1 <unix seconds> <nonce> <hex HMAC-SHA256>` MACs
//! the method, path, time, a fresh 16-byte nonce (32 hex digits) and the body under a key
//! derived from the auth key for this use alone. A server accepts a signature within
//! [`ADMIN_AUTH_WINDOW_SECS`] of its own clock, and each signature once (it remembers those it
//! accepted for longer than that), so a captured request cannot be replayed; the nonce lets a
//! client send the same request twice in one second.

use crate::auth::{AuthKey, hmac_parts, keyed};

/// The request header that carries the signature.
pub const ADMIN_AUTH_HEADER: &str = "x-memkv-auth";
/// How far a signature's time may be from the server's clock, either way.
pub const ADMIN_AUTH_WINDOW_SECS: u64 = 60;

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminAuthError {
    #[error(
        "the request is not signed (header {ADMIN_AUTH_HEADER} missing); state-changing admin requests need the auth key"
    )]
    Missing,
    #[error(
        "header {ADMIN_AUTH_HEADER} is malformed: expected \"v1 <unix seconds> <32 hex digits> <64 hex digits>\""
    )]
    Malformed,
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

fn mac(
    key: &AuthKey,
    method: &str,
    path: &str,
    unix_secs: u64,
    nonce: &[u8; ADMIN_NONCE_LEN],
    body: &[u8],
) -> [u8; 32] {
    let admin_key = hmac_parts(&keyed(key.as_bytes()), &[b"memkv admin request key v1"]);
    hmac_parts(
        &keyed(&admin_key),
        &[
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

/// The header value that signs `method path` with `body` at `unix_secs`; `nonce` must be
/// drawn afresh from a random source for each request.
pub fn sign_admin_request(
    key: &AuthKey,
    method: &str,
    path: &str,
    unix_secs: u64,
    nonce: [u8; ADMIN_NONCE_LEN],
    body: &[u8],
) -> String {
    let tag = mac(key, method, path, unix_secs, &nonce, body);
    format!("v1 {unix_secs} {} {}", hex(&nonce), hex(&tag))
}

/// Checks `header` (the value of [`ADMIN_AUTH_HEADER`], if present) against the request, at
/// the server's time `now_secs`. Constant-time in the MAC comparison.
pub fn verify_admin_request(
    key: &AuthKey,
    header: Option<&str>,
    method: &str,
    path: &str,
    now_secs: u64,
    body: &[u8],
) -> Result<AdminSignature, AdminAuthError> {
    let header = header.ok_or(AdminAuthError::Missing)?;
    let mut parts = header.split_ascii_whitespace();
    let (Some("v1"), Some(secs), Some(nonce), Some(tag), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(AdminAuthError::Malformed);
    };
    let unix_secs: u64 = secs.parse().map_err(|_| AdminAuthError::Malformed)?;
    let nonce = decode_hex::<ADMIN_NONCE_LEN>(nonce).ok_or(AdminAuthError::Malformed)?;
    let given = decode_hex::<32>(tag).ok_or(AdminAuthError::Malformed)?;
    let skew_secs = now_secs.abs_diff(unix_secs);
    if skew_secs > ADMIN_AUTH_WINDOW_SECS {
        return Err(AdminAuthError::Stale { skew_secs });
    }
    let expected = mac(key, method, path, unix_secs, &nonce, body);
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

    #[test]
    fn a_signed_request_verifies_once_signed_with_the_same_key() {
        let header = sign_admin_request(&key(1), "POST", PATH, 1_000, [7; 16], BODY);
        assert!(verify_admin_request(&key(1), Some(&header), "POST", PATH, 1_030, BODY).is_ok());
        assert_eq!(
            verify_admin_request(&key(2), Some(&header), "POST", PATH, 1_000, BODY),
            Err(AdminAuthError::Mismatch)
        );
    }

    #[test]
    fn any_change_to_the_request_breaks_the_signature() {
        let header = sign_admin_request(&key(1), "POST", PATH, 1_000, [7; 16], BODY);
        let check = |method, path, body: &[u8]| {
            verify_admin_request(&key(1), Some(&header), method, path, 1_000, body)
        };
        assert_eq!(
            check("POST", "/v1/drives/add", BODY),
            Err(AdminAuthError::Mismatch)
        );
        assert_eq!(check("PUT", PATH, BODY), Err(AdminAuthError::Mismatch));
        assert_eq!(check("POST", PATH, b"{}"), Err(AdminAuthError::Mismatch));
        let later = header.replacen("1000", "1001", 1);
        assert_eq!(
            verify_admin_request(&key(1), Some(&later), "POST", PATH, 1_000, BODY),
            Err(AdminAuthError::Mismatch)
        );
    }

    #[test]
    fn the_same_request_signed_twice_gives_two_signatures() {
        let a = sign_admin_request(&key(1), "POST", PATH, 1_000, [1; 16], BODY);
        let b = sign_admin_request(&key(1), "POST", PATH, 1_000, [2; 16], BODY);
        assert_ne!(a, b);
        let check = |h: &str| verify_admin_request(&key(1), Some(h), "POST", PATH, 1_000, BODY);
        assert_ne!(check(&a).unwrap(), check(&b).unwrap());
    }

    #[test]
    fn missing_malformed_and_stale_signatures_are_named() {
        let verify =
            |h: Option<&str>, now| verify_admin_request(&key(1), h, "POST", PATH, now, BODY);
        assert_eq!(verify(None, 0), Err(AdminAuthError::Missing));
        assert_eq!(verify(Some("v2 1 00"), 0), Err(AdminAuthError::Malformed));
        assert_eq!(verify(Some("v1 x abc"), 0), Err(AdminAuthError::Malformed));
        assert_eq!(
            verify(Some("v1 1 00 00"), 0),
            Err(AdminAuthError::Malformed)
        );
        let header = sign_admin_request(&key(1), "POST", PATH, 1_000, [7; 16], BODY);
        assert_eq!(
            verify(Some(&header), 1_000 + ADMIN_AUTH_WINDOW_SECS + 1),
            Err(AdminAuthError::Stale {
                skew_secs: ADMIN_AUTH_WINDOW_SECS + 1
            })
        );
        assert!(verify(Some(&header), 1_000 - ADMIN_AUTH_WINDOW_SECS).is_ok());
    }
}
