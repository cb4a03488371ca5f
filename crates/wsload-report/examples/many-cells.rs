//! Writes shard SHARD's (default 0, of 2) result of CELLS cells as plain JSON, each cell's
//! connect, tcp, upgrade, rtt and rtt_raw histograms holding a few hundred distinct latencies
//! (as a long payloadMatrix's do), for bench/report/read-memory.sh to measure what reading a
//! result costs.
//!
//! usage: cargo run --release -p wsload-report --features fixtures --example many-cells -- OUT.json CELLS [SHARD]

use std::time::Duration;

use wsload_report::fixtures::Rng;

/// A latency around `median_us`, spread over a factor of ~8 either way.
fn latency(rng: &mut Rng, median_us: u64) -> Duration {
    let octaves = (rng.next_u64() % 4096) as f64 / 4096.0 * 6.0 - 3.0;
    Duration::from_micros((median_us as f64 * octaves.exp2()) as u64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(out), Some(cells)) = (args.next(), args.next()) else {
        eprintln!("usage: many-cells OUT.json CELLS [SHARD]");
        std::process::exit(2);
    };
    let cells: usize = cells.parse()?;
    let shard: u32 = args.next().map_or(Ok(0), |s| s.parse())?;
    let mut r = wsload_report::fixtures::shard(shard, 0, 1, 1_000_000);
    let template = r.cells.remove(0);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(shard));
    for i in 0..cells {
        let mut c = template.clone();
        c.label = format!("{} conns x {} B", 100 * (i / 32 + 1), 64 << (i % 32 / 4));
        let h = &mut c.measure.hists;
        for _ in 0..200 {
            h.tcp.record(latency(&mut rng, 150));
            h.upgrade.record(latency(&mut rng, 400));
            h.connect.record(latency(&mut rng, 600));
        }
        for _ in 0..2000 {
            let rtt = latency(&mut rng, 1500);
            h.rtt_raw.record(rtt);
            h.rtt
                .record(rtt + Duration::from_micros(rng.next_u64() % 50));
        }
        c.measure.counts.sent = 2000;
        c.measure.counts.received = 2000;
        c.compute();
        r.cells.push(c);
    }
    r.judge();
    std::fs::write(out, serde_json::to_vec(&r)?)?;
    Ok(())
}
