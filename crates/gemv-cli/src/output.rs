//! Standard output with every write checked.
//!
//! A failed write (a full disk, a terminal gone) is kept and reported once the command ends, with
//! exit status 2; the write also returns the error, so a command that propagates it stops early.
//! A closed pipe (`gemv check | head`) is not a failure: the output ends quietly and the command
//! runs on as it would with its output read to the end.

use std::io::{self, Write};

/// Standard output, or any writer, with its first failure remembered.
pub struct CheckedOutput<W: Write> {
    inner: W,
    /// The reader went away: later writes are dropped.
    closed: bool,
    /// The first failure other than a closed pipe.
    failure: Option<io::Error>,
}

impl CheckedOutput<io::Stdout> {
    /// The process's standard output.
    pub fn stdout() -> Self {
        Self::new(io::stdout())
    }
}

impl<W: Write> CheckedOutput<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Self { inner, closed: false, failure: None }
    }

    fn checked<T>(&mut self, result: io::Result<T>, quiet: T) -> io::Result<T> {
        match result {
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(quiet)
            }
            Err(error) => {
                let kept = io::Error::new(error.kind(), error.to_string());
                self.failure.get_or_insert(kept);
                Err(error)
            }
            Ok(value) => Ok(value),
        }
    }

    /// Flushes; the first failure of any write, if one failed (a closed pipe is none).
    pub fn finish(mut self) -> Result<(), io::Error> {
        let flushed = self.flush();
        match self.failure.take() {
            Some(failure) => Err(failure),
            None => flushed,
        }
    }
}

impl<W: Write> Write for CheckedOutput<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        if let Some(failure) = &self.failure {
            return Err(io::Error::new(failure.kind(), failure.to_string()));
        }
        let result = self.inner.write(buf);
        self.checked(result, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let result = self.inner.flush();
        self.checked(result, ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepts `room` bytes, then fails with `kind`.
    struct Limited {
        room: usize,
        kind: io::ErrorKind,
    }

    impl Write for Limited {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::new(self.kind, "refused"));
            }
            let taken = buf.len().min(self.room);
            self.room -= taken;
            Ok(taken)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_is_returned_and_kept_and_a_closed_pipe_is_quiet() {
        let mut full = CheckedOutput::new(Limited { room: 4, kind: io::ErrorKind::StorageFull });
        assert!(writeln!(full, "ok").is_ok());
        assert!(writeln!(full, "too long").is_err());
        // Later writes fail too, even ones the writer would now take.
        assert!(write!(full, "").is_ok() && write!(full, "x").is_err());
        assert_eq!(full.finish().map_err(|e| e.kind()), Err(io::ErrorKind::StorageFull));

        let mut pipe = CheckedOutput::new(Limited { room: 4, kind: io::ErrorKind::BrokenPipe });
        assert!(writeln!(pipe, "a longer line than the reader takes").is_ok());
        assert!(writeln!(pipe, "more").is_ok());
        assert!(pipe.finish().is_ok());
    }
}
