//! The progress bars of `import` and `export`: how far, how fast, and when done.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of records `what` (e.g. "applied"), with records/s and the ETA.
pub fn records(what: &str, len: u64) -> ProgressBar {
    let template = format!("{{bar:40}} {{human_pos}}/{{human_len}} records {what}, {{per_sec}}, eta {{eta}}");
    ProgressBar::new(len).with_style(ProgressStyle::with_template(&template).expect("a valid template"))
}

/// A bar of input bytes `what` (e.g. "read"), with bytes/s and the ETA.
pub fn bytes(what: &str, len: u64) -> ProgressBar {
    let template =
        format!("{{bar:40}} {{binary_bytes}}/{{binary_total_bytes}} {what}, {{binary_bytes_per_sec}}, eta {{eta}}");
    ProgressBar::new(len).with_style(ProgressStyle::with_template(&template).expect("a valid template"))
}
