//! `access_log:` — whether the access log is written, in which format, and
//! where.
//!
//! Owns the section's rules: `format` is `text` or `json`, `path` is a
//! non-empty file path without NUL bytes. Must not touch: the file itself
//! (opening it is the binary's, at start and on reload).

use super::values::unknown_choice;
use super::Validator;
use crate::config::raw::RawAccessLog;
use crate::config::{AccessLogConfig, AccessLogFormat};

impl Validator {
    pub(super) fn access_log(&mut self, raw: Option<&RawAccessLog>) -> AccessLogConfig {
        let mut c = AccessLogConfig::default();
        let Some(raw) = raw else { return c };
        if let Some(e) = raw.enabled {
            c.enabled = e;
        }
        c.format = match raw.format.as_deref() {
            None => None,
            Some("text") => Some(AccessLogFormat::Text),
            Some("json") => Some(AccessLogFormat::Json),
            Some(other) => {
                self.err(
                    "access_log.format",
                    unknown_choice("access log format", other, &["text", "json"]),
                );
                None
            }
        };
        c.path = match raw.path.as_deref() {
            None => None,
            Some("") => {
                self.err(
                    "access_log.path",
                    "must not be empty (leave it out, or null, to write to stderr)",
                );
                None
            }
            Some(p) if p.contains('\0') => {
                self.err("access_log.path", "must not contain a NUL byte");
                None
            }
            Some(p) if p.ends_with('/') => {
                self.err(
                    "access_log.path",
                    format!("{p:?} names a directory, not a file"),
                );
                None
            }
            Some(p) => Some(std::path::PathBuf::from(p)),
        };
        c
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, validate, AccessLogFormat, Format};

    fn errors(doc: &str) -> Vec<String> {
        let raw = parse(doc, Format::Yaml).expect("parses");
        match validate(&raw) {
            Ok(_) => Vec::new(),
            Err(e) => e
                .into_iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect(),
        }
    }

    const BASE: &str = "listeners: [{ name: public, address: 127.0.0.1:8080 }]\n\
                        services: [{ name: a, nodes: [{ id: a1, address: 127.0.0.1:9000 }] }]\n\
                        routes: [{ id: r, match: { path_prefix: / }, service: a }]\n";

    #[test]
    fn defaults_and_values() {
        let raw = parse(BASE, Format::Yaml).unwrap();
        let c = validate(&raw).unwrap().access_log;
        assert!(c.enabled);
        assert_eq!(c.format, None);
        assert_eq!(c.path, None);
        let doc =
            format!("{BASE}access_log: {{ enabled: false, format: json, path: /tmp/a.log }}\n");
        let c = validate(&parse(&doc, Format::Yaml).unwrap())
            .unwrap()
            .access_log;
        assert!(!c.enabled);
        assert_eq!(c.format, Some(AccessLogFormat::Json));
        assert_eq!(c.path.as_deref(), Some(std::path::Path::new("/tmp/a.log")));
        let doc = format!("{BASE}access_log: {{ path: null, format: text }}\n");
        let c = validate(&parse(&doc, Format::Yaml).unwrap())
            .unwrap()
            .access_log;
        assert_eq!((c.path, c.format), (None, Some(AccessLogFormat::Text)));
    }

    #[test]
    fn it_is_a_per_process_section_in_fleet_mode() {
        // The shared etcd document may not carry it...
        let e = crate::config::fleet::parse_runtime("access_log: { path: /tmp/a.log }\n")
            .expect_err("a bootstrap section in the etcd document");
        assert_eq!(e[0].path, "access_log");
        // ...and the local file's block survives composition.
        let local = parse(
            &format!("{BASE}access_log: {{ format: json }}\n"),
            Format::Yaml,
        )
        .unwrap();
        let composed = crate::config::fleet::compose(&local, &crate::config::RawConfig::default());
        assert_eq!(composed.access_log, local.access_log);
    }

    #[test]
    fn every_error_names_its_field() {
        let doc = format!("{BASE}access_log: {{ format: jsn, path: \"\" }}\n");
        let e = errors(&doc);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].starts_with(
                "access_log.format: unknown access log format \"jsn\" (did you mean \"json\"?)"
            ),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("access_log.path: must not be empty"),
            "{e:?}"
        );
        let e = errors(&format!("{BASE}access_log: {{ path: /var/log/ }}\n"));
        assert!(e[0].starts_with("access_log.path: "), "{e:?}");
    }
}
