//! The LibvirtHost URI parser on any text: accepted or refused with a message, never a panic;
//! an accepted SSH URI, written back out, parses to the same target.
#![no_main]

use caplv::libvirt::ssh::uri::LibvirtUri;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match LibvirtUri::parse(text) {
        Ok(LibvirtUri::Ssh(target)) => {
            let again = LibvirtUri::parse(&target.to_string());
            assert_eq!(
                again.ok(),
                Some(LibvirtUri::Ssh(target)),
                "written out, it parses otherwise"
            );
        }
        Ok(_) => {}
        Err(e) => assert!(!e.to_string().is_empty(), "an empty error"),
    }
});
