//! Validation of `upgrade:`: where the running process hands its listening
//! sockets to a new one. Same contract as the parent module: every error
//! with its path, never a silent default for a present value, no I/O, no
//! panic.

use super::super::raw::RawUpgrade;
use super::super::UpgradeConfig;
use super::Validator;

/// The longest socket path accepted: `sun_path` holds 108 bytes with the
/// terminating NUL. (A relative path also has to fit once joined to the
/// config file's directory; the binary reports that when it binds.)
const MAX_SOCKET_PATH: usize = 107;

impl Validator {
    pub(super) fn upgrade(&mut self, raw: Option<&RawUpgrade>) -> UpgradeConfig {
        let Some(raw) = raw else {
            return UpgradeConfig::default();
        };
        let socket = raw.socket.as_deref().and_then(|s| {
            let problem = if s.is_empty() {
                Some("must not be empty (leave the field out for the default hopgate-upgrade.sock next to the config file)".to_owned())
            } else if s.contains('\0') {
                Some("must not contain a NUL byte".to_owned())
            } else if s.ends_with('/') {
                Some("names a directory; give the socket's file name too".to_owned())
            } else if s.len() > MAX_SOCKET_PATH {
                Some(format!(
                    "is {} bytes; a Unix socket path holds at most {MAX_SOCKET_PATH}",
                    s.len()
                ))
            } else {
                None
            };
            match problem {
                Some(m) => {
                    self.err("upgrade.socket", m);
                    None
                }
                None => Some(std::path::PathBuf::from(s)),
            }
        });
        UpgradeConfig { socket }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{load, Format};

    const BASE: &str = "listeners: [ { name: p, address: 127.0.0.1:0 } ]\nservices: [ { name: s, nodes: [ { id: n, address: 127.0.0.1:1 } ] } ]\nroutes: [ { id: r, service: s } ]\n";

    fn errors(upgrade: &str) -> Vec<String> {
        match load(&format!("{BASE}{upgrade}"), Format::Yaml) {
            Ok(_) => Vec::new(),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn default_and_explicit_socket() {
        let cfg = load(BASE, Format::Yaml).unwrap();
        assert_eq!(cfg.upgrade.socket, None);
        let cfg = load(
            &format!("{BASE}upgrade: {{ socket: /run/hopgate/up.sock }}\n"),
            Format::Yaml,
        )
        .unwrap();
        assert_eq!(
            cfg.upgrade.socket.as_deref(),
            Some(std::path::Path::new("/run/hopgate/up.sock"))
        );
    }

    #[test]
    fn bad_sockets_name_the_field() {
        let long = format!("upgrade: {{ socket: /{} }}\n", "a".repeat(200));
        for doc in [
            "upgrade: { socket: '' }\n",
            "upgrade: { socket: /run/hopgate/ }\n",
            long.as_str(),
            "upgrade: { socket: \"a\\0b\" }\n",
        ] {
            let e = errors(doc);
            assert_eq!(e.len(), 1, "{doc}: {e:?}");
            assert!(e[0].starts_with("upgrade.socket"), "{doc}: {e:?}");
        }
        let e = errors("upgrade: { path: x }\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("upgrade"), "{e:?}");
    }
}
