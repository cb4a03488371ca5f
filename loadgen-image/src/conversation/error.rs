//! Why a conversation does not compile, naming the field of the spec that does not.

use wsload_spec::matching::{MatchError, Matcher};
use wsload_spec::template::TemplateError;

/// Why a conversation does not compile. `wsload validate` refuses these first, with the
/// same causes; here they only guard a spec that skipped validation.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("{field}: {source}")]
    Template {
        field: String,
        #[source]
        source: TemplateError,
    },
    #[error("{field}: {source}")]
    Match {
        field: String,
        #[source]
        source: MatchError,
    },
    #[error("{field}: {}", wsload_spec::cel::MSG_ONE_PAYLOAD)]
    Payload { field: String },
    #[error("spec.conversation.message: none (the protocol's built-in message was not filled in)")]
    NoMessage,
    #[error("spec.conversation.split: {}", wsload_spec::cel::MSG_SPLIT_KIND)]
    Split,
    #[error(
        "spec.conversation.pushes: {rules} push rules with push; at most {}",
        wsload_spec::conversation::MAX_PUSH_RULES
    )]
    TooManyPushRules { rules: usize },
}

/// `m`, compiled, or why not, at `field`.
pub(super) fn matcher(
    field: &str,
    m: &wsload_spec::conversation::Match,
) -> Result<Matcher, ScriptError> {
    Matcher::compile(m).map_err(|source| ScriptError::Match {
        field: field.to_string(),
        source,
    })
}
