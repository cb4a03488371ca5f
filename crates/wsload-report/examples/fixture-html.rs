//! Writes a fixture report as HTML, for scripts/check-browser.sh to load in a real browser:
//! `fixtures::report` (two shards, every chart kind), or with `fanout`, `fixtures::fanout`
//! (the fan-out table, its deliveries section and charts).
//!
//! usage: cargo run -p wsload-report --features fixtures --example fixture-html -- OUT.html [fanout]

fn main() -> std::io::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let Some(out) = args.next() else {
        eprintln!("usage: fixture-html OUT.html [fanout]");
        std::process::exit(2);
    };
    let result = match args.next() {
        None => wsload_report::fixtures::report(),
        Some(kind) if kind == "fanout" => wsload_report::fixtures::fanout(),
        Some(other) => {
            eprintln!("fixture-html: no fixture {other:?} (known: fanout)");
            std::process::exit(2);
        }
    };
    std::fs::write(out, wsload_report::html(&result))
}
