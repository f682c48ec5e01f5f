//! The schedule parser and engine: any ScheduleSpec JSON is refused with an error naming its
//! field, or compiles into a schedule whose next transition lies ahead and changes the state.
#![no_main]

use caplv::{api::scheduled_machine::ScheduleSpec, schedule::Schedule};
use chrono::DateTime;
use libfuzzer_sys::fuzz_target;

/// 1970 to 2100, in seconds.
const SPAN: i64 = 4_102_444_800;

// The first 8 bytes are the instant asked about, the rest the spec's JSON.
fuzz_target!(|data: &[u8]| {
    let Some((at, json)) = data.split_first_chunk::<8>() else {
        return;
    };
    let at = i64::from_le_bytes(*at);
    let Ok(spec) = serde_json::from_slice::<ScheduleSpec>(json) else {
        return;
    };
    let schedule = match Schedule::parse(&spec) {
        Ok(schedule) => schedule,
        Err(e) => {
            let (field, message) = (e.field(), e.to_string());
            assert!(field.starts_with("schedule"), "{field} is not a schedule field");
            assert!(
                message.starts_with(field),
                "the error does not lead with {field}: {message}"
            );
            return;
        }
    };
    let Some(t) = DateTime::from_timestamp(at.rem_euclid(SPAN), 0) else {
        return;
    };
    let active = schedule.is_active(t);
    if let Some(next) = schedule.next_transition(t) {
        assert!(next > t, "the next transition {next} is not after {t}");
        assert_ne!(
            schedule.is_active(next),
            active,
            "nothing changes at the transition {next}"
        );
    }
});
