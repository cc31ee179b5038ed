//! `hopgate_auth_total{route,result}`: every route's auth checks by
//! result, read at scrape time from the counts [`super::AuthKeys`] keeps
//! (relaxed atomic adds on the request path, no lock).
//!
//! Owns the family's name, help and labels. Must not touch: the counts.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use super::{AuthKeys, RESULTS};

/// The collector of `hopgate_auth_total` (registered beside the
/// gateway's families).
#[derive(Debug)]
pub struct AuthCollector(pub Arc<AuthKeys>);

impl Collector for AuthCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let rows = self.0.counts();
        if rows.is_empty() {
            return Ok(());
        }
        let mut me = enc.encode_descriptor(
            "hopgate_auth",
            "Authentication checks of routes with auth, by route and result (allowed, denied, missing, invalid, expired, error, failed_open).",
            None,
            MetricType::Counter,
        )?;
        for (route, counts) in &rows {
            for r in RESULTS {
                let labels = [("route", route.as_str()), ("result", r.name())];
                ConstCounter::new(counts.get(r)).encode(me.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
