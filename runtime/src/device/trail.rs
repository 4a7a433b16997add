//! The trail of a rank's communication: every NCCL operation it queues in a step, named
//! (the operation, its group, its size, and the plan's name for the work it serves), with a
//! CUDA event recorded behind it. The host runs ahead of the GPU, so what the host waits in
//! says little; when the watchdog fires, the first operation on the trail whose event has
//! not completed is the one the GPU is stuck in, and that is what it prints.
//!
//! One process drives one GPU, so the trail is the process's. Recording is best effort: a
//! failure to create an event never fails the step.

use std::cell::{Cell, RefCell};
use std::sync::Mutex;

use cudarc::driver::result;
use cudarc::driver::sys;

struct Entry {
    what: String,
    event: sys::CUevent,
}

// SAFETY: CUDA events may be queried and destroyed from any thread with their context
// current; the watchdog binds it first.
unsafe impl Send for Entry {}

struct State {
    entries: Vec<Entry>,
    context: Option<usize>,
    /// Operations queued this step (their number in the step).
    count: usize,
}

static TRAIL: Mutex<State> = Mutex::new(State {
    entries: Vec::new(),
    context: None,
    count: 0,
});

thread_local! {
    /// The plan's name for the work in progress ("L3 mlp down", "the step-4 gradient
    /// reduction"), set as the engine and the step loop go.
    static DOING: RefCell<String> = const { RefCell::new(String::new()) };
    /// Inside `dist::grouped`: operations are launched at the group's end, so their
    /// events wait for it.
    static GROUP: RefCell<Option<(Vec<String>, u64)>> = const { RefCell::new(None) };
    static ON: Cell<bool> = const { Cell::new(false) };
}

/// Turns the trail on for this thread's operations (runs with more than one rank).
pub fn enable() {
    ON.with(|o| o.set(true));
}

/// Whether this thread keeps a trail.
pub fn is_on() -> bool {
    ON.with(Cell::get)
}

/// Names the work that the next operations serve.
pub fn doing(what: impl Into<String>) {
    if ON.with(Cell::get) {
        DOING.with(|d| *d.borrow_mut() = what.into());
    }
}

/// Forgets the last step's operations.
pub fn new_step() {
    if let Ok(mut t) = TRAIL.lock() {
        for e in t.entries.drain(..) {
            // SAFETY: the event is not used after.
            unsafe {
                let _ = result::event::destroy(e.event);
            }
        }
        t.count = 0;
    }
}

/// Records that `op()` (e.g. "all-reduce of 1024 elements over the data-parallel group of
/// ranks 0,1") was queued on `stream`; the name is only built when the trail is on.
pub fn queued(op: impl FnOnce() -> String, stream: u64) {
    if !ON.with(Cell::get) {
        return;
    }
    let op = op();
    let what = DOING.with(|d| {
        let d = d.borrow();
        if d.is_empty() {
            op.clone()
        } else {
            format!("{op}, in {d}")
        }
    });
    let pending = GROUP.with(|g| {
        if let Some((ops, s)) = g.borrow_mut().as_mut() {
            ops.push(what.clone());
            *s = stream;
            true
        } else {
            false
        }
    });
    if !pending {
        record(what, stream);
    }
}

/// Opens a group: the operations queued until `group_end` are launched together.
pub fn group_start() {
    if ON.with(Cell::get) {
        GROUP.with(|g| *g.borrow_mut() = Some((Vec::new(), 0)));
    }
}

/// Closes the group: one entry for its operations, recorded after their launch.
pub fn group_end() {
    let Some((ops, stream)) = GROUP.with(|g| g.borrow_mut().take()) else {
        return;
    };
    if !ops.is_empty() {
        record(ops.join("; "), stream);
    }
}

fn record(what: String, stream: u64) {
    let Ok(event) = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING) else {
        return;
    };
    // SAFETY: a fresh event on a live stream of this thread's context.
    if unsafe { result::event::record(event, stream as sys::CUstream) }.is_err() {
        // SAFETY: not used after.
        unsafe {
            let _ = result::event::destroy(event);
        }
        return;
    }
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes the current context.
    unsafe {
        let _ = sys::cuCtxGetCurrent(&mut ctx);
    }
    if let Ok(mut t) = TRAIL.lock() {
        t.count += 1;
        let n = t.count;
        if t.context.is_none() && !ctx.is_null() {
            t.context = Some(ctx as usize);
        }
        t.entries.push(Entry {
            what: format!("#{n} of the step: {what}"),
            event,
        });
    }
}

/// The first operation on the trail the GPU has not finished, if any; from any thread.
pub fn first_unfinished() -> Option<String> {
    let t = TRAIL.lock().ok()?;
    let ctx = t.context?;
    // SAFETY: binds the context the events belong to on this thread.
    unsafe {
        let _ = sys::cuCtxSetCurrent(ctx as sys::CUcontext);
    }
    first_pending(t.entries.iter().map(|e| {
        // SAFETY: the event is live until `new_step` destroys it under the same lock.
        let state = unsafe { sys::cuEventQuery(e.event) };
        (e.what.as_str(), state == sys::CUresult::CUDA_SUCCESS)
    }))
}

/// The first of `(name, finished)` in order that has not finished.
fn first_pending<'a>(ops: impl Iterator<Item = (&'a str, bool)>) -> Option<String> {
    ops.into_iter()
        .find(|(_, done)| !done)
        .map(|(w, _)| w.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_unfinished_operation_is_the_one_named() {
        let ops = [("a", true), ("b", false), ("c", false)];
        assert_eq!(first_pending(ops.into_iter()), Some("b".into()));
        assert_eq!(first_pending([("a", true)].into_iter()), None);
    }

    #[test]
    fn off_by_default_and_groups_record_once() {
        // Without `enable` nothing is kept (one-rank runs pay nothing).
        queued(|| "all-reduce".into(), 0);
        assert!(TRAIL.lock().unwrap().entries.is_empty());
        enable();
        doing("L3 mlp down");
        group_start();
        queued(|| "send to rank 1".into(), 0);
        queued(|| "receive from rank 1".into(), 0);
        let pending = GROUP.with(|g| g.borrow().as_ref().map(|(o, _)| o.clone()));
        assert_eq!(
            pending,
            Some(vec![
                "send to rank 1, in L3 mlp down".to_string(),
                "receive from rank 1, in L3 mlp down".to_string()
            ])
        );
        // (group_end records an event: that needs a GPU, so it is not called here.)
        GROUP.with(|g| g.borrow_mut().take());
    }
}
