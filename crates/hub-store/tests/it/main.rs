//! The store contract: the same tests against SQLite and PostgreSQL, a fresh database (SQLite
//! file or PostgreSQL schema) per test. PostgreSQL is required: without it these tests fail.

mod catalog;
mod connections;
mod contract;
mod dlq;
mod erasures;
mod filters;
mod job_partitions;
mod jobs;
mod ledger;
mod ordering;
mod partitions;
mod plans;
mod replays;
mod replicas;
mod retention;
mod sessions;
mod stats;
mod subscriptions;
mod support;

/// Every contract test, whichever module holds it.
mod suite {
    pub use crate::catalog::*;
    pub use crate::contract::*;
    pub use crate::dlq::*;
    pub use crate::erasures::*;
    pub use crate::filters::*;
    pub use crate::jobs::*;
    pub use crate::ledger::*;
    pub use crate::ordering::*;
    pub use crate::replays::*;
    pub use crate::replicas::*;
    pub use crate::retention::*;
    pub use crate::sessions::*;
    pub use crate::stats::*;
    pub use crate::subscriptions::*;
}

/// Runs each contract test once per backend.
macro_rules! contract_suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = crate::support::TestDb::sqlite().await;
                    crate::suite::$name(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = crate::support::TestDb::postgres().await;
                    crate::suite::$name(&db).await;
                }
            )*
        }
    };
}

contract_suite!(
    open_jobs_are_counted_by_state,
    ledger_entries_are_numbered_per_log_and_sealed_into_verifiable_checkpoints,
    recorded_attempts_append_their_entries_in_the_same_transaction,
    concurrent_appends_leave_no_gap,
    edits_behind_the_hubs_back_are_caught_and_named,
    a_log_past_retention_begins_at_its_peaks_and_still_verifies,
    replicas_recording_one_tenant_at_once_never_deadlock,
    replicas_see_each_other_while_they_beat,
    a_replica_claims_and_leases_only_the_buckets_it_owns,
    a_departed_replicas_jobs_are_given_back_at_once,
    subscriptions_are_given_their_bucket_once_computed,
    a_grant_is_exchanged_once_and_a_session_ends_when_revoked_or_expired,
    a_person_session_lives_until_sign_out_or_expiry,
    issuer_keys_rotate_and_retired_ones_are_dropped_after_their_overlap,
    an_erasure_is_leased_applied_once_and_forgets_its_match,
    minutes_add_up_and_backlogs_are_set,
    backlogs_count_pending_and_held_jobs,
    one_refresh_is_claimed_per_interval_and_at_once_when_the_sources_change,
    a_failed_fetch_keeps_the_last_good_manifest,
    seen_types_add_up_per_tenant_and_age_out,
    ordered_jobs_are_claimed_one_at_a_time_per_key,
    ingest_leases_no_ordered_job,
    replayed_jobs_carry_their_key,
    filters_choose_what_ingest_matches,
    changed_filters_apply_to_later_events,
    replays_honour_filters,
    accepted_events_round_trip_with_every_attribute,
    a_large_mixed_batch_gives_each_event_its_seq_and_work,
    a_duplicate_writes_nothing_and_reports_the_stored_seq,
    duplicates_within_one_batch_are_reported,
    seq_is_per_tenant,
    a_failed_batch_writes_nothing,
    concurrent_writers_keep_seq_strictly_increasing_and_gapless,
    a_reader_never_sees_a_seq_appear_below_one_it_has_read,
    quarantined_records_are_kept_capped_and_filterable,
    quarantine_pagination_is_complete_and_disjoint,
    api_keys_are_stored_hashed_listed_and_revoked,
    a_nul_in_a_quarantined_header_is_stored_safely,
    subscriptions_round_trip_and_stay_within_their_tenant,
    subscriptions_list_in_creation_order_with_a_cursor,
    accepted_events_create_work_only_for_admitting_subscriptions,
    only_events_after_creation_match,
    a_write_sees_subscription_changes_made_by_another_replica,
    delivery_limits_round_trip_and_reach_leased_writes,
    deleting_a_subscription_cancels_its_work,
    pull_cursors_only_move_forward_even_under_concurrency,
    claims_interleave_tenants,
    claims_skip_undeliverable_and_excluded_subscriptions,
    concurrent_claims_never_lease_a_job_twice,
    attempts_move_jobs_through_their_states,
    a_lost_lease_records_the_attempt_but_leaves_the_job,
    expired_leases_are_recovered_then_poisoned,
    failures_open_a_period_that_a_success_clears_and_disable_stops_claims,
    dead_jobs_are_redriven_with_a_fresh_window,
    a_batch_of_outcomes_is_written_in_order_per_job,
    jobs_leased_at_ingest_are_written_leased_and_the_rest_are_claimed,
    claimed_jobs_load_their_events_and_subscriptions_in_one_go,
    dlq_records_are_stored_once_filtered_and_pruned,
    retention_prunes_in_bounded_batches_and_keeps_what_is_needed,
    the_inbox_size_is_known,
    concurrent_intents_lose_no_column_update,
    jobs_of_an_undeliverable_subscription_are_held_and_released,
    a_destination_being_verified_again_holds_new_events,
    stranded_waiting_jobs_are_reconciled,
    no_set_of_states_pins_the_claim_rotation,
    the_oldest_due_job_is_known,
    replays_walk_in_batches_pace_push_and_skip_what_a_subscription_has,
    pull_replays_append_after_the_cursor,
    a_replay_keeps_to_its_rate,
    a_replay_stops_when_its_subscription_is_deleted,
);
