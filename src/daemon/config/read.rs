//! Reading the document into the config structs with serde: a deserializer over the parsed
//! YAML that knows the dotted key it is at, reports the keys a section does not know, and
//! lets the leaf readers (`leaf.rs`) record a refused value as a problem and carry on, so
//! that every problem is found at once.

use std::cell::RefCell;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::keys::{is_section, known_keys};
use super::problems::Problems;
use super::yaml::{describe, Mapping, Value};
use super::Config;

/// Where the reading is (the keys above the value being read), and what it found.
struct Reading {
    path: Vec<String>,
    problems: Problems,
}

impl Reading {
    fn key(&self) -> String {
        self.path.join(".")
    }
}

thread_local! {
    static READING: RefCell<Option<Reading>> = const { RefCell::new(None) };
}

/// Runs `f` on the reading under way; None outside [`document`].
fn with<T>(f: impl FnOnce(&mut Reading) -> T) -> Option<T> {
    READING.with(|r| r.borrow_mut().as_mut().map(f))
}

/// Reads `doc` into a [`Config`]: refused values go to `problems` and are read as a default.
pub(super) fn document(doc: &Value, problems: Problems) -> (Config, Problems) {
    let reading = Reading {
        path: Vec::new(),
        problems,
    };
    READING.with(|r| *r.borrow_mut() = Some(reading));
    let config = Config::deserialize(Doc(doc));
    let mut problems = READING
        .with(|r| r.borrow_mut().take())
        .map(|r| r.problems)
        .unwrap_or_default();
    let config = config.unwrap_or_else(|e| {
        problems.problem("", format!("the file cannot be read: {e}"));
        Config::default()
    });
    (config, problems)
}

type Error = de::value::Error;

/// A value of the document, read where it is.
#[derive(Clone, Copy)]
struct Doc<'a>(&'a Value);

static NULL: Value = Value::Null;

impl<'de> Deserializer<'de> for Doc<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Mapping(m) => visitor.visit_map(Entries::new(Some(m))),
            other => other
                .clone()
                .deserialize_any(visitor)
                .map_err(de::Error::custom),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    /// A section: a mapping, or null (all defaults); anything else is a problem.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let map = match self.0 {
            Value::Mapping(m) => Some(m),
            Value::Null => None,
            other => {
                with(|r| {
                    let key = r.key();
                    let msg = format!(
                        "{key}: {} is not a mapping (allowed keys: {})",
                        describe(other),
                        known_keys(&key).join(", ")
                    );
                    r.problems.problem(&key, msg);
                });
                None
            }
        };
        visitor.visit_map(Entries::new(map))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct enum identifier ignored_any
    }
}

/// The entries of a mapping: in a section, an unknown key is recorded and skipped; a key
/// written with the value null is left out (its default).
struct Entries<'a> {
    section: Option<String>,
    rest: std::vec::IntoIter<(&'a Value, &'a Value)>,
    value: Option<&'a Value>,
}

impl<'a> Entries<'a> {
    fn new(map: Option<&'a Mapping>) -> Self {
        let here = with(|r| r.key()).unwrap_or_default();
        let rest: Vec<_> = map.into_iter().flatten().collect();
        Entries {
            section: is_section(&here).then_some(here),
            rest: rest.into_iter(),
            value: None,
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        for (key, value) in self.rest.by_ref() {
            let name = key.as_str().map_or_else(|| describe(key), str::to_string);
            if let Some(section) = &self.section {
                if !known_keys(section).contains(&name) || key.as_str().is_none() {
                    with(|r| r.problems.unknown(section, &name));
                    continue;
                }
            }
            if value.is_null() {
                continue;
            }
            with(|r| r.path.push(name));
            self.value = Some(value);
            return seed.deserialize(Doc(key)).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let out = seed.deserialize(Doc(self.value.take().unwrap_or(&NULL)));
        with(|r| r.path.pop());
        out
    }
}

/// Records why the value at the current key (its item `item`, e.g. `[2]`, if any) was
/// refused; outside [`document`] that is an error.
pub(super) fn refuse<E: de::Error>(item: &str, item_key: bool, why: String) -> Result<(), E> {
    let recorded = with(|r| {
        let key = r.key();
        let line = format!("{}{item}: {why}", r.problems.label(&key));
        let at = if item_key {
            format!("{key}{item}")
        } else {
            key
        };
        r.problems.problem(&at, line);
    });
    recorded.ok_or_else(|| E::custom(why))
}
