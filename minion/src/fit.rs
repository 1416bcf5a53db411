//! Keeps a return sendable: a return must fit in one session message and within the values a
//! decoder takes, or sealing it fails and it could never leave the outbox. Large strings are
//! cut (and `truncated` set); a return still too large keeps only a note saying why and how
//! big it was. The caps match the master's defaults (`max_return_bytes`).

use halite_protocol::message::{self, JobReturn, Value};
use serde_json::json;

/// Largest encoded return kept whole (the master's default `max_return_bytes`: what still fits
/// in one message once the master wraps it for a client).
pub(crate) const MAX_RETURN_BYTES: usize = halite_protocol::noise::MAX_MESSAGE_SIZE - 512 * 1024;

/// Most values a return may hold (the master's relay limit).
pub(crate) const MAX_RETURN_VALUES: usize = message::MAX_VALUES - 1024;

/// Deepest nesting kept in a return's outputs: the master wraps a return a few levels deeper
/// for its clients, and every decoder stops at [`message::MAX_DEPTH`].
pub(crate) const MAX_RETURN_DEPTH: usize = message::MAX_DEPTH - 16;

/// `ret`, cut down to fit if it does not.
pub(crate) fn fit(mut ret: JobReturn) -> JobReturn {
    if cut_deep(&mut ret.outputs, 0) {
        ret.truncated = true;
    }
    let (bytes, values) = message::measure(&ret);
    if bytes <= MAX_RETURN_BYTES && values <= MAX_RETURN_VALUES {
        return ret;
    }
    if values <= MAX_RETURN_VALUES {
        // Cut the largest strings, wherever they are in the outputs, until it fits.
        let mut to_cut = bytes - MAX_RETURN_BYTES + 1024;
        for _ in 0..64 {
            let Some(text) = largest_string(&mut ret.outputs) else { break };
            let len = text.len();
            let mut end = len.saturating_sub(to_cut);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            ret.truncated = true;
            to_cut = to_cut.saturating_sub(len - end);
            if to_cut == 0 {
                break;
            }
        }
        let (bytes, _) = message::measure(&ret);
        if bytes <= MAX_RETURN_BYTES {
            return ret;
        }
    }
    ret.outputs = json!({
        "error": format!(
            "the return was {bytes} bytes and {values} values, more than a return may carry \
             ({MAX_RETURN_BYTES} bytes, {MAX_RETURN_VALUES} values); its outputs were not kept"
        ),
    });
    ret.success = false;
    ret.truncated = true;
    if ret.retcode == 0 {
        ret.retcode = 1;
    }
    ret
}

/// Replaces what `value` nests past [`MAX_RETURN_DEPTH`] (it is at `depth`) with a note;
/// whether anything was cut.
fn cut_deep(value: &mut Value, depth: usize) -> bool {
    let nested = matches!(value, Value::Array(_) | Value::Object(_));
    if nested && depth + 1 >= MAX_RETURN_DEPTH {
        *value = Value::String(format!("(nested deeper than {MAX_RETURN_DEPTH} levels: cut)"));
        return true;
    }
    match value {
        Value::Array(items) => items.iter_mut().fold(false, |cut, child| cut_deep(child, depth + 1) | cut),
        Value::Object(map) => map.values_mut().fold(false, |cut, child| cut_deep(child, depth + 1) | cut),
        _ => false,
    }
}

/// The longest string anywhere in `value` (none if it holds no non-empty string).
fn largest_string(value: &mut Value) -> Option<&mut String> {
    match value {
        Value::String(text) if !text.is_empty() => Some(text),
        Value::Array(items) => items.iter_mut().filter_map(largest_string).max_by_key(|s| s.len()),
        Value::Object(map) => map.values_mut().filter_map(largest_string).max_by_key(|s| s.len()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::Outcome;

    use super::*;

    fn ret(outputs: Value) -> JobReturn {
        JobReturn {
            jid: "1".into(),
            minion: String::new(),
            success: true,
            retcode: 0,
            outputs,
            truncated: false,
            duration_ms: 1,
            outcome: Outcome::Completed,
        }
    }

    #[test]
    fn a_small_return_is_untouched() {
        let small = ret(json!({"stdout": "hi"}));
        assert_eq!(fit(small.clone()), small);
    }

    #[test]
    fn large_strings_are_cut_to_fit_and_marked_truncated() {
        // What `file.read` of 16 MiB of invalid UTF-8 becomes: three bytes per byte.
        let big =
            ret(json!({"file": {"content": "\u{fffd}".repeat(6 << 20), "path": "/x"}, "log": "y".repeat(1 << 20)}));
        let fitted = fit(big);
        assert!(fitted.truncated && fitted.success);
        let (bytes, _) = message::measure(&fitted);
        assert!(bytes <= MAX_RETURN_BYTES, "{bytes}");
        assert_eq!(fitted.outputs["file"]["path"], "/x");
        assert_eq!(fitted.outputs["log"].as_str().map(str::len), Some(1 << 20), "only the largest is cut");
        let encoded = message::encode(&message::Message::JobReturn(fitted));
        assert!(message::decode(&encoded).is_ok());
    }

    #[test]
    fn nesting_past_what_a_client_decodes_is_cut_and_marked_truncated() {
        let mut deep = json!("bottom");
        for _ in 0..60 {
            deep = json!([deep]);
        }
        let fitted = fit(ret(json!({ "echo": deep })));
        assert!(fitted.truncated && fitted.success);
        assert!(fitted.outputs.to_string().contains("nested deeper than"), "{}", fitted.outputs);
        // As the master wraps it for a client, and a client decodes it.
        let update = message::Message::JobUpdates(message::JobUpdates {
            updates: vec![message::JobUpdate {
                jid: "1".into(),
                minion: "m".into(),
                state: message::MinionJobState::Returned,
                ret: Some(fitted),
            }],
        });
        assert!(message::decode(&message::encode(&update)).is_ok());
        let shallow = ret(json!({"a": [[1]]}));
        assert_eq!(fit(shallow.clone()), shallow);
    }

    #[test]
    fn a_return_of_too_many_values_keeps_only_a_note() {
        let many = ret(Value::Array(vec![Value::Null; MAX_RETURN_VALUES + 10]));
        let fitted = fit(many);
        assert!(!fitted.success && fitted.truncated && fitted.retcode == 1);
        assert!(fitted.outputs["error"].as_str().is_some_and(|e| e.contains("values")), "{}", fitted.outputs);
    }
}
