//! Store calls as values: what a client's request or a group's work needs of the store, already
//! decided and allowed, who asked, and what each call's result goes on with. The handlers make
//! them (`admin/`, `deploy/`), the loop makes the calls (`store_calls/`), and the answers go
//! back to the handler that asked; nothing here decides or acts.

pub mod admin;
pub mod deploy;
pub mod group;
