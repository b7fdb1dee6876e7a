//! The JSON rule for `data` (`docs/FORMAT.md` §1, "The JSON rule"): I-JSON
//! (RFC 7493), checked before a payload is decoded, so that nothing is
//! changed silently. `serde_json` already refuses lone surrogates and
//! numbers that overflow a double; this check adds what it would let
//! through: a member name repeated in an object of any depth (the last one
//! would win) and an integer beyond the 64-bit range (it would become a
//! rounded double).

use std::borrow::Cow;
use std::collections::HashSet;

/// The member names of one object, unescaped.
type Names<'a> = HashSet<Cow<'a, [u8]>>;

/// Checks `text` (one JSON value) against the rules `serde_json` does not
/// enforce. Malformed JSON passes: the decoder that runs next reports it.
///
/// # Errors
///
/// A sentence saying what breaks the rule and what to do instead.
pub(crate) fn check(text: &[u8]) -> Result<(), String> {
    // One entry per open container: the member names seen (objects) or
    // `None` (arrays), and whether the next string is a member name.
    let mut stack: Vec<(Option<Names<'_>>, bool)> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'{' => stack.push((Some(HashSet::new()), true)),
            b'[' => stack.push((None, false)),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => {
                if let Some((Some(_), expect_name)) = stack.last_mut() {
                    *expect_name = true;
                }
            }
            b':' => {
                if let Some((_, expect_name)) = stack.last_mut() {
                    *expect_name = false;
                }
            }
            b'"' => {
                let start = i;
                let mut escaped = false;
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    if text[i] == b'\\' {
                        escaped = true;
                        i += 1;
                    }
                    i += 1;
                }
                let end = (i + 1).min(text.len());
                if let Some((Some(names), true)) = stack.last_mut() {
                    let raw = &text[start..end];
                    let name: Cow<'_, [u8]> = if escaped {
                        match serde_json::from_slice::<String>(raw) {
                            Ok(s) => Cow::Owned(s.into_bytes()),
                            Err(_) => return Ok(()),
                        }
                    } else {
                        Cow::Borrowed(&raw[1..raw.len().saturating_sub(1).max(1)])
                    };
                    if !names.insert(name) {
                        return Err(format!(
                            "the member name {} appears twice in one object (I-JSON, RFC 7493, allows each name once): keep one of them",
                            String::from_utf8_lossy(raw)
                        ));
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i + 1 < text.len()
                    && matches!(text[i + 1], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let number = &text[start..=i];
                let integer = !number.iter().any(|b| matches!(b, b'.' | b'e' | b'E'));
                if integer {
                    let s = std::str::from_utf8(number).unwrap_or("");
                    if s.parse::<i64>().is_err() && s.parse::<u64>().is_err() {
                        return Err(format!(
                            "the number {s} is an integer beyond the 64-bit range, which cannot be kept exactly (it would be rounded): write it as a string"
                        ));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn accepts_what_i_json_allows() {
        for ok in [
            r#"{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}"#,
            r#"[18446744073709551615,-9223372036854775808,1e400,0.1,-0]"#,
            r#"{"a\"b":1,"a":2,"{":"}","[":[]}"#,
            r#""a string with , : { [ 1""#,
            "",
            "{\"unterminated",
        ] {
            assert_eq!(check(ok.as_bytes()), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses_a_repeated_member_name_at_any_depth_and_however_escaped() {
        for bad in [
            r#"{"a":1,"a":2}"#,
            r#"{"x":[{"b":1,"c":2,"b":3}]}"#,
            r#"{"a":1,"\u0061":2}"#,
        ] {
            let e = check(bad.as_bytes()).expect_err(bad);
            assert!(e.contains("appears twice"), "{e}");
        }
    }

    #[test]
    fn refuses_an_integer_beyond_64_bits() {
        for bad in [
            "12345678901234567890123",
            "[18446744073709551616]",
            "{\"n\":-9223372036854775809}",
        ] {
            let e = check(bad.as_bytes()).expect_err(bad);
            assert!(e.contains("write it as a string"), "{e}");
        }
    }
}

#[cfg(test)]
mod timing {
    #[test]
    #[ignore]
    fn time_check_against_decode() {
        let line = crate::frame::encode(
            5,
            "2026-11-30T12:00:00.000Z",
            &crate::record::Body::Entry(crate::record::Entry {
                id: crate::id::EntryId::parse("a1b2c3d4").unwrap(),
                parent: None,
                body: crate::record::EntryBody::Message(crate::record::Message::text(
                    crate::record::Role::Assistant,
                    "x".repeat(600),
                )),
            }),
        );
        let f = crate::frame::Frame::parse(&line).unwrap();
        let data = f.data.bytes().to_vec();
        let n = 200_000;
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(super::check(std::hint::black_box(&data))).unwrap();
        }
        let c = t.elapsed();
        let t = std::time::Instant::now();
        for _ in 0..n {
            std::hint::black_box(serde_json::from_slice::<crate::record::Message>(
                std::hint::black_box(&data),
            ))
            .unwrap();
        }
        let d = t.elapsed();
        println!("check {c:?} decode {d:?} ratio {:.2}", c.as_secs_f64() / d.as_secs_f64());
    }
}
