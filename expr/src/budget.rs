//! The work budget of one evaluation: bytes that operators, filters, methods and output may
//! produce in total. Fuel counts instructions, not the bytes one instruction makes
//! (`'x' * 99999999` is one instruction), so every operation that can make a large value
//! asks the budget *before* it allocates and is charged for what it made afterwards.

use std::cell::Cell;

use minijinja::{Error, ErrorKind};

/// Largest result (serialised) one expression may produce; the work budget is a multiple of it.
pub const MAX_RESULT_BYTES: usize = 1 << 20;

/// Most bytes one evaluation may produce in intermediate values and output, all together.
pub const MAX_WORK_BYTES: usize = 8 * MAX_RESULT_BYTES;

thread_local! {
    static SPENT: Cell<usize> = const { Cell::new(0) };
}

/// Scope of one evaluation: resets the budget on creation and restores the outer evaluation's
/// spending when dropped (a nested evaluation does not refund or hide the outer one's).
pub(crate) struct Evaluation {
    outer: usize,
}

impl Evaluation {
    pub(crate) fn start() -> Self {
        Evaluation {
            outer: SPENT.with(|s| s.replace(0)),
        }
    }
}

impl Drop for Evaluation {
    fn drop(&mut self) {
        SPENT.with(|s| s.set(self.outer));
    }
}

/// What is left of the budget.
pub(crate) fn remaining() -> usize {
    MAX_WORK_BYTES.saturating_sub(SPENT.with(Cell::get))
}

/// Refuses, before allocating, an operation whose result is estimated at `estimate` bytes.
pub(crate) fn ensure_room(what: &str, estimate: usize) -> Result<(), Error> {
    if estimate > remaining() {
        return Err(too_big(what));
    }
    Ok(())
}

/// Records `bytes` produced; fails once the evaluation has produced more than its budget.
pub(crate) fn charge(what: &str, bytes: usize) -> Result<(), Error> {
    let spent = SPENT.with(|s| {
        let v = s.get().saturating_add(bytes);
        s.set(v);
        v
    });
    if spent > MAX_WORK_BYTES {
        return Err(too_big(what));
    }
    Ok(())
}

fn too_big(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "{what}: result would exceed the expression's work limit of {MAX_WORK_BYTES} bytes"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_and_are_reset_per_evaluation() {
        let _e = Evaluation::start();
        assert!(ensure_room("x", MAX_WORK_BYTES).is_ok());
        charge("x", MAX_WORK_BYTES - 10).unwrap();
        assert!(ensure_room("x", 11).is_err());
        {
            let _inner = Evaluation::start();
            assert_eq!(remaining(), MAX_WORK_BYTES);
        }
        assert_eq!(remaining(), 10);
        let err = charge("'x' * n", 11).unwrap_err();
        assert!(
            err.to_string().contains("'x' * n: result would exceed"),
            "{err}"
        );
    }
}
