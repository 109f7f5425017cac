//! Writing results to standard output. `println!` panics when the reader has gone (`memkv
//! bench --json | head -1`); a command's output there simply ends, as other Unix tools' does,
//! and the program exits with success. Any other write error (a full disk, `> /dev/full`)
//! ends the program with exit 1 and the reason, as every other error does.

use std::fmt;
use std::io::{self, Write};

/// `print!` that ends the program quietly once standard output's reader has gone, and with
/// exit 1 when standard output cannot be written.
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*), false) };
}

/// `println!` that ends the program quietly once standard output's reader has gone, and with
/// exit 1 when standard output cannot be written.
macro_rules! outln {
    () => { $crate::stdout::write(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*), true) };
}

pub(crate) fn write(args: fmt::Arguments<'_>, newline: bool) {
    let mut out = io::stdout().lock();
    let end: &[u8] = if newline { b"\n" } else { b"" };
    // Flushed here: an error left in the buffer would surface at exit, where it is ignored.
    let written = out
        .write_fmt(args)
        .and_then(|()| out.write_all(end))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(crate::exit::OK),
        Err(e) => {
            eprintln!("memkv: writing standard output: {e}");
            std::process::exit(crate::exit::FAILURE)
        }
    }
}
