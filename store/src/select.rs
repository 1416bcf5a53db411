//! Which store a master uses (`[store]` in master.toml): the embedded SQLite file by default,
//! or a PostgreSQL database that several masters share.

use std::path::PathBuf;
#[cfg(feature = "io")]
use std::str::FromStr;

use serde::Deserialize;
#[cfg(feature = "io")]
use sqlx::postgres::PgConnectOptions;

#[cfg(feature = "io")]
use super::StoreError;

/// `[store]`: where the master keeps its state.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `postgres://user@host:port/database` (`postgresql://` too). Unset: SQLite, in
    /// `state_dir/master.db`. Parts left out come from the standard `PG*` variables
    /// (`PGHOST`, `PGUSER`, `PGPASSWORD`, `PGSSLMODE`, …) and `~/.pgpass`.
    pub url: Option<String>,
    /// A file whose first line is the database password (instead of one in the URL, where it
    /// would show in process listings and backups of the config).
    pub password_file: Option<PathBuf>,
}

/// The backend a [`StoreConfig`] names.
#[cfg(feature = "io")]
#[derive(Debug, Clone)]
pub enum Backend {
    /// The embedded file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres(Box<PgConnectOptions>),
}

impl StoreConfig {
    /// Checks the URL's scheme and syntax, as a config is read (the password file is read, and
    /// the connection's parameters taken, when connecting: [`StoreConfig::backend`]).
    pub fn validate(&self) -> Result<(), StoreUrlError> {
        match &self.url {
            None => Ok(()),
            Some(url) => {
                postgres_scheme(url)?;
                // The grammar PostgreSQL URLs are read with (sqlx reads them through `url`).
                url::Url::parse(url).map(drop).map_err(|error| StoreUrlError::Invalid(redact(&error.to_string(), url)))
            }
        }
    }
}

#[cfg(feature = "io")]
impl StoreConfig {
    /// The backend, with the password file read.
    pub fn backend(&self) -> Result<Backend, StoreError> {
        let Some(url) = &self.url else { return Ok(Backend::Sqlite) };
        let mut options = postgres_options(url).map_err(|error| StoreError::Unavailable(error.to_string()))?;
        if let Some(path) = &self.password_file {
            refuse_shared_secret(path)?;
            let text = std::fs::read_to_string(path)
                .map_err(|error| StoreError::Unavailable(format!("password_file {}: {error}", path.display())))?;
            options = options.password(text.lines().next().unwrap_or("").trim_end());
        }
        Ok(Backend::Postgres(Box::new(options)))
    }

    /// Where the store is, for logs and errors: never the password.
    pub fn describe(&self) -> String {
        match self.url.as_deref().map(postgres_options) {
            None => "sqlite".into(),
            Some(Ok(options)) => describe_postgres(&options),
            Some(Err(_)) => "postgres (invalid url)".into(),
        }
    }
}

#[cfg(feature = "io")]
/// A password file that group or others may read has leaked the database password to every
/// local account: refused (as ssh refuses such a key), with the fix.
fn refuse_shared_secret(path: &std::path::Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|error| StoreError::Unavailable(format!("password_file {}: {error}", path.display())))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(StoreError::Unavailable(format!(
            "password_file {} may be read by group or others (mode {:o}): chmod 600 it",
            path.display(),
            mode & 0o777
        )));
    }
    Ok(())
}

/// `postgres://user@host:port/db`, without the password.
#[cfg(feature = "io")]
pub fn describe_postgres(options: &PgConnectOptions) -> String {
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username())
    )
}

/// Why a store's `url` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreUrlError {
    /// Not a `postgres://` URL; the scheme.
    #[error(
        "url: {0:?} is not a store this master knows; use postgres://user@host:port/database, \
         or leave url out for the embedded SQLite file"
    )]
    Scheme(String),
    /// A PostgreSQL URL that does not parse; the parser's reason, without the password.
    #[error("url: {0}")]
    Invalid(String),
}

fn postgres_scheme(url: &str) -> Result<(), StoreUrlError> {
    let scheme = url.split("://").next().unwrap_or("");
    if !matches!(scheme, "postgres" | "postgresql") {
        return Err(StoreUrlError::Scheme(scheme.to_owned()));
    }
    Ok(())
}

#[cfg(feature = "io")]
fn postgres_options(url: &str) -> Result<PgConnectOptions, StoreUrlError> {
    postgres_scheme(url)?;
    PgConnectOptions::from_str(url).map_err(|error| StoreUrlError::Invalid(redact(&error.to_string(), url)))
}

/// An error text with any password from the URL cut out.
fn redact(text: &str, url: &str) -> String {
    let password = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('@').next().filter(|_| rest.contains('@')))
        .and_then(|user_info| user_info.split_once(':').map(|(_, p)| p))
        .filter(|p| !p.is_empty());
    match password {
        Some(password) => text.replace(password, "***"),
        None => text.to_owned(),
    }
}

#[cfg(all(test, feature = "io"))]
mod tests {
    use super::*;

    fn config(url: &str) -> StoreConfig {
        StoreConfig { url: Some(url.into()), password_file: None }
    }

    #[test]
    fn only_postgres_urls_are_taken_and_the_password_is_never_shown() {
        assert!(matches!(StoreConfig::default().backend(), Ok(Backend::Sqlite)));
        let error = config("mysql://db/halite").validate().unwrap_err().to_string();
        assert!(error.contains("\"mysql\"") && error.contains("postgres://"), "{error}");
        let good = config("postgres://halite:s3cret@db.example:6432/fleet");
        good.validate().unwrap();
        assert_eq!(good.describe(), "postgres://halite@db.example:6432/fleet");
        let error = config("postgres://halite:s3cret@db.example:notaport/fleet").validate().unwrap_err().to_string();
        assert!(error.starts_with("url:") && !error.contains("s3cret"), "{error}");
    }

    #[test]
    fn the_password_file_gives_the_password() {
        let path = std::env::temp_dir().join(format!("halite-pw-{}", std::process::id()));
        std::fs::write(&path, "from-file\nignored\n").unwrap();
        let config = StoreConfig { url: Some("postgres://halite@db/fleet".into()), password_file: Some(path.clone()) };
        use std::os::unix::fs::PermissionsExt;
        for shared in [0o640, 0o604, 0o644] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(shared)).unwrap();
            let error = config.backend().unwrap_err().to_string();
            assert!(error.contains("chmod 600") && error.contains(&format!("{shared:o}")), "{error}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let Backend::Postgres(options) = config.backend().unwrap() else { panic!("postgres") };
        assert!(format!("{options:?}").contains("from-file"));
        std::fs::remove_file(&path).unwrap();
        let error = config.backend().unwrap_err().to_string();
        assert!(error.contains("password_file"), "{error}");
    }
}
