//! What a failure keeps of what the server sent (a header's value, a reason phrase, a body's
//! first line), bounded: the evidence of a hostile server's answer must not cost what its
//! answer does.

/// The longest excerpt of the response kept as evidence (a body's first line, a header's
/// value), in characters.
pub const MAX_EXCERPT: usize = 200;

/// `text` cut to [`MAX_EXCERPT`] characters.
pub fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(MAX_EXCERPT).collect();
    if text.chars().nth(MAX_EXCERPT).is_some() {
        out.push('…');
    }
    out
}
