//! Progress on stderr for long runs: a bar on a terminal, a line per quarter otherwise (logs).

use std::io::{IsTerminal, Write};

/// Reports `done` of `total` steps of `what`.
pub fn progress(done: usize, total: usize, what: &str) {
    let mut stderr = std::io::stderr();
    if stderr.is_terminal() {
        let width = 30;
        let filled = done * width / total.max(1);
        let _ = write!(stderr, "\r{what} [{}{}] {done}/{total}", "#".repeat(filled), ".".repeat(width - filled));
        if done == total {
            let _ = writeln!(stderr);
        }
    } else if done == total || done.is_multiple_of((total / 4).max(1)) {
        let _ = writeln!(stderr, "{what}: {done}/{total}");
    }
}
