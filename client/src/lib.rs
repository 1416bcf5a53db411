//! The engine SDK: connect to a halite master as a principal, publish jobs and follow them to
//! the end, manage keys and enrollment tokens, list minions and jobs, create software configs
//! and deployments and wait for them to finish (OpenStack Heat's model, `docs/engine-guide.md`).
//! The `halite` CLI is built on it.
//!
//! It talks to the master only through the protocol (`docs/protocol.md`), never through
//! `halite-master` internals, so it works against any master that speaks the protocol.
//!
//! ```no_run
//! # async fn example() -> Result<(), halite_client::ClientError> {
//! use halite_client::{Client, ClientConfig, JobEvent};
//! use halite_protocol::message::{JobSpec, Target, TargetKind};
//!
//! let config = ClientConfig::from_master_config("/etc/halite/master.toml".as_ref())?;
//! let client = Client::connect(config).await?;
//! let spec = JobSpec::new(Target { kind: TargetKind::Glob, expr: "web*".into() }, "test.ping");
//! let published = client.publish(spec).await?;
//! loop {
//!     match client.next_job_event(&published.jid).await? {
//!         JobEvent::Update(update) => println!("{} is {:?}", update.minion, update.state),
//!         JobEvent::Done => break,
//!     }
//! }
//! # Ok(()) }
//! ```

mod admin;
mod audit;
mod client;
mod config;
mod connection;
mod deployments;
mod driver;
mod error;
mod events;
mod follow;

pub use admin::Enrollment;
pub use client::{Client, JobEvent, PublishSpec};
pub use config::ClientConfig;
pub use error::ClientError;
pub use events::EventStream;
pub use halite_protocol::message::JobSpec;
