//! Session ids (ULID-style, sortable by creation time) and entry ids (short,
//! random, typeable, resolvable by unique prefix).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::time;

/// Crockford's base 32, lower case: no `i`, `l`, `o`, `u`.
const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A session's id: 26 characters of lower-case Crockford base 32 encoding a
/// 48-bit millisecond timestamp and 80 random bits (the ULID layout), so ids
/// sort by creation time and can be typed as a unique prefix.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

impl SessionId {
    /// Length of a session id in characters.
    pub const LEN: usize = 26;

    /// A new id for the current time.
    pub fn generate() -> SessionId {
        let mut rand = [0u8; 10];
        fill_random(&mut rand);
        Self::from_parts(time::now_millis(), rand)
    }

    fn from_parts(millis: u64, rand: [u8; 10]) -> SessionId {
        let mut v: u128 = u128::from(millis & 0xFFFF_FFFF_FFFF) << 80;
        for (i, b) in rand.iter().enumerate() {
            v |= u128::from(*b) << (8 * (9 - i));
        }
        let mut s = String::with_capacity(Self::LEN);
        for i in (0..Self::LEN).rev() {
            s.push(CROCKFORD[((v >> (5 * i)) & 31) as usize] as char);
        }
        SessionId(s)
    }

    /// Parses a full session id.
    ///
    /// # Errors
    ///
    /// When `s` is not 26 characters of lower-case Crockford base 32. This is
    /// what keeps a session id from naming a path outside the store.
    pub fn parse(s: &str) -> Result<SessionId, InvalidId> {
        SessionId::check(s)?;
        Ok(SessionId(s.to_owned()))
    }

    fn check(s: &str) -> Result<(), InvalidId> {
        if s.len() == Self::LEN && is_session_id_prefix(s) && s.as_bytes()[0] <= b'7' {
            Ok(())
        } else {
            Err(InvalidId {
                what: "session id",
                value: s.chars().take(80).collect(),
                rule: "26 characters of 0-9 and a-z without i, l, o, u",
            })
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The creation time encoded in the id, in milliseconds since the epoch.
    pub fn millis(&self) -> u64 {
        let mut v: u64 = 0;
        for c in self.0.bytes().take(10) {
            let d = CROCKFORD.iter().position(|x| *x == c).unwrap_or(0) as u64;
            v = (v << 5) | d;
        }
        v
    }
}

/// Whether `s` could be the start of a session id (used for prefix lookups).
pub fn is_session_id_prefix(s: &str) -> bool {
    !s.is_empty() && s.len() <= SessionId::LEN && s.bytes().all(is_crockford)
}

/// Whether `c` is a digit of [`CROCKFORD`] (a listing parses every
/// session id twice: a match, not a search of the alphabet).
fn is_crockford(c: u8) -> bool {
    matches!(c, b'0'..=b'9' | b'a'..=b'h' | b'j' | b'k' | b'm' | b'n' | b'p'..=b't' | b'v'..=b'z')
}

impl TryFrom<String> for SessionId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, InvalidId> {
        // Checked, then kept: no second copy (a listing reads thousands).
        SessionId::check(&s)?;
        Ok(SessionId(s))
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> String {
        id.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.0)
    }
}

/// An entry's id: unique within its session, 1 to 64 characters of ASCII
/// letters, digits, `-`, `_` and `.`. cairn generates 8 lower-case hex
/// characters; hosts may supply their own.
///
/// Cloning one is cheap (a shared string): the tree, the context, the leaf
/// and every append's result hold the same id.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EntryId(Arc<str>);

impl EntryId {
    /// Longest id accepted.
    pub const MAX_LEN: usize = 64;

    /// An id already known to follow the rules (read from a persisted index
    /// whose ids were checked when it was decoded).
    pub(crate) fn from_checked(s: &str) -> EntryId {
        debug_assert!(is_name(s), "{s:?} is not an entry id");
        EntryId(s.into())
    }

    /// A random 8-hex-character id. Callers check it against the session's ids
    /// (the session does: see `Session::append`).
    pub fn random() -> EntryId {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let r = fast_random() as u32;
        let mut hex = [0u8; 8];
        for (i, c) in hex.iter_mut().enumerate() {
            *c = HEX[(r >> (28 - 4 * i)) as usize & 0xf];
        }
        // Only hex digits were written.
        EntryId(std::str::from_utf8(&hex).unwrap_or("0").into())
    }

    /// Parses an entry id.
    ///
    /// # Errors
    ///
    /// When `s` is empty, longer than 64 characters, or has a character other
    /// than ASCII letters, digits, `-`, `_` and `.`.
    pub fn parse(s: &str) -> Result<EntryId, InvalidId> {
        if is_name(s) {
            Ok(EntryId(s.into()))
        } else {
            Err(InvalidId {
                what: "entry id",
                value: s.chars().take(80).collect(),
                rule: "1 to 64 characters of A-Z, a-z, 0-9, '-', '_' and '.'",
            })
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `s` is a valid entry id or label name.
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= EntryId::MAX_LEN
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

impl TryFrom<String> for EntryId {
    type Error = InvalidId;
    fn try_from(s: String) -> Result<Self, InvalidId> {
        EntryId::parse(&s)
    }
}

impl From<EntryId> for String {
    fn from(id: EntryId) -> String {
        String::from(&*id.0)
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntryId({})", self.0)
    }
}

/// The OpenAPI schemas of the ids: strings, with the rules `parse` checks
/// as patterns.
#[cfg(feature = "schema")]
mod schema {
    use std::borrow::Cow;

    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    use utoipa::{PartialSchema, ToSchema};

    use super::{EntryId, SessionId};

    /// A string schema that matches `pattern`.
    fn string(pattern: &str, description: &str) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(pattern))
            .description(Some(description))
            .into()
    }

    impl PartialSchema for SessionId {
        fn schema() -> RefOr<Schema> {
            string(
                "^[0-7][0-9a-hjkmnp-tv-z]{25}$",
                "A session id: 26 characters of 0-9 and a-z without i, l, o, u.",
            )
        }
    }

    impl ToSchema for SessionId {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("SessionId")
        }
    }

    impl PartialSchema for EntryId {
        fn schema() -> RefOr<Schema> {
            string(
                "^[A-Za-z0-9._-]{1,64}$",
                "An entry id or label name: 1 to 64 of A-Z, a-z, 0-9, '-', '_' and '.'.",
            )
        }
    }

    impl ToSchema for EntryId {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("EntryId")
        }
    }
}

/// An id or name that does not follow its rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: expected {rule}")]
pub struct InvalidId {
    what: &'static str,
    value: String,
    rule: &'static str,
}

/// A per-thread xorshift64* generator seeded once from the OS: entry ids
/// need to be unlikely to collide (sessions check them anyway), not secret,
/// and a syscall per id is a measurable share of a buffered append.
fn fast_random() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let mut seed = [0u8; 8];
            fill_random(&mut seed);
            u64::from_le_bytes(seed) | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 16
    })
}

/// Fills `buf` from the operating system's random source. Falls back to a
/// time-and-counter mix if the OS refuses (ids then stay unique in practice
/// because sessions check entry ids for duplicates).
pub(crate) fn fill_random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
        for chunk in buf.chunks_mut(8) {
            let mut x = COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
                ^ time::now_millis().rotate_left(17)
                ^ u64::from(std::process::id());
            x ^= x >> 33;
            x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
            x ^= x >> 33;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_sort_by_time_and_round_trip() {
        let a = SessionId::from_parts(1_000, [0xff; 10]);
        let b = SessionId::from_parts(1_001, [0; 10]);
        assert!(a < b);
        assert_eq!(a.millis(), 1_000);
        assert_eq!(SessionId::parse(a.as_str()).unwrap(), a);
        let g = SessionId::generate();
        assert_eq!(g.as_str().len(), 26);
        assert_eq!(SessionId::parse(g.as_str()).unwrap(), g);
    }

    #[test]
    fn session_id_rejects_path_tricks() {
        for bad in [
            "../../etc/passwd",
            "",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "0123456789abcdefghjkmnpqr/",
        ] {
            assert!(SessionId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_crockford_digits_are_exactly_the_alphabet() {
        for c in 0..=255u8 {
            assert_eq!(is_crockford(c), CROCKFORD.contains(&c), "{c}");
        }
    }

    #[test]
    fn entry_ids_are_typeable() {
        assert!(EntryId::parse("a1b2c3d4").is_ok());
        assert!(EntryId::parse("user.msg-1_x").is_ok());
        for bad in ["", "../x", "a b", "é", &"x".repeat(65)] {
            assert!(EntryId::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(EntryId::random().as_str().len(), 8);
    }
}
