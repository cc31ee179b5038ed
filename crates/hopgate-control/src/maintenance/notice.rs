//! A maintenance notification as JSON: the admin API's
//! `POST /admin/v1/maintenance` body, which is also the value of a fleet
//! notice in etcd (`etcd/actions.rs`).
//!
//! Must not touch: what a notification does (the intake, `super`).

use serde_json::Value;

use hopgate_core::config::ConfigError;

/// The admin API's maintenance body (also the value of a fleet notice in
/// etcd), every problem with its field.
pub(crate) fn parse(
    v: &Value,
) -> Result<hopgate_core::maintenance::Notification, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let text = |errors: &mut Vec<ConfigError>, k: &str| -> String {
        match v.get(k).and_then(Value::as_str) {
            Some(s) if !s.is_empty() => s.to_owned(),
            _ => {
                errors.push(ConfigError::new(k, "required, a non-empty string"));
                String::new()
            }
        }
    };
    let service = text(&mut errors, "service");
    let node = text(&mut errors, "node");
    let kind = match v
        .get("kind")
        .and_then(Value::as_str)
        .map(hopgate_core::maintenance::Kind::parse)
    {
        Some(Some(k)) => Some(k),
        _ => {
            errors.push(ConfigError::new(
                "kind",
                "one of MIGRATING, MOVING, MIGRATED, FAILING_OVER, FAILED_OVER",
            ));
            None
        }
    };
    let seq = match v.get("seq").and_then(Value::as_u64) {
        Some(n) => n,
        None => {
            errors.push(ConfigError::new("seq", "required, a positive integer"));
            0
        }
    };
    let to = match v.get("to") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match hopgate_core::maintenance::parse_endpoint(s) {
            Ok(a) => Some(a),
            Err(e) => {
                errors.push(ConfigError::new("to", e));
                None
            }
        },
        Some(_) => {
            errors.push(ConfigError::new("to", "an \"ip:port\" string"));
            None
        }
    };
    let in_secs = match v.get("in") {
        None | Some(Value::Null) => None,
        Some(x) => match x.as_u64() {
            Some(n) => Some(n),
            None => {
                errors.push(ConfigError::new("in", "a number of seconds"));
                None
            }
        },
    };
    let Some(kind) = kind.filter(|_| errors.is_empty()) else {
        return Err(errors);
    };
    Ok(hopgate_core::maintenance::Notification {
        service,
        node,
        kind,
        seq,
        to,
        in_secs,
    })
}
