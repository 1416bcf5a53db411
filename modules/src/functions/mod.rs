//! The built-in functions, one module per `module.` prefix.

mod accounts;
mod archive;
mod cmd;
pub(crate) mod deploy;
mod event;
mod file;
mod grains;
mod peer;
mod pkg;
mod plan;
mod service;
mod sys;
mod test;

use crate::function::Function;

/// Every built-in function. The registry and its tests are built from this one list.
pub(crate) fn all() -> Vec<Box<dyn Function>> {
    vec![
        Box::new(test::Ping),
        Box::new(test::Echo),
        Box::new(test::Sleep),
        Box::new(test::Version),
        Box::new(grains::Items),
        Box::new(grains::Get),
        Box::new(sys::ListFunctions),
        Box::new(sys::Doc),
        Box::new(cmd::Run),
        Box::new(cmd::Script),
        Box::new(file::Managed),
        Box::new(file::Absent),
        Box::new(file::Directory),
        Box::new(file::Read),
        Box::new(file::Stat),
        Box::new(archive::Extract),
        Box::new(accounts::UserPresent),
        Box::new(accounts::UserAbsent),
        Box::new(accounts::GroupPresent),
        Box::new(accounts::GroupAbsent),
        Box::new(pkg::Install),
        Box::new(pkg::Remove),
        Box::new(pkg::List),
        Box::new(pkg::Version),
        Box::new(pkg::Refresh),
        Box::new(service::Start),
        Box::new(service::Stop),
        Box::new(service::Restart),
        Box::new(service::Reload),
        Box::new(service::Status),
        Box::new(service::Enabled),
        Box::new(service::Enable),
        Box::new(service::Disable),
        Box::new(event::Send),
        Box::new(peer::Publish),
        Box::new(plan::Run),
        Box::new(deploy::Apply),
    ]
}
