//! The Butane subset on any YAML: refused with an error, or translated into valid Ignition.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|yaml: &[u8]| {
    match caplv::ignition::butane::translate(yaml) {
        Ok(translated) => {
            if let Err(e) = caplv::ignition::validate(&translated.json) {
                panic!("the translation is not valid Ignition: {e}");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty(), "an empty error"),
    }
});
