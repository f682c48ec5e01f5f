//! The Ignition validator on any bytes: a verdict, never a panic, and every refusal explains
//! itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = caplv::ignition::validate(data) {
        assert!(!e.to_string().is_empty(), "an empty error");
    }
});
