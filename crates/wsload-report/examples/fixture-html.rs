//! Writes the fixture report (`fixtures::report`) as HTML, for scripts/check-browser.sh to load
//! in a real browser.
//!
//! usage: cargo run -p wsload-report --features fixtures --example fixture-html -- OUT.html

fn main() -> std::io::Result<()> {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: fixture-html OUT.html");
        std::process::exit(2);
    };
    std::fs::write(out, wsload_report::html(&wsload_report::fixtures::report()))
}
