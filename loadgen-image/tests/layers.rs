//! The load generator's folders stand in layers, and a file imports only from its own layer
//! or from those below it, with no circle anywhere, between folders or between the files of
//! one: the behaviors and conversations the next scenarios add land on a model and counters
//! that know nothing of how they are run or shown. Read from the sources (`crate::` and
//! `super::` paths outside the unit tests), so a new upward import fails here, naming the
//! file and what it imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lowest first: each a folder of src/ (or a file of it, for a layer of one file). `lib.rs`
/// and `main.rs` stand above them all.
const LAYERS: &[(&str, &str)] = &[
    ("machine", "what this machine gives, read at run time"),
    (
        "conversation",
        "the LoadTest's conversation compiled: what to send, what a frame read is",
    ),
    ("model", "what a cell is, and how a spec becomes cells"),
    ("counters", "the live counters every layer above reads"),
    ("connect", "opening one connection"),
    ("behavior", "what one connection does once open"),
    ("cell", "a cell run on the worker threads"),
    (
        "observe",
        "the counters shown: the bar, timelines, exposition, plot",
    ),
    ("conduct", "a run of a LoadTest in this process"),
    ("fleet", "a run's shards as processes on this machine"),
    ("error", "every layer's errors, for the commands"),
];

/// The results crate's modules, re-exported at the crate root: below every layer.
const REEXPORTED: &[&str] = &["report", "measure", "hist"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
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

/// The module path of a file under src/: `behavior/hold.rs` is `behavior::hold`, a folder's
/// `mod.rs` the folder's.
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).expect("under src/");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The paths `code` names: `crate::a::b`, `$crate::a`, `super::x`, and each item of a group
/// (`crate::{a, b::X}`), as module paths from the crate root (a `super::` path resolved from
/// `module`, the importing file's module).
fn imports(code: &str, module: &[String], is_mod_rs: bool) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", parent(module, is_mod_rs)),
    ] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            // `super::` inside a longer name, or `crate::` of another crate's macro, is not ours.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                || (prefix == "super::" && before == Some(':'))
            {
                continue;
            }
            for path in paths(rest) {
                let mut full = base.clone();
                full.extend(path);
                out.insert(full);
            }
        }
    }
    out
}

/// The module `super::` names from `module`: its parent (a folder's `mod.rs` is the folder, so
/// its `super` is the folder's parent).
fn parent(module: &[String], is_mod_rs: bool) -> Vec<String> {
    let _ = is_mod_rs;
    module[..module.len().saturating_sub(1)].to_vec()
}

/// The paths at the start of `rest` (after `crate::`): one, or each of a `{...}` group.
fn paths(rest: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut path = Vec::new();
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            // Up to the matching brace, split at the commas outside nested groups.
            let (mut depth, mut item, mut items) = (0usize, String::new(), Vec::new());
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
            let mut out = Vec::new();
            for item in items {
                let item = item.trim();
                if item.is_empty() || item == "self" {
                    out.push(path.clone());
                    continue;
                }
                for tail in paths(item) {
                    let mut p = path.clone();
                    p.extend(tail);
                    out.push(p);
                }
            }
            return out;
        }
        let name = ident(rest);
        if name.is_empty() {
            return vec![path];
        }
        rest = &rest[name.len()..];
        path.push(name);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => return vec![path],
        }
    }
}

/// Every file of src/ (but lib.rs and main.rs) by module path, with the files it imports: an
/// import names the deepest module that is a file (`crate::behavior::hold::held` is
/// `behavior::hold`; `crate::behavior::Serving`, re-exported by the folder, is `behavior`).
fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        if module.is_empty() || module == ["main"] || module == ["lib"] {
            continue;
        }
        let is_mod_rs = file.file_name().is_some_and(|n| n == "mod.rs");
        let uses: BTreeSet<Vec<String>> = imports(&code(file), &module, is_mod_rs)
            .into_iter()
            .filter_map(|path| {
                (1..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|p| modules.contains(p))
            })
            .filter(|used| *used != module)
            .collect();
        graph.insert(module, uses);
    }
    graph
}

fn layer_of(module: &[String]) -> Option<usize> {
    let top = module.first()?;
    LAYERS.iter().position(|(name, _)| name == top)
}

fn name(module: &[String]) -> String {
    module.join("::")
}

#[test]
fn every_file_has_a_layer() {
    let missing: Vec<String> = graph()
        .into_keys()
        .filter(|m| layer_of(m).is_none() && !REEXPORTED.contains(&m[0].as_str()))
        .map(|m| name(&m))
        .collect();
    assert!(
        missing.is_empty(),
        "files without a layer in tests/layers.rs: {missing:?}"
    );
}

#[test]
fn no_file_imports_from_a_layer_above_its_own() {
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
                    "{} ({}) imports {} ({})",
                    name(&module),
                    LAYERS[own].0,
                    name(&used),
                    LAYERS[theirs].0
                ));
            }
        }
    }
    assert!(upward.is_empty(), "upward imports: {upward:#?}");
}

/// A folder's `mod.rs` names its files (`pub mod`, `pub use`) and they may use what it
/// re-exports: those two are one room, not a circle. Any other loop is.
#[test]
fn the_files_import_each_other_in_no_circle() {
    let graph = graph();
    let folder_index =
        |from: &[String], to: &[String]| to.len() < from.len() && from.starts_with(to);
    fn visit<'a>(
        m: &'a Vec<String>,
        graph: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        skip: &dyn Fn(&[String], &[String]) -> bool,
        open: &mut Vec<&'a Vec<String>>,
        done: &mut BTreeSet<&'a Vec<String>>,
        circles: &mut Vec<String>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = open.iter().position(|o| *o == m) {
            let names: Vec<String> = open[at..].iter().map(|m| name(m)).collect();
            circles.push(format!("{} -> {}", names.join(" -> "), name(m)));
            return;
        }
        open.push(m);
        for next in graph.get(m).into_iter().flatten() {
            if !skip(m, next) {
                visit(next, graph, skip, open, done, circles);
            }
        }
        open.pop();
        done.insert(m);
    }
    let (mut open, mut done, mut circles) = (Vec::new(), BTreeSet::new(), Vec::new());
    for m in graph.keys() {
        visit(m, &graph, &folder_index, &mut open, &mut done, &mut circles);
    }
    assert!(circles.is_empty(), "circles: {circles:#?}");
}

#[test]
fn the_reader_resolves_grouped_nested_super_and_macro_imports() {
    let here = vec!["behavior".to_string(), "hold".to_string()];
    let found = imports(
        "use crate::counters::{Counters, Slot};\nuse crate::{Error, model::{Cell, Shard}, connect};\n\
         $crate::observe::terminal::eprint_line(x);\nlet _ = crate::machine::clock::unix_ms();\n\
         use super::pinger::{self, Pinger};\nuse super::{read::account, write};",
        &here,
        false,
    );
    let want: BTreeSet<Vec<String>> = [
        "counters::Counters",
        "counters::Slot",
        "Error",
        "model::Cell",
        "model::Shard",
        "connect",
        "observe::terminal::eprint_line",
        "machine::clock::unix_ms",
        "behavior::pinger",
        "behavior::pinger::Pinger",
        "behavior::read::account",
        "behavior::write",
    ]
    .into_iter()
    .map(|p| p.split("::").map(String::from).collect())
    .collect();
    assert_eq!(found, want);
}
