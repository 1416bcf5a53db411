//! An established session: sealing and opening application messages (`docs/protocol.md` §5).
//!
//! One application message travels as one ZMTP multipart message. Each part is
//! `nonce (8, big-endian) || Noise transport message`, and each plaintext starts with a chunk
//! header `kind (1) || flags (1) || index (4) || count (4)`. The nonces of one message's parts
//! are consecutive, so parts cannot be spliced between messages.

use std::time::Instant;

use snow::StatelessTransportState;

use super::replay::ReplayWindow;
use super::{Peer, SessionConfig, SessionError, MAX_NOISE_MESSAGE, TAG_LEN};

const NONCE_LEN: usize = 8;
const CHUNK_HEADER_LEN: usize = 10;
/// Application bytes carried by one part.
pub(crate) const MAX_CHUNK_PAYLOAD: usize = MAX_NOISE_MESSAGE - TAG_LEN - CHUNK_HEADER_LEN;
/// Smallest well-formed part: nonce, empty chunk header... plus the tag.
const MIN_PART_LEN: usize = NONCE_LEN + CHUNK_HEADER_LEN + TAG_LEN;

/// The sender switched to a new sending key right after this message (Noise spec §11.3:
/// rekey timing is the application's business; an authenticated flag keeps both sides in step).
const FLAG_REKEY_AFTER: u8 = 0x01;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Data = 1,
    Verdict = 2,
}

/// An authenticated, encrypted session with one peer. Sans-IO: `seal` returns the parts of a
/// ZMTP message to send; `open` takes the parts of one received.
pub struct Session {
    transport: StatelessTransportState,
    peer: Peer,
    config: SessionConfig,
    established: Instant,
    next_nonce: u64,
    sent_this_epoch: u64,
    epoch_started: Instant,
    replay: ReplayWindow,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("peer", &self.peer).field("next_nonce", &self.next_nonce).finish()
    }
}

impl Session {
    pub(crate) fn new(transport: StatelessTransportState, peer: Peer, config: SessionConfig, now: Instant) -> Self {
        Session {
            transport,
            peer,
            config,
            established: now,
            next_nonce: 0,
            sent_this_epoch: 0,
            epoch_started: now,
            replay: ReplayWindow::default(),
            scratch: Vec::new(),
        }
    }

    /// The authenticated peer.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// Seals one application message into the parts of one ZMTP message.
    pub fn seal(&mut self, message: &[u8], now: Instant) -> Result<Vec<Vec<u8>>, SessionError> {
        self.seal_kind(Kind::Data, message, now)
    }

    /// Opens the parts of one ZMTP message into the application message they carry.
    pub fn open(&mut self, parts: &[Vec<u8>], now: Instant) -> Result<Vec<u8>, SessionError> {
        self.open_kind(parts, Kind::Data, now)
    }

    fn check_age(&self, now: Instant) -> Result<(), SessionError> {
        match self.config.max_age {
            Some(age) if now.saturating_duration_since(self.established) >= age => Err(SessionError::Expired),
            _ => Ok(()),
        }
    }

    pub(crate) fn seal_kind(&mut self, kind: Kind, message: &[u8], now: Instant) -> Result<Vec<Vec<u8>>, SessionError> {
        self.check_age(now)?;
        if message.len() > self.config.max_message_size {
            return Err(SessionError::MessageTooLarge { size: message.len(), limit: self.config.max_message_size });
        }
        let count = message.len().div_ceil(MAX_CHUNK_PAYLOAD).max(1);
        let first = self.next_nonce;
        // u64::MAX is reserved by Noise (spec §5.1), so the last usable nonce is MAX - 1.
        let end = first.checked_add(count as u64).filter(|&end| end < u64::MAX).ok_or(SessionError::NoncesExhausted)?;
        self.sent_this_epoch += count as u64;
        let rekey = self.sent_this_epoch >= self.config.rekey_after_messages
            || now.saturating_duration_since(self.epoch_started) >= self.config.rekey_after;
        let flags = if rekey { FLAG_REKEY_AFTER } else { 0 };

        let mut parts = Vec::with_capacity(count);
        let mut chunks = message.chunks(MAX_CHUNK_PAYLOAD);
        for index in 0..count {
            let chunk = chunks.next().unwrap_or_default();
            let nonce = first + index as u64;
            self.scratch.clear();
            self.scratch.push(kind as u8);
            self.scratch.push(flags);
            self.scratch.extend_from_slice(&(index as u32).to_be_bytes());
            self.scratch.extend_from_slice(&(count as u32).to_be_bytes());
            self.scratch.extend_from_slice(chunk);
            let mut part = vec![0u8; NONCE_LEN + self.scratch.len() + TAG_LEN];
            part[..NONCE_LEN].copy_from_slice(&nonce.to_be_bytes());
            self.transport
                .write_message(nonce, &self.scratch, &mut part[NONCE_LEN..])
                .map_err(|_| SessionError::Malformed("chunk larger than a Noise message"))?;
            parts.push(part);
        }
        self.next_nonce = end;
        if rekey {
            self.transport.rekey_outgoing();
            self.sent_this_epoch = 0;
            self.epoch_started = now;
        }
        Ok(parts)
    }

    pub(crate) fn open_kind(&mut self, parts: &[Vec<u8>], kind: Kind, now: Instant) -> Result<Vec<u8>, SessionError> {
        self.check_age(now)?;
        let count = parts.len();
        if count == 0 {
            return Err(SessionError::Malformed("no parts"));
        }
        // Bound the work and the allocation before decrypting anything.
        let max_parts = self.config.max_message_size.div_ceil(MAX_CHUNK_PAYLOAD).max(1);
        if count > max_parts {
            return Err(SessionError::MessageTooLarge {
                size: (count - 1) * MAX_CHUNK_PAYLOAD,
                limit: self.config.max_message_size,
            });
        }
        let mut total = 0usize;
        let mut first_nonce = 0u64;
        for (index, part) in parts.iter().enumerate() {
            if part.len() < MIN_PART_LEN || part.len() > NONCE_LEN + MAX_NOISE_MESSAGE {
                return Err(SessionError::Malformed("part length out of range"));
            }
            let nonce = read_nonce(part);
            if index == 0 {
                first_nonce = nonce;
            } else if Some(nonce) != first_nonce.checked_add(index as u64) {
                return Err(SessionError::Malformed("nonces of one message must be consecutive"));
            }
            self.replay.check(nonce)?;
            total += part.len() - MIN_PART_LEN;
        }
        if total > self.config.max_message_size {
            return Err(SessionError::MessageTooLarge { size: total, limit: self.config.max_message_size });
        }

        let mut message = Vec::with_capacity(total);
        let mut rekey = false;
        for (index, part) in parts.iter().enumerate() {
            let ciphertext = &part[NONCE_LEN..];
            self.scratch.resize(ciphertext.len(), 0);
            let n = self
                .transport
                .read_message(read_nonce(part), ciphertext, &mut self.scratch)
                .map_err(|_| SessionError::Decrypt)?;
            let plain = &self.scratch[..n];
            let (header, body) = plain.split_at(CHUNK_HEADER_LEN);
            if header[0] != kind as u8 {
                return Err(SessionError::UnexpectedKind(header[0]));
            }
            let chunk_index = u32::from_be_bytes([header[2], header[3], header[4], header[5]]) as usize;
            let chunk_count = u32::from_be_bytes([header[6], header[7], header[8], header[9]]) as usize;
            if chunk_index != index || chunk_count != count {
                return Err(SessionError::Malformed("chunk index or count does not match the message"));
            }
            rekey = header[1] & FLAG_REKEY_AFTER != 0;
            message.extend_from_slice(body);
        }
        for index in 0..count {
            self.replay.insert(first_nonce + index as u64);
        }
        if rekey {
            self.transport.rekey_incoming();
        }
        Ok(message)
    }
}

fn read_nonce(part: &[u8]) -> u64 {
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&part[..NONCE_LEN]);
    u64::from_be_bytes(nonce)
}
