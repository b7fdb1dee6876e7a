//! Record decoding: any bytes through `frame::check`, `Frame::parse`,
//! `Frame::class`, `decode_body` and `decode_line`. No panic, and whatever
//! decodes re-encodes to a line that decodes to the same record.

#![no_main]

use cairn::frame::{self, Frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = frame::check(data);
    if let Some(body) = data.strip_suffix(b"\n") {
        let _ = frame::check_body(body);
    }
    if let Ok(f) = Frame::parse(data) {
        let _ = f.class();
        let _ = frame::decode_body(&f);
    }
    if let Ok((seq, ts, body)) = frame::decode_line(data) {
        let line = frame::encode(seq, &ts, &body);
        match frame::decode_line(&line) {
            Ok((seq2, ts2, body2)) => {
                assert_eq!(
                    (seq, &ts, &body),
                    (seq2, &ts2, &body2),
                    "a record changed in a round trip"
                );
            }
            Err(e) => panic!("a re-encoded record does not decode: {e}"),
        }
    }
});
