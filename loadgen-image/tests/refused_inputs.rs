//! Every refused input of the list (`crds/tests/refused.yaml`, which the operator's test also
//! sends to a real API server and the docs' table is generated from) through the `wsload
//! validate` binary: exit 2 with the field and the phrase named, or, for the inputs only the
//! API server refuses, exit 0.

use std::path::Path;
use std::process::Command;
use wsload_spec::refused::{self, RefusedInputs};

#[test]
fn wsload_validate_refuses_each_input_of_the_list_naming_the_field() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join(refused::PATH)).expect("the list");
    let list = RefusedInputs::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert!(list.cases.len() >= 50, "{} cases", list.cases.len());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("refused-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let mut failures = Vec::new();
    for (i, c) in list.cases.iter().enumerate() {
        let file = dir.join(format!("case{i}.yaml"));
        std::fs::write(&file, c.document()).expect("write the case");
        let o = Command::new(env!("CARGO_BIN_EXE_wsload"))
            .arg("validate")
            .arg(&file)
            .output()
            .expect("wsload runs");
        let err = String::from_utf8_lossy(&o.stderr);
        match (&c.validate, o.status.code()) {
            (Some(want), Some(2)) if err.contains(&want.field) && err.contains(&want.says) => {}
            (Some(want), code) => failures.push(format!(
                "{}: want exit 2 naming {:?} / {:?}, got {code:?}:\n{err}",
                c.what, want.field, want.says
            )),
            (None, Some(0)) => {}
            (None, code) => failures.push(format!(
                "{}: marked cluster-only, but wsload validate exits {code:?} (add validate: to {}):\n{err}",
                c.what,
                refused::PATH
            )),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}
