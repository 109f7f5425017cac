//! Writing results to standard output. `println!` panics when the reader has gone (`memkv
//! bench --json | head -1`); a command's output there simply ends, as other Unix tools' does,
//! and the program exits with success.

use std::fmt;
use std::io::{self, Write};

/// `print!` that ends the program quietly once standard output's reader has gone.
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*), false) };
}

/// `println!` that ends the program quietly once standard output's reader has gone.
macro_rules! outln {
    () => { $crate::stdout::write(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*), true) };
}

pub(crate) fn write(args: fmt::Arguments<'_>, newline: bool) {
    let mut out = io::stdout().lock();
    let end: &[u8] = if newline { b"\n" } else { b"" };
    match out.write_fmt(args).and_then(|()| out.write_all(end)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(crate::exit::OK),
        Err(e) => panic!("failed printing to stdout: {e}"),
    }
}
