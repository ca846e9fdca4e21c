//! Walking the parsed YAML with typed getters that record every problem and carry on, so
//! that `check-config` can list them all at once.

use std::collections::HashSet;
use std::env::VarError;

use super::expand::expand;
use super::keys::{join, known_keys, unknown_key_message};
use super::scrub::scrub;
use super::values::REDIS_URL_FORMS;
use super::yaml::{describe, Mapping, Value};

/// The environment lookup passed to [`super::load`].
pub(super) type Env<'e> = super::EnvLookup<'e>;

/// One mapping of the file (possibly absent), at a dotted path.
pub(super) struct Node<'a> {
    path: String,
    map: Option<&'a Mapping>,
}

impl<'a> Node<'a> {
    /// The dotted key of `leaf` in this mapping.
    pub(super) fn key(&self, leaf: &str) -> String {
        join(&self.path, leaf)
    }

    /// The value written for `leaf`; an absent key and `null` are both None (the default).
    fn value(&self, leaf: &str) -> Option<&'a Value> {
        self.map?.get(leaf).filter(|v| !v.is_null())
    }

    /// True when `leaf` is written with the value null (`~`, or nothing after the colon).
    pub(super) fn is_null(&self, leaf: &str) -> bool {
        self.map
            .and_then(|m| m.get(leaf))
            .is_some_and(Value::is_null)
    }
}

/// A value to convert, with the name to use for it in a problem.
pub(super) struct Input<'a> {
    /// The dotted config key the value is for (used to skip rules on rejected values).
    key: String,
    /// What the user wrote it as: the flag, the environment variable or the dotted key.
    label: String,
    raw: Raw<'a>,
}

impl Input<'_> {
    /// The flag, environment variable or dotted key the value was given as.
    pub(super) fn label(&self) -> &str {
        &self.label
    }
}

enum Raw<'a> {
    /// From the file: `${VAR}` is expanded, scalars of any YAML type are read as text.
    File(&'a Value),
    /// From a flag or a `LEADERD_*` variable: taken literally.
    Given(String),
    /// From a `LEADERD_*` variable whose value is not UTF-8 (refused when read).
    NotUtf8,
}

/// Collects the problems found while reading one configuration.
pub(super) struct Reader<'e> {
    env: Env<'e>,
    problems: Vec<String>,
    rejected: HashSet<String>,
}

impl<'e> Reader<'e> {
    pub(super) fn new(env: Env<'e>) -> Self {
        Reader {
            env,
            problems: Vec::new(),
            rejected: HashSet::new(),
        }
    }

    /// Looks `name` up in the environment (None when it is not set or not UTF-8).
    pub(super) fn env(&self, name: &str) -> Option<String> {
        (self.env)(name).ok()
    }

    /// Looks `name` up in the environment, telling a value that is not UTF-8 from none.
    pub(super) fn env_var(&self, name: &str) -> Result<String, VarError> {
        (self.env)(name)
    }

    /// Records a problem with the value of config key `key`; the message is scrubbed of
    /// any password written in a URL (but not the hint of what a Redis URL looks like).
    pub(super) fn problem(&mut self, key: &str, message: String) {
        self.rejected.insert(key.to_string());
        let pieces: Vec<String> = message.split(REDIS_URL_FORMS).map(scrub).collect();
        self.problems.push(pieces.join(REDIS_URL_FORMS));
    }

    /// True when none of `keys` had a value that was rejected (so rules on them make sense).
    pub(super) fn all_valid(&self, keys: &[&str]) -> bool {
        keys.iter().all(|k| !self.rejected.contains(*k))
    }

    /// True when no value in `section` (the section itself included) was rejected.
    pub(super) fn section_valid(&self, section: &str) -> bool {
        let inside = |key: &str| {
            key.strip_prefix(section)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        };
        !self.rejected.iter().any(|key| inside(key))
    }

    /// Every problem recorded, in the order found.
    pub(super) fn into_problems(self) -> Vec<String> {
        self.problems
    }

    /// The top level of the document: null (an empty file) or a mapping.
    pub(super) fn root<'a>(&mut self, doc: &'a Value) -> Node<'a> {
        self.mapping(String::new(), Some(doc), "the top level of the file")
    }

    /// The section `leaf` of `parent`; absent or null gives an empty section (defaults).
    pub(super) fn section<'a>(&mut self, parent: &Node<'a>, leaf: &str) -> Node<'a> {
        let path = parent.key(leaf);
        let label = path.clone();
        self.mapping(path, parent.value(leaf), &label)
    }

    fn mapping<'a>(&mut self, path: String, value: Option<&'a Value>, label: &str) -> Node<'a> {
        let map = match value {
            None | Some(Value::Null) => None,
            Some(Value::Mapping(m)) => Some(m),
            Some(other) => {
                let msg = format!(
                    "{label}: {} is not a mapping (allowed keys: {})",
                    describe(other),
                    known_keys(&path).join(", ")
                );
                self.problem(&path, msg);
                None
            }
        };
        if let Some(m) = map {
            self.check_keys(&path, m);
        }
        Node { path, map }
    }

    /// Records every key of `map` that the schema does not know.
    fn check_keys(&mut self, path: &str, map: &Mapping) {
        let known = known_keys(path);
        for key in map.keys() {
            match key.as_str() {
                Some(k) if known.iter().any(|x| x == k) => {}
                Some(k) => self.problems.push(unknown_key_message(path, k)),
                None => self
                    .problems
                    .push(unknown_key_message(path, &describe(key))),
            }
        }
    }

    /// The value of `leaf` from the file only.
    pub(super) fn file<'a>(&self, node: &Node<'a>, leaf: &str) -> Option<Input<'a>> {
        let key = node.key(leaf);
        node.value(leaf).map(|v| Input {
            label: key.clone(),
            key,
            raw: Raw::File(v),
        })
    }

    /// The value of `leaf` from the file, converted; `default` when absent or rejected.
    pub(super) fn or<T>(
        &mut self,
        node: &Node<'_>,
        leaf: &str,
        convert: impl FnOnce(&str) -> Result<T, super::refused::ValueError>,
        default: T,
    ) -> T {
        let input = self.file(node, leaf);
        self.get(input, convert).unwrap_or(default)
    }

    /// The value of `leaf` by precedence: the flag, else the environment variable (if the
    /// key has one), else the file.
    pub(super) fn layered<'a>(
        &self,
        node: &Node<'a>,
        leaf: &str,
        var: Option<&str>,
        flag: (&str, &Option<String>),
    ) -> Option<Input<'a>> {
        let key = node.key(leaf);
        let given = |label: &str, text: String| Input {
            key: key.clone(),
            label: label.to_string(),
            raw: Raw::Given(text),
        };
        if let Some(text) = flag.1 {
            return Some(given(flag.0, text.clone()));
        }
        if let Some(var) = var {
            match self.env_var(var) {
                Ok(text) => return Some(given(var, text)),
                Err(VarError::NotUnicode(_)) => {
                    let label = var.to_string();
                    return Some(Input {
                        key,
                        label,
                        raw: Raw::NotUtf8,
                    });
                }
                Err(VarError::NotPresent) => {}
            }
        }
        self.file(node, leaf)
    }

    /// Converts `input` with `convert`, which gets the text and returns the value or a
    /// message naming the value and what is allowed. None when absent or rejected.
    pub(super) fn get<T>(
        &mut self,
        input: Option<Input<'_>>,
        convert: impl FnOnce(&str) -> Result<T, super::refused::ValueError>,
    ) -> Option<T> {
        let input = input?;
        let text = self.text(&input)?;
        match convert(&text) {
            Ok(value) => Some(value),
            Err(why) => {
                self.problem(&input.key, format!("{}: {why}", input.label));
                None
            }
        }
    }

    /// A list of strings (each one `${VAR}`-expanded); None when absent or rejected.
    pub(super) fn list(&mut self, input: Option<Input<'_>>) -> Option<Vec<String>> {
        let input = input?;
        let Raw::File(Value::Sequence(items)) = input.raw else {
            let shown = self.shown(&input.raw);
            let msg = format!(
                "{}: {shown} is not a list of strings (write [\"a\", \"b\"])",
                input.label
            );
            self.problem(&input.key, msg);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut all_read = true;
        for (i, item) in items.iter().enumerate() {
            let label = format!("{}[{i}]", input.label);
            let item = Input {
                key: input.key.clone(),
                label,
                raw: Raw::File(item),
            };
            match self.text(&item) {
                Some(text) => out.push(text),
                None => all_read = false,
            }
        }
        all_read.then_some(out)
    }

    /// The text of a scalar: strings expanded, numbers and booleans as written.
    fn text(&mut self, input: &Input<'_>) -> Option<String> {
        let value = match &input.raw {
            Raw::Given(text) => return Some(text.clone()),
            Raw::NotUtf8 => {
                self.problem(&input.key, super::not_utf8(&input.label));
                return None;
            }
            Raw::File(value) => *value,
        };
        match value {
            Value::String(s) => self.expanded(input, s),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            other => {
                let msg = format!(
                    "{}: {} is not a single value (allowed: one value, such as a string, a number or true/false)",
                    input.label,
                    describe(other)
                );
                self.problem(&input.key, msg);
                None
            }
        }
    }

    fn expanded(&mut self, input: &Input<'_>, s: &str) -> Option<String> {
        match expand(s, self.env) {
            Ok(text) => Some(text),
            Err(whys) => {
                for why in whys {
                    self.problem(&input.key, format!("{}: {s}: {why}", input.label));
                }
                None
            }
        }
    }

    fn shown(&self, raw: &Raw<'_>) -> String {
        match raw {
            Raw::Given(text) => format!("{text:?}"),
            Raw::NotUtf8 => "a value that is not UTF-8".to_string(),
            Raw::File(value) => describe(value),
        }
    }
}
