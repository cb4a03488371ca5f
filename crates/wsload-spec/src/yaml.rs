//! YAML in and out, on serde-saphyr: the one place that knows which YAML crate the workspace
//! uses, so that every reader reports errors the same way (`spec.connections[1]: ...`).

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A document that did not deserialize: where in it, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ParseError {
    /// The field's path (`spec.connections[1]`), or `document` for the document as a whole.
    pub field: String,
    /// What was wrong, with the line and column when the parser knows them.
    pub message: String,
}

/// A YAML document that did not serialize.
pub type SerializeError = serde_saphyr::SerializeError;

/// Parses one YAML document into `T`, naming the field that failed.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, ParseError> {
    let mut track = serde_path_to_error::Track::new();
    let result = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        T::deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
    });
    result.map_err(|e| {
        ParseError {
            field: field_name(&track.path().to_string()),
            // The user's wording: the default one suggests parser options to a developer.
            message: e.render_with_formatter(&serde_saphyr::UserMessageFormatter),
        }
    })
}

/// The path serde_path_to_error tracked, as errors print it. A key the parser rejected before
/// naming it (a duplicate, a malformed mapping) is a `?` segment: the error belongs to the
/// mapping that holds it.
fn field_name(path: &str) -> String {
    let path = path.strip_suffix(".?").unwrap_or(path);
    match path {
        "." | "?" => "document".into(),
        _ => path.into(),
    }
}

/// `T` as a YAML document.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, SerializeError> {
    // No folding of long lines (`>`): a description stays one line, as kubectl and serde_yaml
    // print it, so the CRD diffs by field. Text with newlines is still a literal block (`|`).
    serde_saphyr::to_string_with_options(
        value,
        serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX },
    )
}

fn options() -> serde_saphyr::Options {
    // One line per error, no source excerpt: `wsload validate` lists them, and the field path
    // says where.
    // `strict_booleans`: `yes`/`on` are strings, as in YAML 1.2 (and as serde_yaml read them), so
    // `insecureSkipVerify: yes` is an error rather than a quiet `true`.
    serde_saphyr::options! { with_snippet: false, strict_booleans: true }
}
