//! The progress bars of `import`, `export`, `backup` and `restore`: how far, how fast, and when
//! done.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of records `what` (e.g. "applied"), with records/s and the ETA.
pub fn records(what: &str, len: u64) -> ProgressBar {
    let template = format!("{{bar:40}} {{human_pos}}/{{human_len}} records {what}, {{per_sec}}, eta {{eta}}");
    ProgressBar::new(len).with_style(ProgressStyle::with_template(&template).expect("a valid template"))
}

/// A count of records `what` whose total is not known, with records/s.
pub fn count(what: &str) -> ProgressBar {
    let template = format!("{{spinner}} {{human_pos}} records {what}, {{per_sec}}");
    ProgressBar::no_length().with_style(ProgressStyle::with_template(&template).expect("a valid template"))
}

/// A bar of input bytes `what` (e.g. "read"), with bytes/s and the ETA.
pub fn bytes(what: &str, len: u64) -> ProgressBar {
    let template =
        format!("{{bar:40}} {{binary_bytes}}/{{binary_total_bytes}} {what}, {{binary_bytes_per_sec}}, eta {{eta}}");
    ProgressBar::new(len).with_style(ProgressStyle::with_template(&template).expect("a valid template"))
}

/// Runs `work` on this thread while another moves `bar` to what `report` says (done, total)
/// every 200 ms; clears the bar once `work` returns.
pub fn watch<T: Send>(bar: &ProgressBar, report: impl Fn() -> (u64, u64) + Sync, work: impl FnOnce() -> T) -> T {
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let (position, total) = report();
                bar.set_length(total.max(position));
                bar.set_position(position);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let result = work();
        done.store(true, Ordering::Relaxed);
        result
    });
    bar.finish_and_clear();
    result
}
