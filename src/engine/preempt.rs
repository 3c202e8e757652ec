//! CPU budgets for Lua code without a per-instruction hook.
//!
//! Lua 5.4's count hook makes every VM instruction call `luaG_traceexec` once any count hook is
//! set, whatever its period: 14% of the default rules' instructions and 7–27% of their time
//! (BENCHMARKS.md). So no hook is set while rules run normally. A watchdog thread reads the CPU
//! clock of every thread running budgeted Lua (`pthread_getcpuclockid`) every tick (a quarter of
//! the smallest budget, 1–10 ms; it sleeps without ticking while no Lua runs); when the
//! running call (a rule, or a rule file's top-level code) has used its budget, or the scan its
//! message budget, it sends the thread `SIGURG`. The handler, on that thread, arms a count hook
//! of period 1 on the Lua state — `lua_sethook` is documented as safe to call from a signal
//! handler, and it is how the `lua` interpreter handles Ctrl-C — and the hook raises an error at
//! the next VM instruction. It stays armed (so neither `pcall` nor an error handler can keep the
//! rule running) until the owning thread disarms it after the call returns.
//!
//! Budgets count CPU time of the thread, not wall time: a worker descheduled by a busy machine
//! is not charged. A call is charged from the first tick that sees it (at most one tick late).
//!
//! Races are settled by epochs: each budgeted call gets a fresh number; the watchdog names the
//! epoch it wants stopped, and the handler arms the hook only if that call is still the one
//! running on the interrupted thread. A signal that arrives after the call ended does nothing.

// Cargo.toml denies unsafe code in every target; this module is one of the two that allow it
// (the other is `engine::ffi`): signals, thread CPU clocks and the stop hook, each unsafe block
// with the reason it holds (`SAFETY:`).
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Duration;

use mlua::{ffi, Lua};

/// Budgets are set for optimized code. Unoptimized (debug) builds run rules and their Rust
/// primitives 10–30× slower, so they get this many times the budgets: the same rules stop in
/// tests as in release builds.
const BUILD_FACTOR: u64 = if cfg!(debug_assertions) { 20 } else { 1 };
/// How often the watchdog reads the clocks: a quarter of the smallest budget registered,
/// within these bounds (a stop lands between one and two ticks after the budget is spent).
const TICK_MIN_NS: u64 = 1_000_000;
const TICK_MAX_NS: u64 = 10_000_000;
static TICK_NS: AtomicU64 = AtomicU64::new(TICK_MAX_NS);
/// Set while the watchdog sleeps because no budgeted Lua runs; the next scan or call wakes it.
/// An idle daemon then costs no wake-ups.
static PARKED: AtomicBool = AtomicBool::new(false);
static WATCHDOG: OnceLock<std::thread::Thread> = OnceLock::new();
/// The signal that asks a thread to stop its running Lua call (ignored by default).
const SIGNAL: libc::c_int = libc::SIGURG;

/// Why a budgeted call was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// It used its own budget.
    Call,
    /// The scan used the message budget.
    Message,
}

/// What the watchdog and the signal handler share with the thread that owns a Lua state.
struct Slot {
    thread: libc::pthread_t,
    clock: libc::clockid_t,
    state: AtomicPtr<ffi::lua_State>,
    /// Budget of the running call (set per call), and of a scan.
    call_budget_ns: AtomicU64,
    message_budget_ns: u64,
    /// Epoch of the running budgeted call, 0 when none runs.
    call: AtomicU64,
    /// Epoch of the running scan, 0 outside scans.
    scan: AtomicU64,
    next_epoch: AtomicU64,
    /// The call epoch the watchdog wants stopped.
    kill: AtomicU64,
    /// Why (a `Stop` as u8: 1 call, 2 message).
    why: AtomicU8,
    /// The stop hook is armed for the running call.
    fired: AtomicBool,
    /// The scan epoch whose message budget is spent: its remaining rules are skipped. An epoch,
    /// not a flag, so a verdict the watchdog reaches as one scan ends cannot land on the next.
    over_scan: AtomicU64,
    // The watchdog's own bookkeeping: the epochs it last saw and the thread's CPU clock then.
    seen_call: AtomicU64,
    seen_call_cpu: AtomicU64,
    seen_scan: AtomicU64,
    seen_scan_cpu: AtomicU64,
}

thread_local! {
    /// The slot of the budgeted call running on this thread (null when none): what the signal
    /// handler and the stop hook look at. Const-initialized, so reading it allocates nothing.
    static ACTIVE: Cell<*const Slot> = const { Cell::new(std::ptr::null()) };
}

static REGISTRY: Mutex<Vec<Arc<Slot>>> = Mutex::new(Vec::new());
static START: Once = Once::new();

/// The budgets of one Lua state, used on the thread that created it.
pub(super) struct Preempt {
    slot: Arc<Slot>,
    call_budget_ns: u64,
    /// Not `Send`: the slot names the creating thread.
    _local: std::marker::PhantomData<*const ()>,
}

impl Preempt {
    /// Registers `lua` (which must stay on this thread) with the watchdog.
    pub(super) fn new(lua: &Lua, call_budget: Duration, message_budget: Duration) -> Self {
        let call_budget_ns = nanos(call_budget);
        let tick = (call_budget_ns.min(nanos(message_budget)) / 4).clamp(TICK_MIN_NS, TICK_MAX_NS);
        TICK_NS.fetch_min(tick, Relaxed);
        START.call_once(start);
        let mut state = std::ptr::null_mut();
        // SAFETY: the closure only reads the state pointer; nothing is pushed or popped.
        if let Err(e) = unsafe { lua.exec_raw::<()>((), |l| state = l) } {
            // Without the pointer the handler never arms a hook: budgets go unenforced here.
            tracing::error!(error = %e, "cannot reach the Lua state for its CPU budget");
        }
        // SAFETY: pthread_self has no preconditions; the clock id of the calling thread is
        // valid while the thread lives, and the slot is unregistered (on this thread) before
        // it ends.
        let thread = unsafe { libc::pthread_self() };
        let mut clock: libc::clockid_t = 0;
        if unsafe { libc::pthread_getcpuclockid(thread, &mut clock) } != 0 {
            clock = libc::CLOCK_THREAD_CPUTIME_ID;
        }
        let slot = Arc::new(Slot {
            thread,
            clock,
            state: AtomicPtr::new(state),
            call_budget_ns: AtomicU64::new(call_budget_ns),
            message_budget_ns: nanos(message_budget),
            call: AtomicU64::new(0),
            scan: AtomicU64::new(0),
            next_epoch: AtomicU64::new(1),
            kill: AtomicU64::new(0),
            why: AtomicU8::new(0),
            fired: AtomicBool::new(false),
            over_scan: AtomicU64::new(0),
            seen_call: AtomicU64::new(0),
            seen_call_cpu: AtomicU64::new(0),
            seen_scan: AtomicU64::new(0),
            seen_scan_cpu: AtomicU64::new(0),
        });
        registry().push(Arc::clone(&slot));
        Preempt {
            slot,
            call_budget_ns,
            _local: std::marker::PhantomData,
        }
    }

    /// A fresh epoch (only the owning thread writes the counter: no read-modify-write).
    fn epoch(&self) -> u64 {
        let e = self.slot.next_epoch.load(Relaxed);
        self.slot.next_epoch.store(e + 1, Relaxed);
        e
    }

    /// Starts a scan: the message budget runs from here to `end_scan`.
    pub(super) fn begin_scan(&self) {
        self.slot.scan.store(self.epoch(), Relaxed);
        wake();
    }

    pub(super) fn end_scan(&self) {
        self.slot.scan.store(0, Relaxed);
    }

    /// Whether this scan's message budget is spent. (Only this thread writes `scan`.)
    pub(super) fn message_over(&self) -> bool {
        let e = self.slot.scan.load(Relaxed);
        e != 0 && self.slot.over_scan.load(Relaxed) == e
    }

    /// Whether the running call is being stopped (protected calls inside it re-raise).
    pub(super) fn stopping(&self) -> bool {
        self.slot.fired.load(Relaxed)
    }

    /// Inside `run`, starts the budget of a new call: `run_checks` (engine/ffi/rules.rs) runs
    /// several rules in one call into Lua and starts each this way, so each is charged and
    /// stopped on its own.
    /// A stop the watchdog asked for the previous call is dropped with its epoch.
    pub(super) fn next_call(&self) {
        compiler_fence(SeqCst);
        self.slot.call.store(self.epoch(), Relaxed);
        compiler_fence(SeqCst);
    }

    /// Runs `f` (one call into Lua) under the call budget. `Some(stop)` when the watchdog
    /// stopped it; the hook is disarmed again before this returns.
    pub(super) fn run<R>(&self, f: impl FnOnce() -> R) -> (R, Option<Stop>) {
        self.run_for(None, f)
    }

    /// `run` with another budget than the state's call budget (a rule file's top-level code).
    pub(super) fn run_for<R>(
        &self,
        budget: Option<Duration>,
        f: impl FnOnce() -> R,
    ) -> (R, Option<Stop>) {
        // The signal handler runs on this thread, so program order (kept by compiler fences)
        // is all it needs; the watchdog on another thread may read stale epochs, which only
        // delays a stop by a tick.
        let s = &*self.slot;
        s.call_budget_ns
            .store(budget.map_or(self.call_budget_ns, nanos), Relaxed);
        let outer = ACTIVE.with(|a| a.replace(Arc::as_ptr(&self.slot)));
        s.call.store(self.epoch(), Relaxed);
        if s.scan.load(Relaxed) == 0 {
            // Outside scans (a rule file's top-level code) the watchdog may be asleep.
            wake();
        }
        compiler_fence(SeqCst);
        let r = f();
        compiler_fence(SeqCst);
        // From here the handler ignores signals for this call; then disarm.
        s.call.store(0, Relaxed);
        compiler_fence(SeqCst);
        ACTIVE.with(|a| a.set(outer));
        let stop = if s.fired.load(Relaxed) {
            s.fired.store(false, Relaxed);
            // SAFETY: the state belongs to this thread and no Lua code is running.
            unsafe { ffi::lua_sethook(s.state.load(SeqCst), None, 0, 0) };
            Some(if s.why.load(SeqCst) == 2 {
                Stop::Message
            } else {
                Stop::Call
            })
        } else {
            None
        };
        (r, stop)
    }
}

impl Drop for Preempt {
    fn drop(&mut self) {
        // Under the registry lock: the watchdog signals threads only while holding it, so no
        // signal names this slot once it is gone.
        registry().retain(|s| !Arc::ptr_eq(s, &self.slot));
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos()
        .saturating_mul(BUILD_FACTOR as u128)
        .min(u64::MAX as u128) as u64
}

fn registry() -> std::sync::MutexGuard<'static, Vec<Arc<Slot>>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Installs the signal handler and starts the watchdog (once per process).
fn start() {
    // SAFETY: a plain sigaction with a handler that only touches atomics, a const thread-local
    // and lua_sethook (async-signal-safe by Lua's design, see lua.c's laction).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(SIGNAL, &sa, std::ptr::null_mut()) != 0 {
            tracing::error!(
                "cannot install the Lua budget signal handler; runaway rules will not be stopped"
            );
        }
    }
    let spawned = std::thread::Builder::new()
        .name("shrike-lua-watchdog".into())
        .spawn(watchdog);
    if let Ok(handle) = &spawned {
        let _ = WATCHDOG.set(handle.thread().clone());
    }
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the Lua budget watchdog; runaway rules will not be stopped");
    }
}

fn cpu_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clock belongs to a registered (live) thread.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Wakes the watchdog if it sleeps for want of work. Called after this thread published its
/// scan or call epoch: the fence orders that store before the load of `PARKED`, and the
/// watchdog stores `PARKED` before it looks at the epochs again, so one of the two sees the
/// other.
fn wake() {
    fence(SeqCst);
    if PARKED.load(Relaxed) && PARKED.swap(false, SeqCst) {
        if let Some(t) = WATCHDOG.get() {
            t.unpark();
        }
    }
}

fn any_running(slots: &[Arc<Slot>]) -> bool {
    slots
        .iter()
        .any(|s| s.call.load(SeqCst) != 0 || s.scan.load(SeqCst) != 0)
}

fn watchdog() {
    loop {
        std::thread::sleep(Duration::from_nanos(TICK_NS.load(Relaxed)));
        if !check(&registry()) {
            PARKED.store(true, SeqCst);
            if any_running(&registry()) {
                PARKED.store(false, SeqCst);
                continue;
            }
            while PARKED.load(SeqCst) {
                std::thread::park();
            }
        }
    }
}

/// One tick: stops what is over budget; whether any budgeted Lua was running.
fn check(slots: &[Arc<Slot>]) -> bool {
    let mut running = false;
    for s in slots.iter() {
        let call = s.call.load(SeqCst);
        let scan = s.scan.load(SeqCst);
        if call == 0 && scan == 0 {
            continue;
        }
        running = true;
        let Some(now) = cpu_ns(s.clock) else { continue };
        let mut why = 0u8;
        if scan != 0 {
            if s.seen_scan.swap(scan, SeqCst) != scan {
                s.seen_scan_cpu.store(now, SeqCst);
            } else if now.saturating_sub(s.seen_scan_cpu.load(SeqCst)) > s.message_budget_ns
                && s.over_scan.swap(scan, SeqCst) != scan
            {
                why = 2;
            }
        }
        if call != 0 {
            if s.seen_call.swap(call, SeqCst) != call {
                s.seen_call_cpu.store(now, SeqCst);
            } else if why == 0
                && now.saturating_sub(s.seen_call_cpu.load(SeqCst)) > s.call_budget_ns.load(SeqCst)
            {
                why = 1;
            }
            if why == 0 && scan != 0 && s.over_scan.load(SeqCst) == scan {
                // A rule that started after the message budget ran out.
                why = 2;
            }
        }
        if why != 0 && call != 0 && s.kill.load(SeqCst) != call {
            s.why.store(why, SeqCst);
            s.kill.store(call, SeqCst);
            // SAFETY: the thread is alive: its slot is still registered, and slots leave
            // the registry (under this lock) before their thread can end.
            unsafe { libc::pthread_kill(s.thread, SIGNAL) };
        }
    }
    running
}

extern "C" fn on_signal(_: libc::c_int) {
    let p = ACTIVE.with(|a| a.get());
    if p.is_null() {
        return;
    }
    // SAFETY: ACTIVE points at a slot kept alive by the `Preempt` whose `run` is on this
    // thread's stack.
    let s = unsafe { &*p };
    let call = s.call.load(SeqCst);
    let state = s.state.load(SeqCst);
    if call == 0 || call != s.kill.load(SeqCst) || state.is_null() {
        return;
    }
    s.fired.store(true, SeqCst);
    // SAFETY: the state is the one running this call, on this thread; lua_sethook may be
    // called asynchronously (ldebug.c).
    unsafe { ffi::lua_sethook(state, Some(stop_hook), ffi::LUA_MASKCOUNT, 1) };
}

/// Raises at every VM instruction while the running call is being stopped.
unsafe extern "C-unwind" fn stop_hook(l: *mut ffi::lua_State, _: *mut ffi::lua_Debug) {
    let p = ACTIVE.with(|a| a.get());
    // SAFETY: as in `on_signal`.
    if p.is_null() || !unsafe { &*p }.fired.load(SeqCst) {
        // SAFETY: `l` is the running state; removing its hook is always allowed in a hook.
        unsafe { ffi::lua_sethook(l, None, 0, 0) };
        return;
    }
    // SAFETY: raising from a hook is how Lua stops code; this frame owns nothing to drop.
    unsafe { ffi::luaL_error(l, c"CPU budget exhausted".as_ptr()) };
}

// The vendored Lua's string library checks for an armed stop hook inside its own loops
// (vendor/lua-5.4.8/lstrlib.c, "interrupting long C loops"): a pattern that backtracks, a long
// `rep` or plain `find` is stopped within SHRIKE_CHECK_STEPS (4,096) steps of the hook being
// armed, as Lua code is at its next instruction. It also counts those steps, and can report the
// patterns it is given: what `super::patterns` measures a rule set's patterns with.
extern "C" {
    fn shrike_lua_match_steps() -> u64;
    fn shrike_lua_on_pattern(f: Option<unsafe extern "C" fn(*const libc::c_char, usize)>);
}

/// The string library's steps run on this thread so far (at a resolution of 4,096): work, not
/// time, so the same on a busy machine as on an idle one.
pub(crate) fn match_steps() -> u64 {
    // SAFETY: reads a thread-local counter; no arguments.
    unsafe { shrike_lua_match_steps() }
}

thread_local! {
    static PATTERNS: std::cell::RefCell<Option<Vec<Vec<u8>>>> =
        const { std::cell::RefCell::new(None) };
}

unsafe extern "C" fn seen_pattern(p: *const libc::c_char, len: usize) {
    // SAFETY: lstrlib passes a pattern string of Lua's, valid for `len` bytes for the call.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    PATTERNS.with(|cell| {
        if let Ok(mut list) = cell.try_borrow_mut() {
            if let Some(list) = list.as_mut() {
                if !list.iter().any(|q| q == bytes) {
                    list.push(bytes.to_vec());
                }
            }
        }
    });
}

/// Runs `f` and returns, with its result, every distinct pattern Lua's `string.find`, `match`,
/// `gmatch` and `gsub` were given on this thread meanwhile (plain finds excepted), in order of
/// first use.
pub(crate) fn recording_patterns<R>(f: impl FnOnce() -> R) -> (R, Vec<Vec<u8>>) {
    PATTERNS.with(|cell| *cell.borrow_mut() = Some(Vec::new()));
    // SAFETY: the callback only touches this thread's PATTERNS and copies the bytes.
    unsafe { shrike_lua_on_pattern(Some(seen_pattern)) };
    let r = f();
    // SAFETY: as above; None turns reporting off.
    unsafe { shrike_lua_on_pattern(None) };
    let seen = PATTERNS.with(|cell| cell.borrow_mut().take().unwrap_or_default());
    (r, seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `while true do end` under `budget`; how it was stopped.
    fn runaway(lua: &Lua, p: &Preempt, budget: Duration) -> Option<Stop> {
        let f = lua.load("while true do end").into_function().unwrap();
        let (r, stop) = p.run_for(Some(budget), || f.call::<()>(()));
        assert!(r.is_err(), "an endless loop returned");
        stop
    }

    /// Waits until the watchdog parks (other tests of this binary may keep it busy).
    fn wait_parked() -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if PARKED.load(SeqCst) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn the_watchdog_parks_when_idle_and_wakes_for_calls_and_scans() {
        // A watchdog that never wakes would leave the loops below running forever: fail loudly.
        let (done, finished) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if finished.recv_timeout(Duration::from_secs(60)).is_err() {
                eprintln!("a runaway call was not stopped within 60 s: the watchdog did not wake");
                std::process::abort();
            }
        });
        let lua = Lua::new();
        let p = Preempt::new(&lua, Duration::from_millis(5), Duration::from_secs(10));
        let parked = wait_parked();
        // Outside a scan (a rule file's top-level code): the call itself wakes the watchdog.
        assert_eq!(
            runaway(&lua, &p, Duration::from_millis(5)),
            Some(Stop::Call)
        );
        // In a scan: starting the scan wakes it.
        let parked_again = wait_parked();
        p.begin_scan();
        assert_eq!(
            runaway(&lua, &p, Duration::from_millis(5)),
            Some(Stop::Call)
        );
        p.end_scan();
        // A call that ends in time is not stopped, and the state stays usable.
        let f = lua.load("return 1 + 1").into_function().unwrap();
        let (r, stop) = p.run(|| f.call::<i64>(()));
        assert_eq!((r.unwrap(), stop), (2, None));
        eprintln!("watchdog parked before the calls: {parked}, {parked_again}");
        let _ = done.send(());
    }
}
