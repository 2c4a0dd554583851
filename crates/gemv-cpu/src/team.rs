//! A fixed team of threads a launch runs on: the calling thread and `threads - 1` workers.
//!
//! A launch of a few hundred microseconds cannot afford to wake sleeping threads (a futex wake
//! and a reschedule are tens of microseconds, as much as a small launch's whole work), so workers
//! spin for a while after each job, waiting for the next, and only then sleep; the caller runs a
//! share of the work itself and spins until the workers are done. Work is handed out by the job
//! (an atomic counter), so a thread the rest of the machine slows down takes less of it.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker spins for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(500);

/// A job: called once on every thread of the team with that thread's index (0 = the caller).
type Job<'a> = dyn Fn(usize) + Sync + 'a;

/// A job with its lifetime erased: [`Team::run`] returns only after every worker has finished
/// with it, so the reference never outlives the job.
#[derive(Clone, Copy)]
struct ErasedJob(*const Job<'static>);

// SAFETY: the pointee is `Sync` (any thread may call it through a shared reference), and
// `Team::run` keeps it alive until every worker is done with it.
unsafe impl Send for ErasedJob {}

struct Shared {
    /// Bumped once per job; a worker runs each generation once.
    generation: AtomicU64,
    job: Mutex<Option<ErasedJob>>,
    /// Workers done with the current generation.
    finished: AtomicUsize,
    /// The first panic a worker's share of the current job raised.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    stop: AtomicBool,
    /// Workers asleep (or about to be) on `wake`.
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

/// The caller and its workers.
pub(crate) struct Team {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serialises jobs: one runs at a time.
    running: Mutex<()>,
}

impl Team {
    /// A team of `threads` (at least 1: the caller alone); each worker calls `start` first.
    pub(crate) fn new(threads: usize, start: fn()) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            finished: AtomicUsize::new(0),
            panic: Mutex::new(None),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut team = Self { shared, workers: Vec::new(), running: Mutex::new(()) };
        for index in 1..threads.max(1) {
            let shared = Arc::clone(&team.shared);
            let worker = std::thread::Builder::new().name(format!("gemv-cpu-{index}")).spawn(move || {
                start();
                work(&shared, index);
            })?;
            // On an error the team built so far drops, which stops its workers.
            team.workers.push(worker);
        }
        Ok(team)
    }

    /// Threads, the caller included.
    pub(crate) fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(index)` on every thread of the team (index 0 on the calling thread) and returns
    /// when all have finished. A panic in any share is raised here after the others finished.
    pub(crate) fn run(&self, job: &Job<'_>) {
        let _running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if self.workers.is_empty() {
            job(0);
            return;
        }
        let shared = &*self.shared;
        // SAFETY: only the lifetime changes; this function does not return (or unwind) before
        // every worker has finished calling the job (`finished` below), and clears it first.
        let erased = ErasedJob(unsafe { std::mem::transmute::<*const Job<'_>, *const Job<'static>>(job) });
        *shared.job.lock().unwrap_or_else(PoisonError::into_inner) = Some(erased);
        shared.finished.store(0, Ordering::SeqCst);
        shared.generation.fetch_add(1, Ordering::SeqCst);
        if shared.sleepers.load(Ordering::SeqCst) > 0 {
            // Under the lock: a worker between counting itself a sleeper and waiting holds it.
            let _sleep = shared.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            shared.wake.notify_all();
        }
        let own = catch_unwind(AssertUnwindSafe(|| job(0)));
        let mut spins = 0u32;
        while shared.finished.load(Ordering::Acquire) < self.workers.len() {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        *shared.job.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let worker_panic = shared.panic.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Err(panic) = own {
            resume_unwind(panic);
        }
        if let Some(panic) = worker_panic {
            resume_unwind(panic);
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _sleep = self.shared.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            self.shared.wake.notify_all();
        }
        for worker in self.workers.drain(..) {
            // A worker never panics outside a job (those panics are caught), so join only waits.
            let _ = worker.join();
        }
    }
}

/// A worker's life: wait for each generation (spinning, then asleep), run its share, count it.
fn work(shared: &Shared, index: usize) {
    let mut seen = 0;
    loop {
        let spin_until = Instant::now() + SPIN;
        let mut spins = 0u32;
        loop {
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            if shared.generation.load(Ordering::Acquire) != seen {
                break;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(256) || Instant::now() < spin_until {
                std::hint::spin_loop();
                continue;
            }
            let sleep = shared.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            shared.sleepers.fetch_add(1, Ordering::SeqCst);
            if shared.generation.load(Ordering::SeqCst) == seen && !shared.stop.load(Ordering::SeqCst) {
                drop(shared.wake.wait(sleep).unwrap_or_else(PoisonError::into_inner));
            }
            shared.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        seen = shared.generation.load(Ordering::Acquire);
        let job = *shared.job.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ErasedJob(job)) = job {
            // SAFETY: `Team::run` keeps the job alive until this worker counts itself finished.
            let job = unsafe { &*job };
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| job(index))) {
                shared.panic.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(panic);
            }
        }
        shared.finished.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_runs_each_job_once_and_jobs_see_their_borrows() {
        for threads in [1, 2, 3, 5] {
            let team = Team::new(threads, || {}).expect("threads");
            assert_eq!(team.threads(), threads);
            for round in 0..50 {
                let calls: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
                let total = AtomicUsize::new(0);
                team.run(&|index| {
                    calls[index].fetch_add(1, Ordering::Relaxed);
                    total.fetch_add(round, Ordering::Relaxed);
                });
                assert!(calls.iter().all(|c| c.load(Ordering::Relaxed) == 1), "{threads} threads, round {round}");
                assert_eq!(total.load(Ordering::Relaxed), round * threads);
            }
        }
    }

    #[test]
    fn workers_asleep_wake_for_the_next_job() {
        let team = Team::new(2, || {}).expect("threads");
        std::thread::sleep(SPIN * 4);
        let ran = AtomicUsize::new(0);
        team.run(&|_| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ran.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_panic_in_a_worker_reaches_the_caller_and_the_team_still_works() {
        let team = Team::new(3, || {}).expect("threads");
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            team.run(&|index| {
                if index == 2 {
                    panic!("share 2 failed");
                }
            })
        }));
        let message = outcome.expect_err("the panic is raised").downcast::<&str>().map(|m| *m);
        assert_eq!(message.ok(), Some("share 2 failed"));
        let ran = AtomicUsize::new(0);
        team.run(&|_| {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ran.load(Ordering::Relaxed), 3);
    }
}
