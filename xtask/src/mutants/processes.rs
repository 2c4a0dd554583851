//! Commands run side by side, stopped together at the first failure or a timeout.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `commands` side by side until one fails (the others are then stopped), all succeed, or
/// `timeout` passes: `Some(all succeeded)`, or None when it timed out. The judge runs a stage's
/// builds this way (each `gemv check` keeps about one core busy, and the machines this pass runs
/// on have two); the emulator's tests and the second chance run one command through it.
pub(super) fn run_all_with_timeout(commands: Vec<Command>, timeout: Duration) -> Result<Option<bool>, String> {
    let mut children = Vec::with_capacity(commands.len());
    for mut command in commands {
        match command.stdout(Stdio::null()).stderr(Stdio::null()).spawn() {
            Ok(child) => children.push(Some(child)),
            Err(error) => {
                stop_all(&mut children);
                return Err(error.to_string());
            }
        }
    }
    let started = Instant::now();
    loop {
        let mut running = false;
        for slot in &mut children {
            let Some(child) = slot else { continue };
            match child.try_wait().map_err(|e| e.to_string())? {
                Some(status) if !status.success() => {
                    *slot = None;
                    stop_all(&mut children);
                    return Ok(Some(false));
                }
                Some(_) => *slot = None,
                None => running = true,
            }
        }
        if !running {
            return Ok(Some(true));
        }
        if started.elapsed() > timeout {
            stop_all(&mut children);
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills and reaps every child still running.
pub(super) fn stop_all(children: &mut [Option<std::process::Child>]) {
    for mut child in children.iter_mut().filter_map(Option::take) {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_by_side_commands_stop_at_the_first_failure_or_the_timeout() {
        let shell = |script: &str| {
            let mut command = Command::new("sh");
            command.args(["-c", script]);
            command
        };
        let long = Duration::from_secs(60);
        assert_eq!(run_all_with_timeout(vec![shell("true"), shell("sleep 0.2")], long), Ok(Some(true)));
        let started = Instant::now();
        assert_eq!(run_all_with_timeout(vec![shell("sleep 30"), shell("false")], long), Ok(Some(false)));
        assert!(started.elapsed() < Duration::from_secs(20), "a failure stops the others");
        let started = Instant::now();
        assert_eq!(run_all_with_timeout(vec![shell("true"), shell("sleep 30")], Duration::from_millis(300)), Ok(None));
        assert!(started.elapsed() < Duration::from_secs(20), "the timeout stops the rest");
    }
}
