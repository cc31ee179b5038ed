//! Validation of `services[].maintenance`: the guard on the in-band
//! `Hop-Maintenance` header of a service's backends. Same contract as the
//! parent module: every error with its path, never a silent default for a
//! present value, no I/O, no panic.

use super::super::raw::RawServiceMaintenance;
use super::super::{ServiceMaintenance, DEFAULT_MAX_SEQ_JUMP};
use super::values::int_in;
use super::Validator;

/// The largest `max_seq_jump` accepted: far below `u64::MAX`, so a backend
/// can never push a node's sequence number out of the operator's reach.
const MAX_SEQ_JUMP_LIMIT: i64 = 1_000_000_000;

impl Validator {
    pub(super) fn service_maintenance(
        &mut self,
        p: &str,
        raw: Option<&RawServiceMaintenance>,
    ) -> ServiceMaintenance {
        let mut out = ServiceMaintenance::default();
        let Some(raw) = raw else { return out };
        out.in_band = raw.in_band.unwrap_or(false);
        if let Some(cidrs) = &raw.allow_to_cidrs {
            out.allow_to_cidrs = self.cidrs(&format!("{p}.allow_to_cidrs"), cidrs);
        }
        if let Some(t) = &raw.max_seq_jump {
            out.max_seq_jump = self
                .check(
                    format!("{p}.max_seq_jump"),
                    int_in(t, 1, MAX_SEQ_JUMP_LIMIT),
                )
                .map_or(DEFAULT_MAX_SEQ_JUMP, |n| n as u64);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{load, Format};

    const BASE: &str =
        "listeners: [ { name: p, address: 127.0.0.1:0 } ]\nroutes: [ { id: r, service: s } ]\n";

    fn doc(maintenance: &str) -> String {
        format!("{BASE}services:\n  - name: s\n    {maintenance}\n    nodes: [ {{ id: n, address: 127.0.0.1:1 }} ]\n")
    }

    #[test]
    fn in_band_is_off_by_default() {
        let cfg = load(&doc(""), Format::Yaml).unwrap();
        let m = &cfg.services[0].maintenance;
        assert!(!m.in_band);
        assert!(m.allow_to_cidrs.is_empty());
        assert_eq!(m.max_seq_jump, 1000);
        assert!(!m.allows_to("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn values_parse() {
        let cfg = load(
            &doc("maintenance: { in_band: true, allow_to_cidrs: [ 10.1.0.0/16, \"::1\" ], max_seq_jump: 5 }"),
            Format::Yaml,
        )
        .unwrap();
        let m = &cfg.services[0].maintenance;
        assert!(m.in_band);
        assert_eq!(m.max_seq_jump, 5);
        assert!(m.allows_to("10.1.2.3".parse().unwrap()));
        assert!(m.allows_to("::ffff:10.1.2.3".parse().unwrap()));
        assert!(m.allows_to("::1".parse().unwrap()));
        assert!(!m.allows_to("10.2.0.1".parse().unwrap()));
    }

    #[test]
    fn errors_name_their_field() {
        let errors = load(
            &doc("maintenance: { in_band: true, allow_to_cidrs: [ 10.0.0/8 ], max_seq_jump: 0 }"),
            Format::Yaml,
        )
        .unwrap_err();
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(
            text.iter()
                .any(|e| e.starts_with("services[0].maintenance.allow_to_cidrs[0]:")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|e| e.starts_with("services[0].maintenance.max_seq_jump:")),
            "{text:?}"
        );
        let errors = load(&doc("maintenance: { inband: true }"), Format::Yaml).unwrap_err();
        assert!(
            errors[0].to_string().contains("services[0].maintenance"),
            "{errors:?}"
        );
    }
}
