//! `${VAR}` substitution in string values of the config file.
//!
//! `${NAME}` is replaced by the environment variable NAME (which must be set; an empty value
//! is allowed). `$${` is an escape for a literal `${`. A `$` not followed by `{` is kept as
//! is. Values given by flags or `LEADERD_*` variables are never expanded.

/// Replaces every `${NAME}` in `value` from `env`.
///
/// # Errors
///
/// One message per problem (an unset variable, a bad name, a missing `}`), each saying
/// what is wrong but not naming the key: the caller prefixes that.
pub(super) fn expand(value: &str, env: super::EnvLookup<'_>) -> Result<String, Vec<String>> {
    let mut out = String::with_capacity(value.len());
    let mut problems = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            rest = substitute(after, env, &mut out, &mut problems);
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Handles the text after a `${`: pushes the variable's value onto `out` (or a problem)
/// and returns what follows the closing `}`.
fn substitute<'v>(
    after: &'v str,
    env: super::EnvLookup<'_>,
    out: &mut String,
    problems: &mut Vec<String>,
) -> &'v str {
    let Some(end) = after.find('}') else {
        problems.push("\"${\" without a closing \"}\" (write $${ for a literal ${)".to_string());
        return "";
    };
    let name = &after[..end];
    if !is_var_name(name) {
        problems.push(format!(
            "\"${{{name}}}\" is not a valid variable reference (allowed: ${{NAME}} with NAME of [A-Za-z0-9_], not starting with a digit)"
        ));
    } else {
        match env(name) {
            Ok(val) => out.push_str(&val),
            Err(std::env::VarError::NotPresent) => {
                problems.push(format!("environment variable {name} is not set"));
            }
            Err(std::env::VarError::NotUnicode(_)) => problems.push(format!(
                "environment variable {name} is set, but its value is not valid UTF-8 (allowed: UTF-8 text)"
            )),
        }
    }
    &after[end + 1..]
}

/// True for a POSIX-style environment variable name.
fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Result<String, std::env::VarError> {
        match name {
            "POD" => Ok("pod-a".into()),
            "EMPTY" => Ok(String::new()),
            _ => Err(std::env::VarError::NotPresent),
        }
    }

    #[test]
    fn substitutes_and_escapes() {
        assert_eq!(expand("${POD}", &env).unwrap(), "pod-a");
        assert_eq!(expand("x-${POD}-${POD}", &env).unwrap(), "x-pod-a-pod-a");
        assert_eq!(expand("a${EMPTY}b", &env).unwrap(), "ab");
        assert_eq!(expand("$${POD}", &env).unwrap(), "${POD}");
        assert_eq!(expand("cost $5 $", &env).unwrap(), "cost $5 $");
        assert_eq!(expand("plain", &env).unwrap(), "plain");
    }

    #[test]
    fn reports_every_problem() {
        let errs = expand("${NOPE}/${ALSO}/${1x}/${POD", &env).unwrap_err();
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert_eq!(errs[0], "environment variable NOPE is not set");
        assert_eq!(errs[1], "environment variable ALSO is not set");
        assert!(errs[2].contains("not a valid variable reference"));
        assert!(errs[3].contains("without a closing"));
    }
}
