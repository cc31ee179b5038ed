//! What an attempt's outcome does to its node: the observation recorded
//! on the node's state (breaker, outlier detector, counts) and, when the
//! outlier detector asks, an ejection within the service's cap. Shared by
//! the request path's attempts (`forward::attempt`) and the gateway's own
//! requests ([`crate::subrequest`]), so both count the same way.
//!
//! Owns [`account`]. Must not touch: the send, the pool.

use hopgate_core::node::{Observation, Verdict};

use crate::upstream::{CompiledNode, CompiledService};

/// Records an attempt's outcome on the node; ejects it when the outlier
/// detector asks and the service's ejection cap allows (the panic
/// threshold: never eject so much that the service has nowhere to go).
pub(crate) fn account(svc: &CompiledService, node: &CompiledNode, seen: Observation, now: u64) {
    let verdict = node.state.observe(seen, now, &svc.outlier);
    if node.state.is_relaxed(now) {
        // Under maintenance passive ejection is suspended.
        return;
    }
    if let Verdict::Eject(time) = verdict {
        let total = svc.nodes.len();
        let ejected = svc.nodes.iter().filter(|n| n.state.is_ejected(now)).count();
        if (ejected + 1) * 100 <= total * usize::from(svc.outlier.max_ejected_percent) {
            node.state.eject_for(time, now);
        } else {
            tracing::debug!(
                service = %svc.name,
                node = %node.id,
                ejected,
                total,
                "not ejecting: the service's max_ejected_percent is reached"
            );
        }
    }
}
