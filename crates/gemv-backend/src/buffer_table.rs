//! Buffer ids to a backend's buffers: one table for every backend (host memory, CUDA slices,
//! wgpu buffers), so ids, freed buffers and out-of-range ranges are checked the same way
//! everywhere.

use crate::{BufferRange, DeviceBuffer, Error, Result};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Live buffers of type `T`, each with its size in bytes.
#[derive(Debug)]
pub struct BufferTable<T> {
    backend: &'static str,
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    next_id: u64,
    live: HashMap<u64, (usize, T)>,
}

impl<T> BufferTable<T> {
    /// An empty table; `backend` names it in errors.
    pub fn new(backend: &'static str) -> Self {
        Self { backend, state: Mutex::new(State { next_id: 1, live: HashMap::new() }) }
    }

    /// Registers a buffer of `len` bytes.
    pub fn insert(&self, len: usize, value: T) -> DeviceBuffer {
        let mut state = self.lock().state;
        let id = state.next_id;
        state.next_id += 1;
        state.live.insert(id, (len, value));
        DeviceBuffer::new(id, len)
    }

    /// Unregisters a buffer; later use of its id is [`Error::UnknownBuffer`].
    pub fn remove(&self, buffer: DeviceBuffer) -> Result<T> {
        let mut guard = self.lock();
        let unknown = Error::UnknownBuffer { id: buffer.id(), backend: guard.backend };
        match guard.state.live.get(&buffer.id()) {
            Some((len, _)) if *len == buffer.len() => {
                guard.state.live.remove(&buffer.id()).map(|(_, v)| v).ok_or(unknown)
            }
            _ => Err(unknown),
        }
    }

    /// Holds the table (so buffers stay alive while a launch is enqueued).
    pub fn lock(&self) -> BufferGuard<'_, T> {
        // A panic while holding the lock cannot leave a buffer half-registered: recover.
        BufferGuard { backend: self.backend, state: self.state.lock().unwrap_or_else(|p| p.into_inner()) }
    }
}

/// The locked table.
pub struct BufferGuard<'a, T> {
    backend: &'static str,
    state: MutexGuard<'a, State<T>>,
}

impl<T> BufferGuard<'_, T> {
    /// Checks the id, the recorded size and the range's bounds.
    fn check(&self, what: &'static str, range: BufferRange) -> Result<()> {
        let unknown = Error::UnknownBuffer { id: range.buffer.id(), backend: self.backend };
        match self.state.live.get(&range.buffer.id()) {
            Some((len, _)) if *len == range.buffer.len() => range.check_bounds(what),
            _ => Err(unknown),
        }
    }

    /// The buffer behind `range`, after checking its id, its size and the range's bounds.
    pub fn get(&self, what: &'static str, range: BufferRange) -> Result<&T> {
        self.check(what, range)?;
        Ok(&self.state.live[&range.buffer.id()].1)
    }

    /// Like [`get`](Self::get), mutably.
    pub fn get_mut(&mut self, what: &'static str, range: BufferRange) -> Result<&mut T> {
        self.check(what, range)?;
        self.state
            .live
            .get_mut(&range.buffer.id())
            .map(|(_, value)| value)
            .ok_or(Error::UnknownBuffer { id: range.buffer.id(), backend: self.backend })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_ranges_and_freed_buffers_are_checked() {
        let table = BufferTable::new("test");
        let a = table.insert(16, "a");
        let b = table.insert(8, "b");
        assert_ne!(a.id(), b.id());
        assert_eq!((a.len(), a.is_empty(), b.len()), (16, false, 8));
        assert!(DeviceBuffer::new(a.id(), 0).is_empty());
        assert_eq!(table.lock().get("x", a.range(4, 12)).ok().copied(), Some("a"));
        assert!(matches!(table.lock().get("x", a.range(8, 9)), Err(Error::RangeOutOfBounds { what: "x", .. })));
        assert!(matches!(table.lock().get("x", a.range(usize::MAX, 2)), Err(Error::RangeOutOfBounds { .. })));
        // An id with another size is not this table's buffer.
        let forged = DeviceBuffer::new(a.id(), 32);
        assert!(matches!(table.lock().get("x", forged.whole()), Err(Error::UnknownBuffer { .. })));
        assert!(matches!(table.remove(forged), Err(Error::UnknownBuffer { .. })));
        assert_eq!(table.remove(a).ok(), Some("a"));
        assert!(matches!(table.lock().get("x", a.whole()), Err(Error::UnknownBuffer { backend: "test", .. })));
        assert!(matches!(table.remove(a), Err(Error::UnknownBuffer { .. })));
        *table.lock().get_mut("x", b.whole()).expect("live") = "c";
        assert_eq!(table.remove(b).ok(), Some("c"));
    }
}
