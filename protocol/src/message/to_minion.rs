//! Decoding what a minion receives, and nothing else.
//!
//! [`super::decode`] knows every message of the protocol, so a program that calls it carries
//! the decoders of all of them: a minion would link the code that reads every request and
//! answer a client or the master can send (some 400 KiB of a 3.5 MiB locked-down minion).
//! [`decode_for_minion`] reads the same bytes into the same [`Message`], but knows only the
//! messages a master sends a minion, plus the minion's own returns (its outbox keeps them
//! encoded); any other message is a [`CodecError::Malformed`] naming it, which a minion treats
//! like any message it cannot use.

use serde::Deserialize;

use super::codec::from_slice;
use super::{
    Cancel, CodecError, ErrorMessage, FileChunk, JobReturn, Message, Published, ResendReturns, ReturnAck, SignedJob,
    Welcome, MESSAGE_VERSION,
};

/// The messages a minion receives, with the tags [`Message`] has.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ToMinion {
    Welcome(Welcome),
    Job(SignedJob),
    ReturnAck(ReturnAck),
    ResendReturns(ResendReturns),
    Cancel(Cancel),
    Error(ErrorMessage),
    Published(Published),
    FileChunk(FileChunk),
    JobReturn(JobReturn),
}

impl From<ToMinion> for Message {
    fn from(msg: ToMinion) -> Message {
        match msg {
            ToMinion::Welcome(m) => Message::Welcome(m),
            ToMinion::Job(m) => Message::Job(m),
            ToMinion::ReturnAck(m) => Message::ReturnAck(m),
            ToMinion::ResendReturns(m) => Message::ResendReturns(m),
            ToMinion::Cancel(m) => Message::Cancel(m),
            ToMinion::Error(m) => Message::Error(m),
            ToMinion::Published(m) => Message::Published(m),
            ToMinion::FileChunk(m) => Message::FileChunk(m),
            ToMinion::JobReturn(m) => Message::JobReturn(m),
        }
    }
}

#[derive(Deserialize)]
struct MinionEnvelope {
    v: u16,
    msg: ToMinion,
}

/// [`super::decode`] for a minion: the same bytes, the same limits and errors, the same
/// [`Message`]; a message a minion never receives is an error.
pub fn decode_for_minion(bytes: &[u8]) -> Result<Message, CodecError> {
    let envelope: MinionEnvelope = from_slice(bytes)?;
    if envelope.v != MESSAGE_VERSION {
        return Err(CodecError::UnsupportedVersion(envelope.v));
    }
    Ok(envelope.msg.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{encode, Event, FileGet};

    #[test]
    fn what_a_minion_receives_decodes_as_the_full_decoder_does_and_nothing_else_does() {
        let received = [
            Message::ReturnAck(ReturnAck { jid: "20261124000000000001".into() }),
            Message::ResendReturns(ResendReturns {}),
            Message::Cancel(Cancel { jid: "20261124000000000001".into() }),
            Message::Error(ErrorMessage {
                kind: crate::message::ErrorKind::NotFound,
                message: "no".into(),
                request: Some("7".into()),
            }),
            Message::Published(Published {
                request_id: 7,
                jid: "20261124000000000002".into(),
                minions: vec!["a".into()],
                unknown: vec!["b".into()],
            }),
            Message::FileChunk(FileChunk {
                request_id: 3,
                size: 3,
                sha256: "ab".into(),
                offset: 0,
                data: vec![1, 2, 3],
            }),
        ];
        for msg in received {
            let bytes = encode(&msg);
            assert_eq!(decode_for_minion(&bytes), super::super::decode(&bytes), "{msg:?}");
            assert_eq!(decode_for_minion(&bytes), Ok(msg));
        }
        let not_for_minions = [
            Message::Event(Event { tag: "a/b".into(), data: serde_json::json!(1), id: None }),
            Message::FileGet(FileGet { request_id: 1, path: "x".into(), offset: 0 }),
        ];
        for msg in not_for_minions {
            let error = decode_for_minion(&encode(&msg)).unwrap_err();
            assert!(matches!(&error, CodecError::Malformed(text) if text.contains("unknown variant")), "{error}");
        }
        assert!(matches!(decode_for_minion(b"\x92\x01"), Err(CodecError::Malformed(_))));
    }
}
