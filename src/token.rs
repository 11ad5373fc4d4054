//! Lock tokens: 128 bits from the operating system's secure random source.

use std::fmt;
use std::sync::Arc;

use rand::TryRng;

use crate::Error;

/// The random value that identifies one grant of a lock.
///
/// Only the holder knows it, and every release and extension checks it, so
/// a holder can never delete or prolong a lock it does not own. It is 128
/// bits from the operating system's secure random source, as 32 lowercase
/// hex characters.
///
/// `Debug` shows only the first four characters, so that tokens do not
/// leak into logs; use [`Token::as_str`] when the full value is needed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(Arc<str>);

impl Token {
    /// Draws a fresh token from the OS's random source.
    pub(crate) fn generate() -> Result<Self, Error> {
        let mut bytes = [0u8; 16];
        rand::rngs::SysRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| Error::Random(e.to_string()))?;
        let mut hex = [0u8; uuid::fmt::Simple::LENGTH];
        Ok(Self(
            uuid::Uuid::from_bytes(bytes)
                .simple()
                .encode_lower(&mut hex)
                .into(),
        ))
    }

    /// The full token, as stored in Redis.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", self.0.get(..4).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_chars_and_differ() {
        let a = Token::generate().expect("random source");
        let b = Token::generate().expect("random source");
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    /// A birthday collision among a million 128-bit tokens has probability
    /// about 1.5e-27: any duplicate means a broken random source or encoding.
    /// Tokens are kept as `u128`s so that debug builds stay fast.
    #[test]
    fn a_million_tokens_have_no_duplicate() {
        const COUNT: usize = 1_000_000;
        let mut seen = std::collections::HashSet::with_capacity(COUNT);
        for _ in 0..COUNT {
            let token = Token::generate().expect("random source");
            let value = u128::from_str_radix(token.as_str(), 16).expect("hex");
            assert!(seen.insert(value), "duplicate token {token:?}");
        }
    }

    #[test]
    fn debug_shows_only_a_prefix() {
        let t = Token::generate().expect("random source");
        let shown = format!("{t:?}");
        assert!(!shown.contains(t.as_str()));
        assert!(shown.contains(&t.as_str()[..4]));
    }
}
