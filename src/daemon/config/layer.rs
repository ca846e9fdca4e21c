//! What is written outside the file's keys, put into the document before it is read: the
//! values of flags and `LEADERD_*` variables set over the file's (flag > environment >
//! file; each remembered as the flag or variable that gave it, and taken literally), then
//! `${VAR}` replaced in the file's strings.

use std::env::VarError;

use super::expand::expand;
use super::keys::{is_section, join, known_keys};
use super::problems::Problems;
use super::yaml::{Mapping, Value};
use super::{not_utf8, EnvLookup, Overrides};

/// Layers the flags and variables of `o` over `doc` and expands the file's `${VAR}`s.
pub(super) fn layer(doc: &mut Value, o: &Overrides, env: EnvLookup<'_>, p: &mut Problems) {
    for (key, flag, var, given) in o.layered() {
        let text = match (given, var.map(env)) {
            (Some(text), _) => {
                p.given(key, flag);
                text.clone()
            }
            (None, Some(Ok(text))) => {
                p.given(key, var.unwrap_or(flag));
                text
            }
            (None, Some(Err(VarError::NotUnicode(_)))) => {
                let var = var.unwrap_or(flag);
                p.given(key, var);
                p.problem(key, not_utf8(var));
                set(doc, key, None);
                continue;
            }
            (None, _) => continue,
        };
        set(doc, key, Some(Value::String(text)));
    }
    expand_in(doc, "", env, p);
}

/// Sets (or removes) the dotted `key` in `doc`, making its sections where they are missing.
fn set(doc: &mut Value, key: &str, value: Option<Value>) {
    let mut at = doc;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        if at.is_null() {
            *at = Value::Mapping(Mapping::new());
        }
        let Value::Mapping(map) = at else { return };
        if parts.peek().is_none() {
            match value {
                Some(value) => map.insert(part.into(), value),
                None => map.remove(part),
            };
            return;
        }
        at = map.entry(part.into()).or_insert(Value::Null);
    }
}

/// Replaces `${VAR}` in the strings of the known keys of the section at `path` (a list's
/// items included); a key with a reference that cannot be replaced is refused and removed.
fn expand_in(section: &mut Value, path: &str, env: EnvLookup<'_>, p: &mut Problems) {
    let Value::Mapping(map) = section else { return };
    let mut refused = Vec::new();
    for (key, value) in map.iter_mut() {
        let Some(name) = key.as_str() else { continue };
        let full = join(path, name);
        if is_section(&full) {
            expand_in(value, &full, env, p);
            continue;
        }
        if !known_keys(path).iter().any(|k| k == name) || p.is_given(&full) {
            continue;
        }
        let mut one = |s: &mut String, label: &str| match expand(s, env) {
            Ok(text) => {
                *s = text;
                true
            }
            Err(whys) => {
                for why in whys {
                    p.problem(&full, format!("{label}: {s}: {why}"));
                }
                false
            }
        };
        let ok = match value {
            Value::String(s) => one(s, &full),
            Value::Sequence(items) => items.iter_mut().enumerate().fold(true, |ok, (i, item)| {
                let fine = match item {
                    Value::String(s) => one(s, &format!("{full}[{i}]")),
                    _ => true,
                };
                ok && fine
            }),
            _ => true,
        };
        if !ok {
            refused.push(key.clone());
        }
    }
    for key in refused {
        map.remove(&key);
    }
}
