//! Bounds on a configuration document before it is parsed for real.
//!
//! Owns the two limits every config source goes through (file, admin API,
//! etcd): the document's size in bytes, and the number of values it
//! expands to once YAML aliases are followed. A document of a few hundred
//! kilobytes whose aliases point at large anchored subtrees expands to
//! gigabytes ("billion laughs"); counting values with a budget that stops
//! the walk at the limit keeps that to a bounded amount of work and
//! memory, while ordinary use of anchors (a shared node list, a shared
//! `match` block) keeps working. Must not touch: the schema (any shape
//! counts the same).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::ConfigError;

/// The largest document accepted from any source.
pub const MAX_DOCUMENT_BYTES: usize = 10 << 20;

/// The most values (scalars, sequences, mappings, keys included) a
/// document may expand to. The 10,000-rule benchmark config is about 140,000.
pub const MAX_VALUES: usize = 1_000_000;

/// Checks `text` against both bounds; `may_alias` is false for JSON,
/// which has no aliases.
pub(super) fn check(text: &str, may_alias: bool) -> Result<(), ConfigError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(ConfigError::new(
            "",
            format!(
                "the configuration document is {} bytes, above the limit of {MAX_DOCUMENT_BYTES}",
                text.len()
            ),
        ));
    }
    // Aliases need an anchor (`&name`). Without any `&` there is nothing to
    // expand, and the walk (as slow as the parse itself) is skipped; JSON
    // callers never walk.
    if !may_alias || !text.contains('&') {
        return Ok(());
    }
    let mut left = MAX_VALUES;
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match (Count { left: &mut left }).deserialize(de) {
        Ok(()) => Ok(()),
        // Syntax errors are reported by the real parse, with their path.
        Err(_) if left > 0 => Ok(()),
        Err(_) => Err(ConfigError::new(
            "",
            format!(
                "the configuration document expands to more than {MAX_VALUES} values (YAML aliases repeating large anchors?)"
            ),
        )),
    }
}

/// Walks any document, taking one unit of `left` per value; fails when
/// nothing is left.
struct Count<'a> {
    left: &'a mut usize,
}

impl Count<'_> {
    fn take<E: de::Error>(&mut self) -> Result<(), E> {
        if *self.left == 0 {
            return Err(E::custom("value budget exhausted"));
        }
        *self.left -= 1;
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

macro_rules! leaf {
    ($($name:ident: $ty:ty),*) => {$(
        fn $name<E: de::Error>(mut self, _: $ty) -> Result<(), E> {
            self.take()
        }
    )*};
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    leaf!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_i128: i128,
          visit_u128: u128, visit_f64: f64, visit_str: &str, visit_bytes: &[u8]);

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.take()
    }

    fn visit_none<E: de::Error>(mut self) -> Result<(), E> {
        self.take()
    }

    fn visit_some<D: Deserializer<'de>>(mut self, d: D) -> Result<(), D::Error> {
        self.take()?;
        d.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.take()?;
        while seq
            .next_element_seed(Count {
                left: &mut *self.left,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.take()?;
        while map
            .next_key_seed(Count {
                left: &mut *self.left,
            })?
            .is_some()
        {
            map.next_value_seed(Count {
                left: &mut *self.left,
            })?;
        }
        Ok(())
    }

    fn visit_enum<A: de::EnumAccess<'de>>(mut self, data: A) -> Result<(), A::Error> {
        use de::VariantAccess;
        self.take()?;
        let ((), variant) = data.variant_seed(Count {
            left: &mut *self.left,
        })?;
        variant.newtype_variant_seed(Count {
            left: &mut *self.left,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nine levels of ten aliases each: 10^9 strings once expanded, from a
    /// document of a few hundred bytes.
    fn laughs(levels: usize) -> String {
        let mut s =
            String::from("a0: &a0 [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
        for i in 1..levels {
            let refs = vec![format!("*a{}", i - 1); 10].join(",");
            s.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        s
    }

    /// One anchored list of `n` strings, then `n` aliases of it: `n²`
    /// values from a document of about `8n` bytes. Within the YAML
    /// library's own alias limit (jumps ≤ events), so only the value
    /// budget stops it.
    fn wide(n: usize) -> String {
        let items = vec!["x"; n].join(",");
        let refs = vec!["*big"; n].join(",");
        format!("big: &big [{items}]\nall: [{refs}]\n")
    }

    #[test]
    fn alias_bombs_stop_at_the_value_budget() {
        let doc = wide(5_000);
        assert!(doc.len() < 64 << 10);
        let e = check(&doc, true).unwrap_err();
        assert!(e.message.contains("expands to more than"), "{e}");
        // The whole parse refuses it too, with the same reason.
        let e = crate::config::parse(&doc, crate::config::Format::Yaml).unwrap_err();
        assert!(e.message.contains("expands to more than"), "{e}");
        // Nested aliases are refused (by the YAML library's own repetition
        // limit, or by the budget) rather than expanded.
        assert!(crate::config::parse(&laughs(9), crate::config::Format::Yaml).is_err());
        // Ordinary anchors keep working.
        assert!(check(&wide(100), true).is_ok());
        assert!(check(&laughs(3), true).is_ok());
    }

    #[test]
    fn oversized_documents_are_refused() {
        let big = "#".repeat(MAX_DOCUMENT_BYTES + 1);
        assert!(check(&big, true).unwrap_err().message.contains("bytes"));
    }

    #[test]
    fn syntax_errors_are_left_to_the_parser() {
        assert!(check("a: [", true).is_ok());
    }
}
