//! What a report shows of a number the conversation could not read from a server message (an
//! answer's id, a delivery's sequence number or publish instant): described once per worker
//! and field, on the failure path only.

/// The value as it came (`no value` where there was none), and the message it came in (the
/// report cuts it to a line).
pub(super) fn example(value: Option<&[u8]>, data: &[u8]) -> String {
    let message = String::from_utf8_lossy(data);
    match value {
        Some(v) => format!("{} (in {message})", String::from_utf8_lossy(v)),
        None => format!("no value (in {message})"),
    }
}
