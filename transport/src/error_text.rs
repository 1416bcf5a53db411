//! An error and its causes as one line for a person, each said once.
//!
//! Library errors here name their cause in their own message (`{path}: {source}`), which is
//! what a log line or a `Display` should show; printing the whole chain as well (`{:#}`) then
//! says the cause twice: `/x: No such file or directory (os error 2): No such file or
//! directory (os error 2)`. The binaries print through [`one_line`] instead.

/// `messages` (an error, then each cause) joined by `: `, leaving out a cause the text so far
/// already says.
pub fn one_line<I, S>(messages: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut text = String::new();
    for message in messages {
        let message = message.as_ref();
        if message.is_empty() || text.contains(message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(message);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let enoent = "No such file or directory (os error 2)";
        let outer = format!("/nonexistent: {enoent}");
        assert_eq!(one_line([outer.as_str(), enoent]), outer);
        assert_eq!(one_line(["reading the config", "/x: denied", "denied"]), "reading the config: /x: denied");
        assert_eq!(one_line(["connect failed", "", "refused"]), "connect failed: refused");
    }
}
