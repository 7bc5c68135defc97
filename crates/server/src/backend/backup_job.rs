//! [`BackupJob`]: the one backup a server runs at a time, on a thread of its own (a backup
//! takes minutes to hours; its HTTP request answers at once), its status for `GET
//! /admin/backup`, and its cancellation when the server shuts down.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    thread::JoinHandle,
    time::Instant,
};

use shardlite_engine::{
    backup::{self, BackupOptions, Progress, ProgressReport, Summary},
    Store,
};

use super::{
    backup_status::{BackupResult, BackupState, BackupStatus},
    BackendError, BackendResult,
};

/// The backup under way or last run, if any.
#[derive(Debug, Default)]
pub struct BackupJob {
    current: Mutex<Option<Running>>,
}

/// How a backup ended (its summary, or why it failed) and how long it took, seconds.
type Outcome = (Result<Summary, String>, f64);

#[derive(Debug)]
struct Running {
    to: PathBuf,
    started: Instant,
    progress: Arc<Progress>,
    /// Set by the thread when it ends, with how long it took.
    outcome: Arc<Mutex<Option<Outcome>>>,
    thread: Option<JoinHandle<()>>,
}

impl BackupJob {
    /// Starts a backup of `store` into `to` on a new thread, unless one is running or `to` is
    /// not a new or empty directory.
    pub fn start(&self, store: Arc<Store>, to: PathBuf, options: BackupOptions) -> BackendResult<BackupStatus> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(running) = current.as_ref().filter(|r| r.outcome_now().is_none()) {
            return Err(BackendError::Conflict(format!(
                "a backup into {} is running; wait for it to end",
                running.to.display()
            )));
        }
        backup::check_destination(&to).map_err(|e| BackendError::Conflict(e.to_string()))?;
        let progress = Arc::new(Progress::default());
        let outcome = Arc::new(Mutex::new(None));
        let thread = {
            let (to, progress, outcome) = (to.clone(), Arc::clone(&progress), Arc::clone(&outcome));
            std::thread::Builder::new()
                .name("shardlite-backup".into())
                .spawn(move || {
                    let started = Instant::now();
                    let result = store.backup(&to, &options, &progress).map_err(|e| e.to_string());
                    if let Err(err) = &result {
                        tracing::error!(to = %to.display(), %err, "backup failed");
                    }
                    *outcome.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((result, started.elapsed().as_secs_f64()));
                })
                .map_err(|e| BackendError::Internal(format!("could not start the backup thread: {e}")))?
        };
        tracing::info!(to = %to.display(), max_rate = ?options.max_rate, "backup started");
        let running = Running { to, started: Instant::now(), progress, outcome, thread: Some(thread) };
        let status = running.status();
        *current = Some(running);
        Ok(status)
    }

    /// The status of the backup running or last run.
    pub fn status(&self) -> BackupStatus {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        match current.as_ref() {
            Some(running) => running.status(),
            None => BackupStatus {
                state: BackupState::Idle,
                to: None,
                seconds: 0.0,
                progress: ProgressReport::default(),
                result: None,
                error: None,
            },
        }
    }

    /// Cancels a running backup and waits for its thread (before the store closes).
    pub fn cancel(&self) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(running) = current.as_mut() {
            running.progress.cancel();
            if let Some(thread) = running.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

impl Running {
    fn outcome_now(&self) -> Option<Outcome> {
        self.outcome.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn status(&self) -> BackupStatus {
        let (state, seconds, result, error) = match self.outcome_now() {
            None => (BackupState::Running, self.started.elapsed().as_secs_f64(), None, None),
            Some((Ok(summary), seconds)) => {
                let result = BackupResult {
                    records: summary.manifest.records(),
                    partitions: summary.manifest.partitions.len(),
                    bytes: summary.bytes,
                    longest_stall_us: summary.longest_stall_us,
                };
                (BackupState::Done, seconds, Some(result), None)
            }
            Some((Err(err), seconds)) => (BackupState::Failed, seconds, None, Some(err)),
        };
        BackupStatus { state, to: Some(self.to.clone()), seconds, progress: self.progress.report(), result, error }
    }
}
