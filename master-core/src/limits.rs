//! Size caps applied to what peers send before it is kept: what no authenticated peer may make
//! the master hold (`max_grains_bytes`, `max_return_bytes`; event sizes are per `[[events]]`
//! rule). The decoder's value count (`halite_protocol::message::MAX_VALUES`) and the transport's
//! byte-accounted queues bound the rest.

use std::io;

/// Largest application message a peer accepts (the session's default cap).
pub const MESSAGE_CAP: usize = halite_protocol::noise::MAX_MESSAGE_SIZE;

/// What one outgoing message may carry: the cap, less room for the envelope around a part of
/// an answer or a batch of updates.
pub const MESSAGE_BUDGET: usize = MESSAGE_CAP - 256 * 1024;

/// Default `max_return_bytes`: small enough that any stored return, wrapped in an answer or an
/// update, still fits in one message.
pub const DEFAULT_MAX_RETURN: usize = MESSAGE_CAP - 512 * 1024;

use halite_protocol::message::JobReturn;
use serde::Serialize;
use serde_json::json;

/// The length of a value's JSON encoding, counted without building it.
pub fn json_size(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail, and our values always serialize.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Most values a kept return may hold: what still decodes, wrapped in an update or an answer,
/// under the decoder's limit.
pub const RETURN_VALUES: usize = halite_protocol::message::MAX_VALUES - 1024;

/// Why a return cannot be kept as it is, if so: more bytes than `max_return_bytes`, or more
/// values than can be relayed. `size` is its encoded length, which bounds its value count.
pub fn oversized_return(ret: &JobReturn, size: usize, max_bytes: usize) -> Option<String> {
    if size > max_bytes {
        return Some(format!("the return was {size} bytes, more than the master's max_return_bytes ({max_bytes})"));
    }
    if size > RETURN_VALUES {
        let (_, values) = halite_protocol::message::measure(ret);
        if values > RETURN_VALUES {
            return Some(format!("the return held {values} values, more than the master relays ({RETURN_VALUES})"));
        }
    }
    None
}

/// Replaces the outputs of a return that cannot be kept with a note saying why: the slot
/// still ends (failed, with the reason) and the minion's copy is acknowledged, instead of
/// storing what nobody allowed for.
pub fn replace_oversized_return(ret: &mut JobReturn, why: &str) {
    ret.outputs = json!({ "error": format!("{why}; its outputs were not kept") });
    ret.success = false;
    ret.truncated = true;
    if ret.retcode == 0 {
        ret.retcode = 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_size_matches_the_encoding() {
        let value = json!({"a": [1, "two", null], "b": {"c": 3.5}});
        assert_eq!(json_size(&value), serde_json::to_vec(&value).map(|v| v.len()).unwrap_or_default());
    }

    #[test]
    fn a_return_of_too_many_values_is_not_kept() {
        let mut ret = JobReturn {
            jid: "1".into(),
            minion: "m".into(),
            success: true,
            retcode: 0,
            outputs: serde_json::Value::Array(vec![serde_json::Value::Null; RETURN_VALUES]),
            truncated: false,
            duration_ms: 5,
            outcome: Default::default(),
        };
        let size = halite_protocol::message::encoded_len(&ret);
        assert!(oversized_return(&ret, size, usize::MAX).is_some_and(|why| why.contains("values")));
        ret.outputs = serde_json::Value::Array(vec![serde_json::Value::Null; 1000]);
        assert_eq!(oversized_return(&ret, size, usize::MAX), None);
    }

    #[test]
    fn an_oversized_return_fails_with_the_reason() {
        let mut ret = JobReturn {
            jid: "1".into(),
            minion: "m".into(),
            success: true,
            retcode: 0,
            outputs: json!({"stdout": "x".repeat(100)}),
            truncated: false,
            duration_ms: 5,
            outcome: Default::default(),
        };
        let why = oversized_return(&ret, 100, 10).expect("over the cap");
        replace_oversized_return(&mut ret, &why);
        assert!(!ret.success && ret.truncated && ret.retcode == 1);
        assert!(ret.outputs["error"].as_str().is_some_and(|e| e.contains("max_return_bytes (10)")), "{}", ret.outputs);
    }
}
