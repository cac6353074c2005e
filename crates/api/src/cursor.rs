//! Opaque, signed pagination cursors.
//!
//! A cursor is `base64url(state) "." base64url(tag)` where the tag is HMAC-SHA256 over the
//! query's *scope* (route, device, raw range, order, filters) and the state. The scope is not
//! in the cursor: it is recomputed from the request, so a cursor altered, forged, or replayed
//! on any other query fails verification. Because the state is signed it may hold raw
//! DynamoDB positions: no caller can make us start a query at a key of their choosing.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::error::ApiError;

type HmacSha256 = Hmac<Sha256>;

/// 128 bits of tag are plenty against forgery and keep cursors short.
const TAG_LEN: usize = 16;
/// Beyond this a "cursor" is not one of ours (64 shards of positions fit well under it).
pub const MAX_CURSOR_LEN: usize = 8 * 1024;

/// Where each partition of a paged query stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorState {
    /// The range the first page resolved (defaults like "the last hour" are fixed then, so
    /// later pages do not drift with the clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<(String, String)>,
    /// Lists read stretch by stretch (a device's readings, one layout segment after another):
    /// an instant of the stretch `parts` belong to, where the walk stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Partitions still to read: (partition label, position after which to resume; `None`
    /// before the first item). Finished partitions are left out.
    pub parts: Vec<(String, Option<Vec<String>>)>,
    /// Names a list learnt on its earlier pages and keeps to (the metrics a series has
    /// filled so far).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// The key that signs cursors, and any other key whose cursors still open (the previous key
/// for a while after a rotation; see [`crate::secret`]).
#[derive(Clone)]
pub struct CursorKey {
    signing: Vec<u8>,
    also: Vec<Vec<u8>>,
    /// The caller's scope a cursor is bound to ([`CursorKey::bound_to`]).
    binding: Option<String>,
}

impl CursorKey {
    pub fn new(secret: &[u8]) -> Self {
        CursorKey {
            signing: secret.to_vec(),
            also: Vec::new(),
            binding: None,
        }
    }

    /// This key, also opening cursors signed with `other`.
    pub fn also_accepting(mut self, other: &[u8]) -> Self {
        self.also.push(other.to_vec());
        self
    }

    /// This key, its cursors bound to a caller's scope as well as to their query
    /// ([`crate::access::Scope::binding`]): a cursor sealed with one binding (or none) does
    /// not open with another. `None` leaves cursors as they are without a binding.
    pub fn bound_to(mut self, binding: Option<String>) -> Self {
        self.binding = binding;
        self
    }

    fn mac(&self, key: &[u8], scope: &str, state: &[u8]) -> HmacSha256 {
        // HMAC takes keys of any length; this cannot fail.
        let mut m = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        m.update(&(scope.len() as u64).to_be_bytes());
        m.update(scope.as_bytes());
        if let Some(b) = &self.binding {
            // A state is JSON (it starts with `{`), so this marker keeps the two apart.
            m.update(&[0xff]);
            m.update(&(b.len() as u64).to_be_bytes());
            m.update(b.as_bytes());
        }
        m.update(state);
        m
    }

    pub fn seal(&self, scope: &str, state: &CursorState) -> String {
        // Serialising plain strings and vectors cannot fail.
        let json = serde_json::to_vec(state).unwrap_or_default();
        let tag = self
            .mac(&self.signing, scope, &json)
            .finalize()
            .into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&json),
            URL_SAFE_NO_PAD.encode(&tag[..TAG_LEN])
        )
    }

    /// The state of a cursor made by [`CursorKey::seal`] for exactly this scope.
    pub fn open(&self, scope: &str, cursor: &str) -> Result<CursorState, ApiError> {
        let bad = || {
            ApiError::bad(
                "cursor",
                "not a cursor returned by this query (altered, expired by a key change, or \
                 from another query); start again without a cursor",
            )
        };
        if cursor.len() > MAX_CURSOR_LEN {
            return Err(bad());
        }
        let (body, tag) = cursor.split_once('.').ok_or_else(bad)?;
        let json = URL_SAFE_NO_PAD.decode(body).map_err(|_| bad())?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| bad())?;
        if tag.len() != TAG_LEN {
            return Err(bad());
        }
        let signed_by_ours = std::iter::once(&self.signing).chain(&self.also).any(|k| {
            self.mac(k, scope, &json)
                .verify_truncated_left(&tag)
                .is_ok()
        });
        if !signed_by_ours {
            return Err(bad());
        }
        serde_json::from_slice(&json).map_err(|_| bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> CursorState {
        CursorState {
            range: Some(("a".into(), "b".into())),
            at: None,
            parts: vec![
                ("S1".into(), Some(vec!["READING#x".into()])),
                ("S2".into(), None),
            ],
            names: Vec::new(),
        }
    }

    #[test]
    fn a_cursor_opens_only_for_its_own_scope_and_key() {
        let k = CursorKey::new(b"key one");
        let c = k.seal("readings|d|asc", &state());
        assert_eq!(k.open("readings|d|asc", &c).unwrap(), state());
        assert!(k.open("readings|d|desc", &c).is_err());
        assert!(
            CursorKey::new(b"key two")
                .open("readings|d|asc", &c)
                .is_err()
        );
    }

    #[test]
    fn a_cursor_bound_to_one_callers_scope_opens_for_no_other() {
        let k = CursorKey::new(b"key one");
        let a = k.clone().bound_to(Some("sites:A".into()));
        let b = k.clone().bound_to(Some("sites:B".into()));
        let c = a.seal("devices|-", &state());
        assert_eq!(a.open("devices|-", &c).unwrap(), state());
        assert!(b.open("devices|-", &c).is_err());
        assert!(k.open("devices|-", &c).is_err());
        assert!(a.open("devices|-", &k.seal("devices|-", &state())).is_err());
    }

    #[test]
    fn any_altered_character_is_rejected() {
        let k = CursorKey::new(b"key");
        let c = k.seal("s", &state());
        for i in 0..c.len() {
            let mut b = c.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(b).unwrap();
            if altered != c {
                assert!(k.open("s", &altered).is_err(), "position {i}");
            }
        }
        for garbage in ["", ".", "abc", "a.b", &"x".repeat(MAX_CURSOR_LEN + 1)] {
            assert!(k.open("s", garbage).is_err());
        }
    }
}
