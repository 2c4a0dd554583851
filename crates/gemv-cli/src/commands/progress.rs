//! Progress on stderr for long runs: a bar on a terminal, a line per quarter otherwise (logs).

use std::io::{IsTerminal, Write};

/// Reports `done` of `total` steps of `what`, counted in `unit` (a plural noun: `timings`).
pub fn progress(done: usize, total: usize, what: &str, unit: &str) {
    let mut stderr = std::io::stderr();
    if stderr.is_terminal() {
        let width = 30;
        let filled = done * width / total.max(1);
        let bar = format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled));
        let _ = write!(stderr, "\r{what} {bar} {done}/{total} {unit}");
        if done == total {
            let _ = writeln!(stderr);
        }
    } else if done == total || done.is_multiple_of((total / 4).max(1)) {
        let _ = writeln!(stderr, "{what}: {done}/{total} {unit}");
    }
}

/// `n` and `noun`, which takes an `s` where `n` is not 1: `1 shard`, `8 shards`.
pub fn counted(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

#[cfg(test)]
mod tests {
    use super::counted;

    #[test]
    fn counts_take_a_plural_except_one() {
        assert_eq!(
            (counted(0, "shard"), counted(1, "shard"), counted(8, "shard")),
            ("0 shards".into(), "1 shard".into(), "8 shards".into())
        );
    }
}
