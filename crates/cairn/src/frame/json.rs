//! A record's `data` written as compact JSON straight into its line: the
//! exact bytes `serde_json::to_writer` writes, with strings escaped eight
//! bytes at a time instead of one (most of a line is message text, and
//! `serde_json`'s byte-at-a-time escape loop was half of an append's CPU
//! work).
//!
//! Only what cairn's record types use is written here: strings, integers,
//! floats, booleans, `null`, sequences, and maps and structs with string
//! keys. Anything else (a non-string map key, bytes, `serde_json`'s private
//! `RawValue` and number structs) fails with [`Unsupported`], and
//! [`write`] then writes the whole value with `serde_json` instead, so the
//! bytes are always `serde_json`'s.

use std::fmt;

use serde::Serialize;
use serde::ser::{self, Impossible};

/// Appends `value` as compact JSON, byte for byte what
/// `serde_json::to_writer` writes.
///
/// # Errors
///
/// What `serde_json` reports for `value` (a `Serialize` impl that fails).
pub(super) fn write<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> Result<(), serde_json::Error> {
    let at = out.len();
    if value.serialize(Writer { out: &mut *out }).is_ok() {
        return Ok(());
    }
    out.truncate(at);
    serde_json::to_writer(out, value)
}

/// Appends `s` as a JSON string, as `serde_json` writes it: `"` and `\`
/// escaped with a backslash, the control characters below U+0020 as `\b`,
/// `\t`, `\n`, `\f`, `\r` or `\u00xx` (lower-case hex), everything else
/// (DEL and non-ASCII included) as it is.
pub(super) fn push_str(out: &mut Vec<u8>, s: &str) {
    let mut rest = s.as_bytes();
    out.reserve(rest.len() + 2);
    out.push(b'"');
    // Eight bytes at a time (the last ones padded with spaces, which need
    // no escape): copied whole when none needs an escape, else up to the
    // first that does, which is escaped.
    while !rest.is_empty() {
        let (chunk, len) = match rest.first_chunk::<8>() {
            Some(chunk) => (*chunk, 8),
            None => {
                let mut chunk = [b' '; 8];
                chunk[..rest.len()].copy_from_slice(rest);
                (chunk, rest.len())
            }
        };
        let flagged = needs_escape(u64::from_le_bytes(chunk));
        out.extend_from_slice(&chunk);
        // (Never a padding byte: the lowest flag is exact.)
        let first = if flagged == 0 {
            len
        } else {
            (flagged.trailing_zeros() / 8) as usize
        };
        out.truncate(out.len() - (8 - first));
        if first < len {
            push_escape(out, rest[first]);
            rest = &rest[first + 1..];
        } else {
            rest = &rest[len..];
        }
    }
    out.push(b'"');
}

/// The bytes of `w` (little-endian) that need an escape: a control
/// character, `"` or `\`, each flagged by its high bit. The lowest flag is
/// always exact (a borrow can only set flags above a flagged byte), which
/// is the only one read.
#[inline]
fn needs_escape(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const SPACES: u64 = ONES * 0x20;
    const QUOTES: u64 = ONES * 0x22;
    const BACKSLASHES: u64 = ONES * 0x5c;
    // A byte is zero: the classic "has a zero byte" test.
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    // Below 0x20: subtracting 0x20 borrows into the high bit of an ASCII byte.
    let control = w.wrapping_sub(SPACES) & !w & HIGH;
    control | zero(w ^ QUOTES) | zero(w ^ BACKSLASHES)
}

/// Lower-case hex digits, as `serde_json` escapes and as a line's CRC is written.
pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

#[inline]
fn push_escape(out: &mut Vec<u8>, b: u8) {
    let short = match b {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0a => b'n',
        0x0c => b'f',
        0x0d => b'r',
        _ => {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

/// Appends `n` in decimal.
pub(super) fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}

/// A value this writer leaves to `serde_json` (or a `Serialize` impl's own
/// error, which `serde_json` then reports).
#[derive(Debug)]
pub(super) struct Unsupported;

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Unsupported {}

impl ser::Error for Unsupported {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Unsupported
    }
}

type Done = Result<(), Unsupported>;

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn again(&mut self) -> Writer<'_> {
        Writer { out: self.out }
    }

    /// `{"variant":`, the start of an externally tagged variant.
    fn open_variant(&mut self, variant: &str) {
        self.out.push(b'{');
        push_str(self.out, variant);
        self.out.push(b':');
    }
}

/// A sequence, map or struct being written: whether a member came yet, and
/// what closes it (`]`, `}`, or `}}` for a variant).
struct Compound<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    close: &'static [u8],
}

impl<'a> Compound<'a> {
    fn open(out: &'a mut Vec<u8>, open: u8, close: &'static [u8]) -> Compound<'a> {
        out.push(open);
        Compound {
            out,
            first: true,
            close,
        }
    }

    fn comma(&mut self) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        self.comma();
        value.serialize(Writer { out: self.out })
    }

    fn member<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Done {
        self.comma();
        push_str(self.out, key);
        self.out.push(b':');
        value.serialize(Writer { out: self.out })
    }

    fn close(self) -> Done {
        self.out.extend_from_slice(self.close);
        Ok(())
    }
}

/// Serializer methods for tuple and struct variants, opened with `$open`
/// and closed with `$close`.
macro_rules! variants {
    ($($method:ident => $open:expr, $close:expr;)*) => {$(
        fn $method(
            mut self,
            _: &'static str,
            _: u32,
            variant: &'static str,
            _: usize,
        ) -> Result<Compound<'a>, Unsupported> {
            self.open_variant(variant);
            Ok(Compound::open(self.out, $open, $close))
        }
    )*};
}

/// Serializer methods for integers written widened to 64 bits by `$push`.
macro_rules! widened {
    ($($method:ident: $ty:ty => $push:ident),* $(,)?) => {$(
        fn $method(self, v: $ty) -> Done {
            $push(self.out, v.into());
            Ok(())
        }
    )*};
}

/// Serializer methods for numbers `serde_json` writes itself.
macro_rules! by_serde_json {
    ($($method:ident: $ty:ty),* $(,)?) => {$(
        fn $method(self, v: $ty) -> Done {
            serde_json::to_writer(self.out, &v).map_err(|_| Unsupported)
        }
    )*};
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Done {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    widened! {
        serialize_i8: i8 => push_i64,
        serialize_i16: i16 => push_i64,
        serialize_i32: i32 => push_i64,
        serialize_u8: u8 => push_u64,
        serialize_u16: u16 => push_u64,
        serialize_u32: u32 => push_u64,
    }

    fn serialize_i64(self, v: i64) -> Done {
        push_i64(self.out, v);
        Ok(())
    }

    fn serialize_u64(self, v: u64) -> Done {
        push_u64(self.out, v);
        Ok(())
    }

    // 128-bit integers, and floats as `serde_json` writes them (shortest
    // round trip; `null` when not finite).
    by_serde_json! {
        serialize_i128: i128,
        serialize_u128: u128,
        serialize_f32: f32,
        serialize_f64: f64,
    }

    fn serialize_char(self, v: char) -> Done {
        push_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Done {
        push_str(self.out, v);
        Ok(())
    }

    fn serialize_bytes(self, _: &[u8]) -> Done {
        Err(Unsupported)
    }

    fn serialize_none(self) -> Done {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Done {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _: &'static str) -> Done {
        self.serialize_unit()
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Done {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Done {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Done {
        self.open_variant(variant);
        value.serialize(self.again())?;
        self.out.push(b'}');
        Ok(())
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Unsupported> {
        Ok(Compound::open(self.out, b'[', b"]"))
    }

    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, Unsupported> {
        self.serialize_seq(None)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Unsupported> {
        self.serialize_seq(None)
    }

    // Externally tagged: `{"variant":` then the value, whose close also
    // closes the tag's object.
    variants! {
        serialize_tuple_variant => b'[', b"]}";
        serialize_struct_variant => b'{', b"}}";
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Unsupported> {
        Ok(Compound::open(self.out, b'{', b"}"))
    }

    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Compound<'a>, Unsupported> {
        // `serde_json`'s `RawValue` (and number, with arbitrary precision)
        // are structs it writes its own way.
        if name.starts_with("$serde_json::") {
            return Err(Unsupported);
        }
        self.serialize_map(None)
    }
}

/// The sequence-like compounds (sequences, tuples, tuple structs and
/// variants) all write their elements the same way.
macro_rules! elements {
    ($($kind:ident :: $method:ident),*) => {$(
        impl ser::$kind for Compound<'_> {
            type Ok = ();
            type Error = Unsupported;

            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
                self.element(value)
            }

            fn end(self) -> Done {
                self.close()
            }
        }
    )*};
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Done {
        self.comma();
        key.serialize(Key { out: self.out })?;
        self.out.push(b':');
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(Writer { out: self.out })
    }

    fn end(self) -> Done {
        self.close()
    }
}

/// Structs and struct variants write their fields as members.
macro_rules! members {
    ($($kind:ident),*) => {$(
        impl ser::$kind for Compound<'_> {
            type Ok = ();
            type Error = Unsupported;

            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Done {
                self.member(key, value)
            }

            fn end(self) -> Done {
                self.close()
            }
        }
    )*};
}

members!(SerializeStruct, SerializeStructVariant);

/// A map key: only a string is written here; `serde_json`'s rules for
/// other keys (numbers quoted, and so on) are left to it.
struct Key<'a> {
    out: &'a mut Vec<u8>,
}

/// The methods of [`Key`] that leave the key to `serde_json`.
macro_rules! unsupported {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {
        $(fn $name(self, $(_: $arg),*) -> Result<$ret, Unsupported> {
            Err(Unsupported)
        })*
    };
}

impl ser::Serializer for Key<'_> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Impossible<(), Unsupported>;
    type SerializeTuple = Impossible<(), Unsupported>;
    type SerializeTupleStruct = Impossible<(), Unsupported>;
    type SerializeTupleVariant = Impossible<(), Unsupported>;
    type SerializeMap = Impossible<(), Unsupported>;
    type SerializeStruct = Impossible<(), Unsupported>;
    type SerializeStructVariant = Impossible<(), Unsupported>;

    fn serialize_str(self, v: &str) -> Done {
        push_str(self.out, v);
        Ok(())
    }

    unsupported! {
        serialize_bool(bool) -> ();
        serialize_i8(i8) -> ();
        serialize_i16(i16) -> ();
        serialize_i32(i32) -> ();
        serialize_i64(i64) -> ();
        serialize_i128(i128) -> ();
        serialize_u8(u8) -> ();
        serialize_u16(u16) -> ();
        serialize_u32(u32) -> ();
        serialize_u64(u64) -> ();
        serialize_u128(u128) -> ();
        serialize_f32(f32) -> ();
        serialize_f64(f64) -> ();
        serialize_char(char) -> ();
        serialize_bytes(&[u8]) -> ();
        serialize_none() -> ();
        serialize_unit() -> ();
        serialize_unit_struct(&'static str) -> ();
        serialize_unit_variant(&'static str, u32, &'static str) -> ();
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct(&'static str, usize) -> Self::SerializeStruct;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Done {
        Err(Unsupported)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, _: &T) -> Done {
        Err(Unsupported)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Done {
        Err(Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::record::{Block, Message, Role, Usage};

    fn fast(v: &(impl Serialize + ?Sized)) -> Vec<u8> {
        let mut out = b"before".to_vec();
        write(&mut out, v).unwrap();
        out.split_off(6)
    }

    fn same_as_serde_json(v: &(impl Serialize + ?Sized)) {
        assert_eq!(
            String::from_utf8_lossy(&fast(v)),
            String::from_utf8_lossy(&serde_json::to_vec(v).unwrap())
        );
    }

    #[test]
    fn every_ascii_byte_is_escaped_as_serde_json_escapes_it_at_every_offset_of_a_word() {
        for b in 0..0x80u8 {
            let c = char::from(b);
            for before in 0..18 {
                for after in [0, 1, 7, 8, 9] {
                    let s = format!("{}{c}{}", "a".repeat(before), "é".repeat(after));
                    let mut out = Vec::new();
                    push_str(&mut out, &s);
                    assert_eq!(out, serde_json::to_vec(&s).unwrap(), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn every_pair_of_ascii_bytes_is_escaped_as_serde_json_escapes_it_at_every_offset() {
        for a in 0..0x80u8 {
            for b in 0..0x80u8 {
                for before in 0..9 {
                    let s = format!("{}{}{}x", "a".repeat(before), char::from(a), char::from(b));
                    let mut out = Vec::new();
                    push_str(&mut out, &s);
                    assert_eq!(out, serde_json::to_vec(&s).unwrap(), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn a_string_made_only_of_escapes_is_escaped_as_serde_json_escapes_it() {
        let s: String = "\"\\\n\t\u{0}\u{1f}\u{8}\u{c}\r".repeat(5);
        let mut out = Vec::new();
        push_str(&mut out, &s);
        assert_eq!(out, serde_json::to_vec(&s).unwrap());
    }

    proptest! {
        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(
            s in "(\\PC|[\\x00-\\x1f\"\\\\\u{7f}é€😀 a-z]){0,80}"
        ) {
            let mut out = Vec::new();
            push_str(&mut out, &s);
            prop_assert_eq!(out, serde_json::to_vec(&s).unwrap());
        }

        #[test]
        fn any_integer_is_written_as_serde_json_writes_it(u in any::<u64>(), i in any::<i64>()) {
            prop_assert_eq!(fast(&u), serde_json::to_vec(&u).unwrap());
            prop_assert_eq!(fast(&i), serde_json::to_vec(&i).unwrap());
        }

        #[test]
        fn any_float_is_written_as_serde_json_writes_it(f in any::<f64>(), g in any::<f32>()) {
            prop_assert_eq!(fast(&f), serde_json::to_vec(&f).unwrap());
            prop_assert_eq!(fast(&g), serde_json::to_vec(&g).unwrap());
        }
    }

    #[test]
    fn json_values_are_written_as_serde_json_writes_them() {
        same_as_serde_json(&json!({
            "s": "a\"b\\c\nd\u{1}é😀",
            "n": [0, -1, 1.5, -0.0, 1e300, 5e-324, u64::MAX, i64::MIN, 0.1],
            "b": [true, false, null],
            "o": {"": {}, "k\"ey": [], "z": [[{}]]},
            "a": "x",
        }));
        same_as_serde_json(&Value::Null);
        same_as_serde_json("only a string");
    }

    #[test]
    fn messages_of_every_block_are_written_as_serde_json_writes_them() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                Block::Text {
                    text: "hi \"there\"\n\ttab".into(),
                },
                Block::Thinking {
                    thinking: "hmm\\".into(),
                    signature: Some("sig".into()),
                },
                Block::ToolCall {
                    call_id: "c1".into(),
                    name: "bash".into(),
                    arguments: json!({"cmd": "ls -l \"x\"", "n": 3, "f": 0.25}),
                },
                Block::ToolResult {
                    call_id: "c1".into(),
                    content: vec![Block::Text { text: "out".into() }],
                    is_error: true,
                    code: Some("E1".into()),
                },
                Block::Image {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                },
            ],
            usage: Some(Usage {
                input: 10,
                output: 20,
                cached: 0,
                cost: Some(0.000_123),
            }),
            model: Some("m".into()),
            stop_reason: None,
        };
        same_as_serde_json(&m);
        // Written here, not left to serde_json: the speed is not lost silently.
        let mut out = Vec::new();
        assert!(m.serialize(Writer { out: &mut out }).is_ok());
        // A cost that is not finite is `null`, as serde_json writes it.
        let nan = Usage {
            cost: Some(f64::NAN),
            ..Usage::default()
        };
        same_as_serde_json(&nan);
    }

    #[test]
    fn variants_of_every_shape_are_written_as_serde_json_writes_them() {
        #[derive(Serialize)]
        enum Shape {
            Unit,
            Newtype(String),
            Tuple(u8, &'static str),
            Struct { a: Option<u8>, b: () },
        }
        #[derive(Serialize)]
        struct Unit;
        #[derive(Serialize)]
        struct Wrapped(u16);
        #[derive(Serialize)]
        struct Pair(i8, char);
        same_as_serde_json(&[
            Shape::Unit,
            Shape::Newtype("n\"".into()),
            Shape::Tuple(7, "t"),
            Shape::Struct { a: None, b: () },
            Shape::Struct { a: Some(1), b: () },
        ]);
        same_as_serde_json(&(
            Unit,
            Wrapped(9),
            Pair(-3, '"'),
            ('\n', 'é'),
            Vec::<u8>::new(),
        ));
    }

    #[test]
    fn what_this_writer_leaves_to_serde_json_is_still_written_as_serde_json_writes_it() {
        struct Bytes(Vec<u8>);
        impl Serialize for Bytes {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
        #[derive(Serialize)]
        struct WithRaw {
            text: String,
            raw: Box<serde_json::value::RawValue>,
        }
        let numbered: BTreeMap<u32, &str> = [(1, "a"), (20, "b")].into();
        same_as_serde_json(&numbered);
        let flags: BTreeMap<bool, u8> = [(true, 1)].into();
        same_as_serde_json(&flags);
        same_as_serde_json(&WithRaw {
            text: "a\"b".into(),
            raw: serde_json::value::RawValue::from_string("{ \"kept\" : [1,2] }".into()).unwrap(),
        });
        same_as_serde_json(&Bytes(vec![1, 2, 255]));
        same_as_serde_json(&(1u128 << 100));
        same_as_serde_json(&-(1i128 << 100));
    }
}
