//! Ctrl-C (SIGINT) and SIGTERM for the commands that work on a data directory or a file
//! themselves (`export`, `import`, `check`, `stats`, `load`).
//!
//! The first signal only raises a flag, which their loops look at between steps ([`check`]):
//! they stop where nothing is half done, close the store (its session ends cleanly, so the
//! directory is left as a clean close leaves it), remove their partial files and say what to run
//! next. A second signal ends the process at once (exit 130), printing the command's [`note`] on
//! what that leaves behind.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Mutex,
};

use signal_hook::{
    consts::{SIGINT, SIGTERM},
    iterator::Signals,
};

/// Raised by the first signal.
static RAISED: AtomicBool = AtomicBool::new(false);
/// What a second signal leaves behind, said as the process ends.
static NOTE: Mutex<String> = Mutex::new(String::new());

/// The exit status of a command ended by a signal (128 + SIGINT), as shells report it.
pub const EXIT_STATUS: u8 = 130;

/// The command stopped because it was asked to.
#[derive(Debug, Clone, Copy)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted (Ctrl-C or SIGTERM)")
    }
}

impl std::error::Error for Interrupted {}

/// Catches SIGINT and SIGTERM from now on, as the module's doc says.
pub fn catch() -> std::io::Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("shardlite-signals".into()).spawn(move || {
        for _ in signals.forever() {
            if RAISED.swap(true, Ordering::SeqCst) {
                let note = NOTE.lock().unwrap_or_else(|p| p.into_inner()).clone();
                eprintln!("\nstopped at once{}", if note.is_empty() { String::new() } else { format!(": {note}") });
                std::process::exit(i32::from(EXIT_STATUS));
            }
            eprintln!("\nstopping (Ctrl-C again to stop at once)");
        }
    })?;
    Ok(())
}

/// `Err(Interrupted)` once a signal came.
pub fn check() -> Result<(), Interrupted> {
    match RAISED.load(Ordering::SeqCst) {
        true => Err(Interrupted),
        false => Ok(()),
    }
}

/// Sets what a second signal, ending the process at once, leaves behind (said as it ends).
pub fn note(what: impl Into<String>) {
    *NOTE.lock().unwrap_or_else(|p| p.into_inner()) = what.into();
}

/// Whether `err` comes from an interruption.
pub fn caused(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| cause.is::<Interrupted>())
}
