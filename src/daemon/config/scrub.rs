//! Passwords out of any text: every `scheme://user:PASSWORD@host` in it shown with
//! `<redacted>`. A leaf of the config layer, used by its problem lines and its printer.

/// Shown instead of every secret.
pub(super) const REDACTED: &str = "<redacted>";

/// Replaces the password of every URL in `text` (`scheme://user:PASSWORD@host`) with
/// `<redacted>`; the rest of the text is unchanged. A password may hold any character
/// (quotes, spaces, `/?#@`): everything from the user's `:` to the last `@` before the next
/// URL or line break goes.
pub(crate) fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let window_end = [tail.find("://"), tail.find('\n')]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(tail.len());
        let Some(last_at) = tail[..window_end].rfind('@') else {
            rest = tail;
            continue;
        };
        let userinfo = &tail[..last_at];
        match userinfo.split_once(':') {
            Some((user, _)) if user.chars().all(is_user_char) => {
                out.push_str(user);
                out.push(':');
                out.push_str(REDACTED);
            }
            Some(_) => out.push_str(REDACTED),
            None => out.push_str(userinfo),
        }
        out.push('@');
        rest = &tail[last_at + 1..];
    }
    out.push_str(rest);
    out
}

/// A character of a plain user name (shown); anything else makes the userinfo a secret.
fn is_user_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~%".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (Passwords with quotes, spaces and slashes: tests/hardening.rs, through the binary.)
    #[test]
    fn scrubs_passwords_in_urls() {
        assert_eq!(
            scrub("redis://u:p4ss@h:6379/0"),
            "redis://u:<redacted>@h:6379/0"
        );
        assert_eq!(scrub("redis://:p4ss@h"), "redis://:<redacted>@h");
        assert_eq!(
            scrub("x \"rediss://a:b@h\" and redis://c:d@e/1"),
            "x \"rediss://a:<redacted>@h\" and redis://c:<redacted>@e/1"
        );
        assert_eq!(scrub("redis://user@h:1"), "redis://user@h:1");
        assert_eq!(scrub("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(scrub("no url here"), "no url here");
        assert_eq!(scrub("redis://u:p@ss@h"), "redis://u:<redacted>@h");
    }
}
