//! Validation of `listeners[].http1`: which server speaks HTTP/1.1 to a
//! listener's clients. hopgate's own server is the only one: `native` is
//! the only value, kept so that configs naming it stay valid; `hyper`,
//! once an escape hatch, is refused with its path. Same contract as the parent module: every error
//! with its path, never a silent default for a present value, no I/O, no
//! panic.

use super::super::Http1Server;
use super::Validator;

impl Validator {
    /// `native`, or absent. `p` is the listener's path (`listeners[0]`).
    pub(super) fn http1_server(&mut self, p: &str, raw: Option<&str>) -> Http1Server {
        match raw {
            None | Some("native") => Http1Server::Native,
            Some("hyper") => {
                self.err(
                    format!("{p}.http1"),
                    "hyper's HTTP/1.1 server is gone: hopgate's own server now serves HTTP/1.1; use native or leave the field out",
                );
                Http1Server::Native
            }
            Some(other) => {
                self.err(
                    format!("{p}.http1"),
                    format!("{other:?} is not a server: use native (hopgate's own, the only one)"),
                );
                Http1Server::Native
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{load, Format, Http1Server};

    fn listener(http1: &str) -> String {
        format!(
            "listeners:\n  - {{ name: a, address: 127.0.0.1:0{http1} }}\nservices:\n  - name: s\n    nodes: [{{ id: n, address: 127.0.0.1:9 }}]\nroutes:\n  - {{ id: r, match: {{ path_prefix: / }}, service: s }}\n"
        )
    }

    #[test]
    fn http1_server_defaults_to_native_and_takes_native() {
        let c = load(&listener(""), Format::Yaml).unwrap();
        assert_eq!(c.listeners[0].http1, Http1Server::Native);
        let c = load(&listener(", http1: native"), Format::Yaml).unwrap();
        assert_eq!(c.listeners[0].http1, Http1Server::Native);
    }

    #[test]
    fn hyper_is_refused_under_its_path_saying_what_serves_http1_now() {
        let e = load(&listener(", http1: hyper"), Format::Yaml).unwrap_err();
        let text = e
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.contains("listeners[0].http1"), "{text}");
        assert!(
            text.contains("hopgate's own server now serves HTTP/1.1"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_http1_server_is_refused_under_its_path() {
        let e = load(&listener(", http1: nginx"), Format::Yaml).unwrap_err();
        let text = e
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(text.contains("listeners[0].http1"), "{text}");
        assert!(text.contains("native"), "{text}");
    }
}
