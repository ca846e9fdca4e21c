//! Refusing YAML anchors and aliases before the file is parsed: a leaderd config needs none,
//! and a few kilobytes of nested aliases expand to gigabytes (an alias bomb).

/// The 1-based line of the first anchor (`&name`) or alias (`*name`) in `text`, if any.
/// Quoted scalars, comments and block scalar bodies (`|`, `>`) are skipped; `&` and `*`
/// inside a plain scalar (`a && b`) are text, as in YAML.
pub(super) fn first_anchor_or_alias(text: &str) -> Option<usize> {
    let mut block: Option<usize> = None; // indentation of the key that opened a block scalar
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if let Some(open) = block {
            if line.trim().is_empty() || indent > open {
                continue;
            }
            block = None;
        }
        let code = strip_comment_and_quotes(line);
        if has_indicator(&code) {
            return Some(i + 1);
        }
        let tail = code.trim_end();
        if tail.ends_with(['|', '>'])
            || tail.ends_with("|-")
            || tail.ends_with("|+")
            || tail.ends_with(">-")
            || tail.ends_with(">+")
        {
            block = Some(indent);
        }
    }
    None
}

/// The line with quoted scalars blanked out and the comment removed.
fn strip_comment_and_quotes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some('\'') if c == '\'' && chars.peek() == Some(&'\'') => {
                chars.next();
            }
            Some('"') if c == '\\' => {
                chars.next();
            }
            Some(q) if c == q => {
                quote = None;
                out.push('_');
            }
            Some(_) => {}
            None if c == '#' && prev.is_whitespace() => break,
            None if (c == '"' || c == '\'') && starts_token(prev) => quote = Some(c),
            None => out.push(c),
        }
        prev = c;
    }
    out
}

/// True where a YAML node may begin: after indentation, `- `, `: `, `? `, `[`, `{` or `,`.
fn has_indicator(code: &str) -> bool {
    let bytes = code.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b != b'&' && b != b'*' {
            continue;
        }
        let named = bytes.get(i + 1).is_some_and(|n| !n.is_ascii_whitespace());
        if named && node_starts_at(&code[..i]) {
            return true;
        }
    }
    false
}

fn node_starts_at(before: &str) -> bool {
    let trimmed = before.trim_end();
    if trimmed.is_empty() {
        return true;
    }
    let spaced = trimmed.len() < before.len();
    let last_word = trimmed.rsplit(char::is_whitespace).next().unwrap_or("");
    match trimmed.chars().last() {
        Some('[' | '{' | ',') => true,
        Some('-' | ':' | '?') => spaced,
        _ => spaced && last_word.starts_with('!'),
    }
}

fn starts_token(prev: char) -> bool {
    prev.is_whitespace() || "[{,:-".contains(prev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_anchors_and_aliases() {
        let bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n";
        assert_eq!(first_anchor_or_alias(bomb), Some(1));
        assert_eq!(first_anchor_or_alias("x:\n  - *a\n"), Some(2));
        assert_eq!(first_anchor_or_alias("x: {k: *a}\n"), Some(1));
        assert_eq!(first_anchor_or_alias("x: !!str &a v\n"), Some(1));
        assert_eq!(first_anchor_or_alias("- &a\n"), Some(1));
    }

    #[test]
    fn leaves_plain_text_alone() {
        for ok in [
            "name: a&b\n",
            "exec:\n  command: [sh, -c, a && b]\n",
            "exec:\n  command: [sh, -c, \"exec *x &y\"]\n",
            "key_prefix: '*'\n",
            "x: 1 # a comment with *alias and &anchor\n",
            "cmd: |\n  *not an alias\n  &nor an anchor\nnext: 1\n",
            "identity: ${POD}\n",
            "url: redis://:p&w*@h\n",
        ] {
            assert_eq!(first_anchor_or_alias(ok), None, "{ok}");
        }
    }
}
