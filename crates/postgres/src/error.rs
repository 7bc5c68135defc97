//! PostgreSQL's failures as the server's [`BackendError`]: the one mapping, for the backend, its
//! statements and its statistics views.

use deadpool_postgres::PoolError;
use shardlite_server::BackendError;

/// A database error as the API reports it.
pub fn db_error(err: tokio_postgres::Error) -> BackendError {
    if err.is_closed() {
        return BackendError::Unavailable(err.to_string());
    }
    match err.as_db_error() {
        // SQLSTATE 53100: disk_full.
        Some(db) if db.code().code() == "53100" => BackendError::DiskFull(db.to_string()),
        Some(db) => BackendError::Database(db.to_string()),
        None => BackendError::Database(err.to_string()),
    }
}

/// A failure to get a pooled connection.
pub fn pool_error(err: PoolError) -> BackendError {
    match err {
        PoolError::Closed => BackendError::Closed,
        PoolError::Backend(err) => db_error(err),
        other => BackendError::Unavailable(other.to_string()),
    }
}
