//! The application messages exchanged inside sessions, and their MessagePack codec
//! (`docs/protocol.md` §6).
//!
//! Every message is an [`Envelope`]: a protocol version and one [`Message`]. Encoding is
//! MessagePack with named fields (maps, not arrays), so any MessagePack library can read it and
//! fields can be added without breaking old readers.

mod admin;
mod cli_args;
mod codec;
mod deploy;
mod job;
mod minion_pages;
mod parts;
mod tenant;
mod to_minion;
mod types;

pub use admin::*;
pub use cli_args::{is_identifier, parse_cli_args};
pub use codec::{decode, encode, encoded_len, measure, CodecError, UnreadableMessage, MAX_DEPTH, MAX_VALUES};
pub use deploy::*;
pub use job::{Job, JobError, SignedJob, DEFAULT_JOB_TIMEOUT_MS, JOB_SIGNATURE_DOMAIN};
pub use minion_pages::MinionPages;
pub use parts::{split_by_size, MismatchedPart, PART_VALUES};
pub use tenant::{tenant_holds, tenant_part, validate_tenant, TenantNameError, TENANT_SEPARATOR};
pub use to_minion::decode_for_minion;
pub use types::*;

/// Version of the message layer. A reader refuses envelopes with a different major version.
pub const MESSAGE_VERSION: u16 = 1;
