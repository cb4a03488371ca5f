//! stderr while a progress bar may show: every line (logs, the managed server's, the
//! shards') goes above the bar through [`eprintln_above!`] or [`Stderr`], and Ctrl-C takes the
//! bar off the screen. The bar itself is drawn by crate::observe::progress.

use indicatif::ProgressBar;
use std::sync::{Mutex, PoisonError};

/// The bar while it shows; the lines printed meanwhile go above it.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

fn shown() -> Option<ProgressBar> {
    BAR.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Prints `line` to stderr, above the bar if one shows.
pub fn eprint_line(line: impl std::fmt::Display) {
    match shown() {
        Some(bar) => bar.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    }
}

/// The bar fills its last line to the edge, so the terminal's echo of `^C` (ECHOCTL) wrapped
/// onto a line of its own: cleared before the bar is.
pub fn clear_echoed_interrupt() {
    let echoed = nix::sys::termios::tcgetattr(std::io::stderr()).is_ok_and(|t| {
        use nix::sys::termios::LocalFlags;
        t.local_flags
            .contains(LocalFlags::ECHO | LocalFlags::ECHOCTL)
    });
    if echoed && shown().is_some() {
        eprint!("\r\x1b[2K\x1b[1A");
    }
}

/// Ctrl-C while a bar shows: takes it off the screen, then ends the process as SIGINT would.
pub fn exit_interrupted() -> ! {
    clear_echoed_interrupt();
    if let Some(bar) = BAR.lock().unwrap_or_else(PoisonError::into_inner).take() {
        bar.finish_and_clear();
    }
    std::process::exit(130)
}

/// `eprintln!`, above the bar if one shows.
macro_rules! eprintln_above {
    ($($arg:tt)*) => {
        $crate::observe::terminal::eprint_line(format_args!($($arg)*))
    };
}
pub(crate) use eprintln_above;

/// Stderr for tracing: each event is written with the bar out of the way.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stderr;

impl std::io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match shown() {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf))?,
            None => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Stderr;
    fn make_writer(&'a self) -> Stderr {
        Stderr
    }
}

/// `bar` shows from now on: lines go above it.
pub fn show(bar: ProgressBar) {
    *BAR.lock().unwrap_or_else(PoisonError::into_inner) = Some(bar);
}

/// No bar shows any more.
pub fn hide() {
    *BAR.lock().unwrap_or_else(PoisonError::into_inner) = None;
}
