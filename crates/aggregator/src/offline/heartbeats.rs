//! Each role's part of the pipeline's heartbeats: a heartbeat ingest stored is marked passed
//! by a role once the batch it came in has been dealt with up to it (the alerts role into
//! `passedAt`, which offline decisions wait for; the rollups role, after the batch's group
//! partials, into `rollupsPassedAt`, which group window rules judge up to).

use crate::config::Role;
use crate::function::Aggregator;
use crate::records::Decoded;
use crate::report::Counters;
use crate::store::Store;

impl<S: Store> Aggregator<S> {
    /// Marks the batch's heartbeats as passed by this role, each only when nothing before it
    /// in the batch failed: every reading stored ahead of it has then been seen here
    /// ([`tidemark_schema::HeartbeatItem`]).
    pub(crate) async fn pass_heartbeats(
        &self,
        records: &[Decoded],
        counters: &Counters,
        failed: &mut Vec<usize>,
    ) {
        let role = self.config.role;
        let to_mark = |h: &&crate::records::Heartbeat| match role {
            Role::Alerts => h.alerts_to_mark,
            Role::Rollups => h.rollups_to_mark,
        };
        for h in crate::offline::arrivals::heartbeats(records).filter(to_mark) {
            if failed.iter().any(|f| *f < h.index) {
                return;
            }
            match self.store.pass_heartbeat(&h.shard, h.sent_at, role).await {
                Ok(units) => counters.written(units),
                Err(e) => {
                    tracing::warn!(shard = %h.shard, error = %e, "heartbeat not marked");
                    failed.push(h.index);
                    return;
                }
            }
        }
    }
}
