//! A permit's id: 16 random bytes, shown as 32 lowercase hex digits (protocol §15.1).

use std::fmt;
use std::str::FromStr;

use fred::bytes::Bytes;
use fred::types::Value;

use crate::base::error::{Error, Result};

/// The id of one permit taken from a
/// [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore): 16 random bytes, written
/// as 32 lowercase hex digits, as Redisson's `RPermitExpirableSemaphore` shows its ids.
///
/// Redis keeps the 16 bytes themselves (the member of the leases' sorted set), as Java
/// does, so an id printed by either side and parsed by the other names the same permit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId([u8; 16]);

impl PermitId {
    /// A new id of 16 random bytes.
    pub(crate) fn random() -> PermitId {
        // A v4 UUID fixes 6 of its bits; two of them give 16 random bytes.
        let mut bytes = *uuid::Uuid::new_v4().as_bytes();
        let more = uuid::Uuid::new_v4();
        bytes[6] = more.as_bytes()[0];
        bytes[8] = more.as_bytes()[1];
        PermitId(bytes)
    }

    /// The id made of these 16 bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> PermitId {
        PermitId(bytes)
    }

    /// The 16 bytes Redis keeps.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The id as a script argument: the raw bytes.
    pub(crate) fn arg(&self) -> Value {
        Value::Bytes(Bytes::copy_from_slice(&self.0))
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    /// Reads 32 hex digits (either case), as Java's ids print.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for anything else.
    fn from_str(text: &str) -> Result<PermitId> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "permit id {text:?} cannot be read: {why}; an id is 32 hex digits (16 bytes)"
            ))
        };
        if text.len() != 32 {
            return Err(bad(&format!("it has {} characters", text.chars().count())));
        }
        let mut bytes = [0u8; 16];
        for (i, pair) in text.as_bytes().chunks(2).enumerate() {
            let digits = std::str::from_utf8(pair).map_err(|_| bad("it is not hex"))?;
            let hex = pair.iter().all(u8::is_ascii_hexdigit);
            bytes[i] = u8::from_str_radix(digits, 16)
                .ok()
                .filter(|_| hex)
                .ok_or_else(|| bad(&format!("{digits:?} at {} is not hex", i * 2)))?;
        }
        Ok(PermitId(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_and_reads_32_lowercase_hex_digits() {
        let id = PermitId::from_bytes([0xab; 16]);
        assert_eq!(id.to_string(), "ab".repeat(16));
        assert_eq!("AB".repeat(16).parse::<PermitId>().unwrap(), id);
        let random = PermitId::random();
        assert_eq!(random.to_string().parse::<PermitId>().unwrap(), random);
        assert_ne!(PermitId::random(), PermitId::random());
    }

    #[test]
    fn refuses_what_is_not_an_id() {
        for bad in [
            "",
            "abc",
            &"+f".repeat(16),
            &"g".repeat(32),
            &"a".repeat(33),
            &"é".repeat(16),
        ] {
            let error = bad.parse::<PermitId>().unwrap_err().to_string();
            assert!(error.contains("32 hex digits"), "{error}");
        }
        let error = "zz".repeat(16).parse::<PermitId>().unwrap_err().to_string();
        assert!(error.contains("\"zz\" at 0 is not hex"), "{error}");
    }
}
