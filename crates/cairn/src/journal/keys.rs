//! Keys and hashes the journal writes: the idempotency key of a tool call
//! and the argument hash over a canonical JSON form (`docs/FORMAT.md` §5).
//! Pure functions of their inputs; nothing here reads or folds records.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::id::SessionId;

/// The idempotency key of a tool call: the same for the same session,
/// operation and call id, after any number of restarts. Pass it downstream
/// (e.g. as an `Idempotency-Key` HTTP header) so a re-run is recognised.
///
/// It is `ik-` followed by the first 32 hex digits of SHA-256 over the UTF-8
/// bytes of `session`, `op` and `call_id`, each followed by a 0x00 byte.
pub fn idempotency_key(session: &SessionId, op: &str, call_id: &str) -> String {
    let mut h = Sha256::new();
    for part in [session.as_str(), op, call_id] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut out = String::with_capacity(35);
    out.push_str("ik-");
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// SHA-256, as 64 lower-case hex digits, of the canonical JSON of a tool's
/// arguments (`docs/FORMAT.md` §5, "Argument hash", is the exact form):
///
/// - no whitespace; arrays in order; object members sorted by key, comparing
///   the keys' UTF-8 bytes (that is, by Unicode code point);
/// - strings escape `"` and `\`, write U+0008, U+0009, U+000A, U+000C and
///   U+000D as `\b`, `\t`, `\n`, `\f`, `\r` and the other controls below
///   U+0020 as `\u00xx` (lower-case hex); everything else, `/` and non-ASCII
///   included, is its own UTF-8 bytes;
/// - an integer (a number written without fraction or exponent that fits in
///   an `i64` or a `u64`) is its decimal digits; any other number is the
///   nearest `f64` in its shortest round-trip digits, positional with at
///   least one fractional digit when it is 0 or 1e-5 ≤ |x| < 1e16 (`100.0`,
///   `0.00001`, `-0.0`), else `d[.ddd]e±n` (`1e+16`, `1.5e-7`).
///
/// This is not RFC 8785 (JCS), which sorts keys by UTF-16 code units and
/// writes numbers as ECMAScript does (`1`, not `1.0`); the hash is on disk, so
/// the form stays as it is. cairn writes the hash and never checks it.
pub fn args_hash(arguments: &Value) -> String {
    let mut canonical = Vec::new();
    write_canonical(arguments, &mut canonical);
    let digest = Sha256::digest(&canonical);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, k);
                out.push(b':');
                write_canonical(&m[*k], out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            let _ = serde_json::to_writer(&mut *out, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn idempotency_key_is_deterministic_and_distinct() {
        let s = SessionId::parse("01jdzq5m8k0000000000000000").unwrap();
        let a = idempotency_key(&s, "op-1", "call-1");
        assert_eq!(a, idempotency_key(&s, "op-1", "call-1"));
        assert_ne!(a, idempotency_key(&s, "op-1", "call-2"));
        assert_ne!(a, idempotency_key(&s, "op-2", "call-1"));
        assert_ne!(
            idempotency_key(&s, "op-1", "call-1x"),
            idempotency_key(&s, "op-1c", "all-1x")
        );
        assert_eq!(a.len(), 35);
        assert!(a.starts_with("ik-"));
    }

    #[test]
    fn args_hash_ignores_key_order() {
        assert_eq!(
            args_hash(&json!({"a":1,"b":[1,{"y":2,"x":1}]})),
            args_hash(&json!({"b":[1,{"x":1,"y":2}],"a":1}))
        );
        assert_ne!(args_hash(&json!({"a":1})), args_hash(&json!({"a":2})));
    }
    fn canonical(json_text: &str) -> String {
        let v: Value = serde_json::from_str(json_text).unwrap();
        let mut out = Vec::new();
        write_canonical(&v, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn canonical_json_sorts_keys_by_code_point_and_drops_whitespace() {
        // By code point: "ｚ" (U+FF5A) before "😀" (U+1F600); JCS, by UTF-16
        // code units (0xFF5A > 0xD83D), would put them the other way round.
        assert_eq!(
            canonical(
                r#"{ "b" : 1, "a" : { "y" : [ true , null ], "x" : false },
                "A": 3, "é": 4, "z": 5, "😀": 6, "": 7, "ｚ": 8, "aa": 9 }"#
            ),
            r#"{"":7,"A":3,"a":{"x":false,"y":[true,null]},"aa":9,"b":1,"z":5,"é":4,"ｚ":8,"😀":6}"#
        );
        assert_eq!(
            canonical(r#"{"k":1,"k":2}"#),
            r#"{"k":2}"#,
            "last duplicate"
        );
    }

    #[test]
    fn canonical_json_number_forms() {
        let cases = [
            ("0", "0"),
            ("-7", "-7"),
            ("18446744073709551615", "18446744073709551615"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("18446744073709551616", "1.8446744073709552e+19"),
            ("-0", "-0.0"),
            ("1.0", "1.0"),
            ("1e2", "100.0"),
            ("1E2", "100.0"),
            ("12e3", "12000.0"),
            ("0.1", "0.1"),
            ("100.0e-2", "1.0"),
            ("0.00001", "0.00001"),
            ("0.000001", "1e-6"),
            ("1.5e-7", "1.5e-7"),
            ("1e15", "1000000000000000.0"),
            ("1e16", "1e+16"),
            ("123456789012345678901234567890", "1.2345678901234568e+29"),
            ("2.5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ];
        for (text, form) in cases {
            assert_eq!(canonical(text), form, "{text}");
        }
    }

    #[test]
    fn canonical_json_string_escapes() {
        // In: every short escape, two other controls, an escaped solidus, DEL,
        // U+2028, a non-ASCII letter and a surrogate pair.
        let text = r#"["\u0000\u001f\b\f\n\r\t\"\\\/\u007f\u2028é\ud83d\ude00"]"#;
        let form = "[\"\\u0000\\u001f\\b\\f\\n\\r\\t\\\"\\\\/\u{7f}\u{2028}é😀\"]";
        assert_eq!(canonical(text), form);
    }

    #[test]
    fn args_hash_is_the_sha256_of_the_canonical_form() {
        // printf '{"a":1,"b":[1.0,"x"]}' | sha256sum
        assert_eq!(
            args_hash(&json!({"b": [1.0, "x"], "a": 1})),
            "f01ecc739f062d95c43a8287a4ea0f9cf3840e01f45010162764c0d2399923fb"
        );
    }
}
