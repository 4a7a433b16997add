//! The `planc` binary: the command line of the `planc` library.

use std::process::ExitCode;

fn main() -> ExitCode {
    // `planc check --format json | head` must end quietly when `head` stops reading, as
    // other Unix tools do, rather than panic in println! on a closed pipe.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    planc::main_with_args(std::env::args_os())
}
