//! The JSON rule for `data` (`docs/FORMAT.md` §1, "The JSON rule"): I-JSON
//! (RFC 7493), checked before a payload is decoded, so that nothing is
//! changed silently. `serde_json` already refuses lone surrogates and
//! numbers that overflow a double; this check adds what it would let
//! through: a member name repeated in an object of any depth (the last one
//! would win) and an integer beyond the 64-bit range (it would become a
//! rounded double).

use std::borrow::Cow;

/// The member names of one open object, unescaped, or `None` for an array;
/// and whether the next string is a member name.
type Open<'a> = (Option<Vec<Cow<'a, [u8]>>>, bool);

/// Checks `text` (one JSON value) against the rules `serde_json` does not
/// enforce. Malformed JSON passes: the decoder that runs next reports it.
///
/// # Errors
///
/// A sentence saying what breaks the rule and what to do instead.
pub(crate) fn check(text: &[u8]) -> Result<(), String> {
    let mut stack: Vec<Open<'_>> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'{' => stack.push((Some(Vec::new()), true)),
            b'[' => stack.push((None, false)),
            b'}' | b']' => {
                if let Some((Some(mut names), _)) = stack.pop() {
                    repeated(&mut names)?;
                }
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
                // Jump to the closing quote, stepping over escapes.
                loop {
                    let Some(at) = text
                        .get(i..)
                        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
                    else {
                        return Ok(());
                    };
                    i += at;
                    if text[i] == b'"' {
                        break;
                    }
                    escaped = true;
                    i += 2;
                }
                if let Some((Some(names), true)) = stack.last_mut() {
                    let raw = &text[start..=i];
                    names.push(if escaped {
                        match serde_json::from_slice::<String>(raw) {
                            Ok(s) => Cow::Owned(s.into_bytes()),
                            Err(_) => return Ok(()),
                        }
                    } else {
                        Cow::Borrowed(&raw[1..raw.len() - 1])
                    });
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
                // Up to 18 digits always fit; only longer integers are looked at.
                if number.len() > 18 && !number.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
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

/// Refuses an object whose member names (all of them, collected) repeat.
fn repeated(names: &mut [Cow<'_, [u8]>]) -> Result<(), String> {
    if names.len() < 2 {
        return Ok(());
    }
    names.sort_unstable();
    match names.windows(2).find(|w| w[0] == w[1]) {
        None => Ok(()),
        Some(w) => Err(format!(
            "the member name {:?} appears twice in one object (I-JSON, RFC 7493, allows each name once): keep one of them",
            String::from_utf8_lossy(&w[0])
        )),
    }
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
            "{\"ends in an escape\\",
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
