//! One-time LocalAttach tokens: minted on an authenticated connection, traded once on the
//! Unix socket within a few seconds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use memkv_proto::local::TOKEN_LEN;

/// How long a token may wait to be traded.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(10);
/// Tokens outstanding at once; a client trades its token at once, so more means abuse.
pub const MAX_OUTSTANDING: usize = 256;

pub type Token = [u8; TOKEN_LEN];

#[derive(Debug, Default)]
pub struct Tokens {
    minted: Mutex<HashMap<Token, Instant>>,
}

impl Tokens {
    /// A fresh token, or why none can be minted now.
    pub fn mint(&self, now: Instant) -> Result<Token, String> {
        let mut token = [0u8; TOKEN_LEN];
        getrandom::fill(&mut token).map_err(|e| format!("no random source for a token: {e}"))?;
        let mut minted = self.minted.lock().unwrap_or_else(|p| p.into_inner());
        minted.retain(|_, at| now.duration_since(*at) < TOKEN_LIFETIME);
        if minted.len() >= MAX_OUTSTANDING {
            return Err(format!(
                "{MAX_OUTSTANDING} LocalAttach tokens are outstanding (each lives {TOKEN_LIFETIME:?})"
            ));
        }
        minted.insert(token, now);
        Ok(token)
    }

    /// Takes `token` if it was minted and has not expired; a token is good once.
    pub fn redeem(&self, token: &Token, now: Instant) -> Result<(), &'static str> {
        let mut minted = self.minted.lock().unwrap_or_else(|p| p.into_inner());
        match minted.remove(token) {
            Some(at) if now.duration_since(at) < TOKEN_LIFETIME => Ok(()),
            Some(_) => Err("the token has expired"),
            None => Err("no such token (never minted, or already used)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_good_once_and_not_for_ever() {
        let tokens = Tokens::default();
        let now = Instant::now();
        let t = tokens.mint(now).unwrap();
        assert_eq!(tokens.redeem(&t, now), Ok(()));
        assert!(tokens.redeem(&t, now).unwrap_err().contains("already used"));
        let old = tokens.mint(now).unwrap();
        assert_eq!(
            tokens.redeem(&old, now + TOKEN_LIFETIME),
            Err("the token has expired")
        );
        assert!(tokens.redeem(&[0; TOKEN_LEN], now).is_err());
    }

    #[test]
    fn outstanding_tokens_are_bounded_and_expire() {
        let tokens = Tokens::default();
        let now = Instant::now();
        for _ in 0..MAX_OUTSTANDING {
            tokens.mint(now).unwrap();
        }
        let err = tokens.mint(now).unwrap_err();
        assert!(
            err.contains("256 LocalAttach tokens are outstanding"),
            "{err}"
        );
        assert!(
            tokens.mint(now + TOKEN_LIFETIME).is_ok(),
            "expired ones make room"
        );
    }
}
