//! Standard output that a reader may close: `kubectl pf logs NAME | head` closes the pipe after
//! ten lines, and `println!` then panicked ("failed printing to stdout: Broken pipe", exit 101).
//! A reader that went away has had all it wanted: that is a normal end, so the process exits 0
//! quietly (docs/cli.md). Every verb prints through [`outln!`]/[`out!`].

use std::io::{self, Write};

/// Prints to stdout like `print!`, ending the process on a closed pipe ([`write`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

/// Prints a line to stdout like `println!`, ending the process on a closed pipe ([`write`]).
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// What a write to stdout came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// Written.
    Ok,
    /// The reader closed the pipe: stop, successfully.
    Closed,
    /// Another error, with its text.
    Failed(String),
}

/// Writes `args` to `w` and flushes it (so that a closed pipe shows now, not at exit).
pub fn write_to(w: &mut impl Write, args: std::fmt::Arguments<'_>) -> Written {
    match w.write_fmt(args).and_then(|()| w.flush()) {
        Ok(()) => Written::Ok,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Written::Closed,
        Err(e) => Written::Failed(e.to_string()),
    }
}

/// Writes `args` to stdout; exits 0 when the reader closed the pipe, 1 on another error.
pub fn write(args: std::fmt::Arguments<'_>) {
    match write_to(&mut io::stdout().lock(), args) {
        Written::Ok => {}
        Written::Closed => std::process::exit(0),
        Written::Failed(e) => {
            eprintln!("error: writing to stdout: {e}");
            std::process::exit(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader is gone.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_a_normal_end_and_other_errors_are_errors() {
        let mut buf = Vec::new();
        assert_eq!(write_to(&mut buf, format_args!("a {}\n", 1)), Written::Ok);
        assert_eq!(buf, b"a 1\n");
        assert_eq!(
            write_to(&mut ClosedPipe, format_args!("x\n")),
            Written::Closed
        );
        let mut full: &mut [u8] = &mut [0u8; 1];
        assert!(matches!(
            write_to(&mut full, format_args!("too long\n")),
            Written::Failed(_)
        ));
    }
}
