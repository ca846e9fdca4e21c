//! Text printed on one line of a log or a terminal: control characters escaped, so that a
//! value quoted in it (a Redis reply, a file name, a key) cannot forge a line. A leaf module.

/// `buf` with every control character but a final newline written as `\xNN`.
pub(crate) fn escape_controls(buf: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let body = buf.strip_suffix(b"\n").unwrap_or(buf);
    let is_control = |b: &u8| *b < 0x20 || *b == 0x7f;
    if !body.iter().any(is_control) {
        return std::borrow::Cow::Borrowed(buf);
    }
    let mut out = Vec::with_capacity(buf.len() + 16);
    for b in body {
        if is_control(b) {
            out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        } else {
            out.push(*b);
        }
    }
    if body.len() < buf.len() {
        out.push(b'\n');
    }
    std::borrow::Cow::Owned(out)
}

/// `text` with every control character written as `\u{..}`, for one line of text output.
pub(crate) fn escape_text(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_unicode().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_inside_a_line_are_escaped() {
        assert_eq!(&*escape_controls(b"plain line\n"), b"plain line\n");
        assert_eq!(
            &*escape_controls(b"held by a\nINFO acquired\x1b[31m\n"),
            b"held by a\\x0aINFO acquired\\x1b[31m\n"
        );
        assert_eq!(escape_text("a\u{1b}b"), "a\\u{1b}b");
    }
}
