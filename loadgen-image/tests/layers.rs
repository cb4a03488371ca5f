//! The load generator's modules stand in layers, and a module imports only from its own layer
//! or from those below it, with no circle anywhere: the conversations and subscribers the next
//! scenarios add land on a model and counters that know nothing of how they are run or shown.
//! Read from the sources (`crate::module` paths outside the unit tests), so a new upward
//! import fails here, naming the file and the module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Lowest first. `lib.rs` and `main.rs` stand above them all.
const LAYERS: &[(&str, &[&str])] = &[
    // Leaves: wall clocks, wire formats, the compiled conversation and how answers are recognised, rate schedules, stderr around the bar, the CPU
    // clock, sysctl writes, the kernel's network counters; and the results crate's modules
    // re-exported at the crate root.
    (
        "foundation",
        &[
            "clock", "encoding", "script", "answer", "schedule", "terminal", "cpu", "sysctl",
            "netstat", "report", "measure", "hist",
        ],
    ),
    // What a cell is, and how a spec becomes cells.
    (
        "model",
        &["model", "plan", "capacity", "fleet_limit", "options"],
    ),
    // The live counters every layer above reads.
    ("counters", &["counters"]),
    // Connections and cells running; their timelines sampled.
    (
        "execution",
        &[
            "tls",
            "dial",
            "stall",
            "connection",
            "fanout",
            "rendezvous",
            "cell",
            "sampler",
            "server_metrics",
            "autobahn_client",
        ],
    ),
    // The counters shown: the bar, the shards' bar, the exposition, the plot.
    (
        "presentation",
        &["progress", "fleet_bar", "exposition", "plot"],
    ),
    // A run conducted: its target, its gate, its shards and their control token, its background
    // thread.
    (
        "orchestration",
        &[
            "local_server",
            "target",
            "gate",
            "background",
            "run",
            "control",
            "fleet_token",
            "fleet",
        ],
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// The source of `path` without its unit tests (a test may use anything) and its comments
/// (which may name any module).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a source file");
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate's modules that `code` names: `crate::m`, `$crate::m`, and `crate::{m, n::X}`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Up to the matching brace, split at the commas outside nested groups: each item
            // starts with the module's name (or an item of the crate root).
            let mut depth = 0usize;
            let mut item = String::new();
            let mut items = Vec::new();
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                item.push(ch);
            }
            items.push(item);
            for item in items {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out
}

/// Every module (a file of src/, or a folder with its files) and the modules it imports.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |module: String, path: &Path| {
        graph
            .entry(module)
            .or_default()
            .extend(imports(&code(path)));
    };
    for entry in std::fs::read_dir(&src).expect("src/") {
        let path = entry.expect("an entry").path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a name")
            .to_string();
        if path.is_dir() {
            for inner in std::fs::read_dir(&path).expect("a module folder") {
                add(stem.clone(), &inner.expect("an entry").path());
            }
        } else if path.extension().is_some_and(|e| e == "rs") && stem != "lib" && stem != "main" {
            add(stem, &path);
        }
    }
    // Only the crate's modules: `crate::Error` and the like are the crate root's.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for (module, uses) in graph.iter_mut() {
        uses.retain(|m| modules.contains(m) && m != module);
    }
    graph
}

#[test]
fn every_module_has_a_layer() {
    let missing: Vec<String> = graph()
        .into_keys()
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a layer in tests/layers.rs: {missing:?}"
    );
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let mut upward = Vec::new();
    for (module, uses) in graph() {
        let Some(own) = layer_of(&module) else {
            continue;
        };
        for used in uses {
            if let Some(theirs) = layer_of(&used)
                && theirs > own
            {
                upward.push(format!(
                    "{module} ({}) imports {used} ({})",
                    LAYERS[own].0, LAYERS[theirs].0
                ));
            }
        }
    }
    assert!(upward.is_empty(), "upward imports: {upward:#?}");
}

#[test]
fn the_modules_import_each_other_in_no_circle() {
    let graph = graph();
    // Depth-first, three colours: a module met again while still open closes a circle.
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        open: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        circles: &mut Vec<String>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = open.iter().position(|o| *o == m) {
            circles.push(format!("{} -> {m}", open[at..].join(" -> ")));
            return;
        }
        open.push(m);
        for next in graph.get(m).into_iter().flatten() {
            visit(next, graph, open, done, circles);
        }
        open.pop();
        done.insert(m);
    }
    let (mut open, mut done, mut circles) = (Vec::new(), BTreeSet::new(), Vec::new());
    for m in graph.keys() {
        visit(m, &graph, &mut open, &mut done, &mut circles);
    }
    assert!(circles.is_empty(), "circles: {circles:#?}");
}

#[test]
fn the_reader_finds_grouped_and_macro_imports() {
    let found = imports(
        "use crate::counters::{Counters, Slot};\nuse crate::{Error, model::{Cell, Shard}, plan};\n\
         $crate::terminal::eprint_line(x);\nlet _ = crate::clock::unix_ms();",
    );
    let want: BTreeSet<String> = ["counters", "Error", "model", "plan", "terminal", "clock"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(found, want);
}
