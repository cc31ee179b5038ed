//! Every unknown field of a document at once, each with a "did you mean".
//!
//! serde stops at the first unknown field. A file with three typos should
//! not take three rounds of edit-and-retry, nor hide its other mistakes, so
//! when the typed parse fails on an unknown field the document is read as a
//! plain tree, the field is set aside (reported), and the typed parse runs
//! again, until it passes or fails for another reason. The remainder then
//! goes through validation like any document.
//!
//! Owns: the retry loop and the spelling hint. Must not touch: the schema
//! (it learns the known names from serde's own message).

use serde_json::Value;
use serde_path_to_error::Segment;

use super::raw::RawConfig;
use super::{clean_path, parse, ConfigError, Format};

/// At most this many unknown fields are listed; past it the parse stops.
const MAX_UNKNOWN: usize = 64;

/// The raw document with every unknown field removed (None when some other
/// structural error stops the parse), and the errors found on the way.
pub(super) fn parse_lenient(text: &str, format: Format) -> (Option<RawConfig>, Vec<ConfigError>) {
    let first = match parse(text, format) {
        Ok(raw) => return (Some(raw), Vec::new()),
        Err(e) => e,
    };
    if unknown_name(&first.message).is_none() {
        return (None, vec![first]);
    }
    let Some(mut tree) = as_tree(text, format) else {
        return (None, vec![with_hint(first)]);
    };
    // The first error keeps the text parser's message (it has a line).
    let mut errors = vec![with_hint(first)];
    let mut first_pending = true;
    loop {
        let err = match serde_path_to_error::deserialize::<_, RawConfig>(&tree) {
            Ok(raw) => return (Some(raw), errors),
            Err(e) => e,
        };
        let segments: Vec<Segment> = err.path().iter().cloned().collect();
        let path = clean_path(&err.path().to_string());
        let message = err.into_inner().to_string();
        if unknown_name(&message).is_none() {
            errors.push(ConfigError::new(path, message));
            return (None, errors);
        }
        if first_pending {
            first_pending = false;
        } else {
            errors.push(with_hint(ConfigError::new(path, message)));
        }
        if errors.len() >= MAX_UNKNOWN {
            errors.push(ConfigError::new(
                "",
                format!("more than {MAX_UNKNOWN} unknown fields; the rest are not listed"),
            ));
            return (None, errors);
        }
        if !remove(&mut tree, &segments) {
            return (None, errors);
        }
    }
}

/// The document as a plain tree; None when it has no JSON shape (a YAML
/// mapping with a non-text key, say).
fn as_tree(text: &str, format: Format) -> Option<Value> {
    match format {
        Format::Json => serde_json::from_str(text).ok(),
        Format::Yaml => {
            let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).ok()?;
            serde_json::to_value(v).ok()
        }
    }
}

/// Removes the field the path ends in; false when the path cannot be
/// followed (an enum variant, say), so the loop cannot make progress.
fn remove(tree: &mut Value, segments: &[Segment]) -> bool {
    let Some((Segment::Map { key }, parents)) = segments.split_last() else {
        return false;
    };
    let mut at = tree;
    for s in parents {
        at = match (s, at) {
            (Segment::Seq { index }, Value::Array(a)) => match a.get_mut(*index) {
                Some(v) => v,
                None => return false,
            },
            (Segment::Map { key }, Value::Object(o)) => match o.get_mut(key) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match at {
        Value::Object(o) => o.remove(key).is_some(),
        _ => false,
    }
}

/// The name in serde's "unknown field `x`, expected ..." message.
fn unknown_name(message: &str) -> Option<&str> {
    let rest = message.split_once("unknown field `")?.1;
    Some(rest.split_once('`')?.0)
}

/// The names serde lists after "expected".
fn expected_names(message: &str) -> Vec<&str> {
    let Some((_, list)) = message.split_once("expected") else {
        return Vec::new();
    };
    list.split('`').skip(1).step_by(2).collect()
}

/// The known name closest to `typo`, when close enough to be a typo (a
/// few letters off, or an abbreviation: `certs` for `certificates`).
fn closest<'a>(typo: &str, known: &[&'a str]) -> Option<&'a str> {
    let near = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(typo, k), *k))
        .filter(|(d, k)| *d <= 1.max(k.len().min(typo.len()) / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k);
    near.or_else(|| {
        let mut prefixed = known.iter().filter(|k| abbreviates(typo, k));
        match (prefixed.next(), prefixed.next()) {
            (Some(k), None) => Some(*k),
            _ => None,
        }
    })
}

/// `typo` starts like `name` (three letters) and its letters appear in
/// `name` in order: `certs` → `certificates`, `hdrs` no.
fn abbreviates(typo: &str, name: &str) -> bool {
    if typo.len() < 3 || typo.len() >= name.len() || name.get(..3) != typo.get(..3) {
        return false;
    }
    let mut rest = name.chars();
    typo.chars().all(|c| rest.any(|n| n == c))
}

/// Puts "(did you mean `x`?)" after the unknown name when one is close,
/// in place of the list of expected names.
fn with_hint(mut e: ConfigError) -> ConfigError {
    let Some(name) = unknown_name(&e.message) else {
        return e;
    };
    let Some(guess) = closest(name, &expected_names(&e.message)) else {
        return e;
    };
    let marker = format!("unknown field `{name}`");
    if let Some(at) = e.message.find(&marker) {
        let end = at + marker.len();
        e.message
            .insert_str(end, &format!(" (did you mean `{guess}`?)"));
        // With a guess, the list of every field is noise (and long at the
        // top level); the position stays.
        if let Some(list) = e.message.find(", expected one of ") {
            let rest = e.message[list..]
                .find(" at line ")
                .map_or(String::new(), |at| e.message[list + at..].to_owned());
            e.message.truncate(list);
            e.message.push_str(&rest);
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "listeners: [{name: p, address: \"127.0.0.1:1\"}]\n";

    #[test]
    fn every_unknown_field_is_listed_with_a_hint_and_validation_still_runs() {
        let doc = "listeners: [{name: p, adress: \"127.0.0.1:1\"}]\n\
                   servics: []\n\
                   routes: [{id: a, match: {path_prefx: /}, service: nowhere}]\n";
        let errors = crate::config::load(doc, Format::Yaml).unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text[0].starts_with(
                "listeners[0].adress: unknown field `adress` (did you mean `address`?)"
            ),
            "{text:?}"
        );
        assert!(
            text[0].contains("line 1"),
            "the first keeps its line: {text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t
                    .starts_with("servics: unknown field `servics` (did you mean `services`?)")),
            "{text:?}"
        );
        assert!(text.iter().any(|t| t.starts_with("routes[0].match.path_prefx: unknown field `path_prefx` (did you mean `path_prefix`?)")), "{text:?}");
        // The rest of the document was validated too.
        assert!(
            errors.iter().any(|e| e.path == "listeners[0].address"),
            "{text:?}"
        );
        assert!(
            errors.iter().any(|e| e.path == "routes[0].service"),
            "{text:?}"
        );
    }

    #[test]
    fn a_far_name_gets_no_guess_and_json_works_too() {
        let doc = format!("{BASE}zzzzzz: 1\n");
        let errors = crate::config::load(&doc, Format::Yaml).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(!errors[0].message.contains("did you mean"), "{errors:?}");
        let json = r#"{"listeners":[{"name":"p","address":"127.0.0.1:1","normalise_path":true}]}"#;
        let errors = crate::config::parse_all(json, Format::Json).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].message.contains("did you mean `normalize_path`?"),
            "{errors:?}"
        );
    }

    #[test]
    fn another_structural_error_stops_after_the_unknown_fields() {
        let doc =
            "listeners: [{name: p, address: \"127.0.0.1:1\", debug_header: true}]\nroutes: 5\n";
        let errors = crate::config::load(doc, Format::Yaml).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(errors[0].path, "listeners[0].debug_header");
        assert_eq!(errors[1].path, "routes");
    }

    #[test]
    fn an_abbreviation_gets_its_full_name() {
        assert_eq!(closest("certs", &["certificates"]), Some("certificates"));
        assert_eq!(closest("path", &["path_prefix", "path_regex"]), None);
        assert_eq!(closest("ab", &["abc_long"]), None);
    }

    #[test]
    fn a_valid_document_takes_the_one_pass_path() {
        let (raw, errors) = parse_lenient(BASE, Format::Yaml);
        assert!(raw.is_some() && errors.is_empty());
    }
}
