//! Per-call effect hooks: how an imported `effects` function reaches the Rust closures of the
//! export call that is running.
//!
//! wasmtime host functions only see the store's data, which must be `'static`, while the
//! closures a caller hands to [`crate::ComponentFleet::guard_irreversible`] and friends borrow
//! from the caller's stack (as they may with the core's `HeartFleet`). [`with_hooks`] bridges
//! the two the way scoped thread-locals do: for the duration of one export call it parks a
//! lifetime-erased pointer to the call's [`CallHooks`] in the store data, under a fresh
//! handle that the guest passes back to every `effects` function, and removes it before
//! returning (also when unwinding). A host function dereferences it only while it is parked.

use std::ptr::NonNull;

use heart_fleet_core::{IntentRow, ProbeVerdict};
use serde_json::Value;

/// The host-supplied needs of one export call.
pub(crate) trait CallHooks {
    /// Runs the call's irreversible effect.
    fn run_effect(&mut self, effect_key: &str, epoch: Option<i64>) -> Result<Value, String>;
    /// The host's effect ledger.
    fn record_once(&mut self, run_id: &str, effect_key: &str) -> Result<bool, String>;
    /// The call's probe.
    fn probe(&mut self, intent: &IntentRow) -> Result<ProbeVerdict, String>;
}

/// Hooks of a call that needs none.
pub(crate) struct NoHooks;

impl CallHooks for NoHooks {
    fn run_effect(&mut self, _: &str, _: Option<i64>) -> Result<Value, String> {
        Err("this operation has no effect".into())
    }
    fn record_once(&mut self, _: &str, _: &str) -> Result<bool, String> {
        Err("no effect ledger".into())
    }
    fn probe(&mut self, _: &IntentRow) -> Result<ProbeVerdict, String> {
        Ok(ProbeVerdict::Unknown)
    }
}

/// The parked hooks of the running call.
struct Active {
    handle: u64,
    hooks: NonNull<dyn CallHooks + 'static>,
}

/// The hooks slot in the store data.
#[derive(Default)]
pub(crate) struct HookSlot {
    active: Option<Active>,
    last_handle: u64,
}

// SAFETY: `Active` holds a pointer only while an export call runs synchronously on the
// thread that owns the `Store` (which is exclusively borrowed for that whole time, so it
// cannot move to another thread meanwhile); the slot is empty whenever the store can move.
#[allow(unsafe_code)]
unsafe impl Send for HookSlot {}

impl HookSlot {
    /// The hooks of the running call with this handle.
    pub(crate) fn get(&mut self, handle: u64) -> Result<&mut dyn CallHooks, String> {
        match self.active.as_mut() {
            Some(active) if active.handle == handle => {
                // SAFETY: the pointer was made from a `&mut dyn CallHooks` that `with_hooks`
                // borrows exclusively until it has emptied this slot again, so it is valid
                // and nothing else uses it; the returned borrow is tied to `&mut self`, so
                // two of them cannot coexist.
                #[allow(unsafe_code)]
                Ok(unsafe { active.hooks.as_mut() })
            }
            _ => Err(format!("unknown effect handle {handle} (its call has returned)")),
        }
    }
}

/// Empties the slot when dropped (the normal return and unwinding alike).
struct Reset<'s, T>(&'s mut T, fn(&mut T) -> &mut HookSlot);

impl<T> Drop for Reset<'_, T> {
    fn drop(&mut self) {
        (self.1)(self.0).active = None;
    }
}

/// Runs `call` with `hooks` parked in `slot(state)` under a fresh handle, which `call` gets.
pub(crate) fn with_hooks<T, R>(
    state: &mut T,
    slot: fn(&mut T) -> &mut HookSlot,
    hooks: &mut dyn CallHooks,
    call: impl FnOnce(&mut T, u64) -> R,
) -> R {
    let parked = slot(state);
    parked.last_handle = parked.last_handle.wrapping_add(1).max(1);
    let handle = parked.last_handle;
    let ptr: NonNull<dyn CallHooks + '_> = NonNull::from(hooks);
    // SAFETY: only the lifetime is erased (same fat-pointer layout). The pointer is removed
    // from the slot before this function returns or unwinds (the `Reset` guard), while
    // `hooks` stays exclusively borrowed by this function, so it is never used after the
    // closure's captures die.
    #[allow(unsafe_code)]
    let ptr: NonNull<dyn CallHooks + 'static> = unsafe { std::mem::transmute(ptr) };
    parked.active = Some(Active { handle, hooks: ptr });
    let guard = Reset(state, slot);
    call(&mut *guard.0, handle)
}
