//! The console's way to the store: a few connections, each used by one blocking job at a
//! time, every job under a deadline.
//!
//! The stores are synchronous (SQLite; PostgreSQL behind its own I/O thread), so a job runs on
//! tokio's blocking pool and the request awaits it with a deadline: a store that hangs gives
//! the client `503 store-unavailable` after [`StorePool::deadline`], never a hung request. A
//! slot whose store failed is dropped and opened again by the next job, which is how the
//! console recovers when the store comes back (and re-checks that it is migrated).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use heart_fleet_core::{ErrorCode, HeartError};
use heart_fleet_stores::AnyStore;

use super::ApiError;

/// Connections to one store.
pub struct StorePool {
    url: String,
    slots: Vec<Mutex<Option<AnyStore>>>,
    next: AtomicUsize,
    deadline: Duration,
}

impl StorePool {
    /// A pool of `size` lazily opened connections to `url`.
    pub fn new(url: &str, size: usize, deadline: Duration) -> StorePool {
        StorePool {
            url: url.to_owned(),
            slots: (0..size.max(1)).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            deadline,
        }
    }

    /// How long a job may take before its request is answered `503`.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Runs `job` on a connection (opening it first if needed), within the deadline. A
    /// `store-unavailable` or `store-protocol` error drops the connection.
    pub async fn run<T, F>(self: &Arc<Self>, what: &'static str, job: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&mut AnyStore) -> Result<T, HeartError> + Send + 'static,
    {
        let pool = Arc::clone(self);
        let task = tokio::task::spawn_blocking(move || {
            let i = pool.next.fetch_add(1, Ordering::Relaxed) % pool.slots.len();
            let Some(slot) = pool.slots.get(i) else {
                return Err(HeartError::new(ErrorCode::StoreUnavailable, "no connection slot"));
            };
            let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                let store = heart_fleet_stores::open(&pool.url)
                    .map_err(|e| HeartError::new(ErrorCode::StoreUnavailable, e.to_string()))?;
                *slot = Some(store);
            }
            let Some(store) = slot.as_mut() else {
                return Err(HeartError::new(ErrorCode::StoreUnavailable, "no connection"));
            };
            let result = job(store);
            if let Err(e) = &result
                && matches!(e.code, ErrorCode::StoreUnavailable | ErrorCode::StoreProtocol)
            {
                *slot = None;
            }
            result
        });
        match tokio::time::timeout(self.deadline, task).await {
            Err(_) => Err(ApiError::from(HeartError::new(
                ErrorCode::StoreUnavailable,
                format!("{what}: the store did not answer within {} ms", self.deadline.as_millis()),
            ))),
            Ok(Err(join)) => Err(ApiError::internal(format!("{what}: the store job failed ({join})"))),
            Ok(Ok(result)) => result.map_err(ApiError::from),
        }
    }
}
