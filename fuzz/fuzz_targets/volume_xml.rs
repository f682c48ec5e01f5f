//! The storage volume XML builders with any names and sizes: refused with an error naming the
//! input, or a well-formed `<volume>` whose name is exactly the one given (no name can inject
//! markup).
#![no_main]

use caplv::libvirt::volume_xml::{self, VolumeFormat, VolumeXml};
use libfuzzer_sys::fuzz_target;

fn check(built: Result<VolumeXml, caplv::libvirt::xml::XmlInputError>) {
    let volume = match built {
        Ok(volume) => volume,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an empty error");
            return;
        }
    };
    let doc = match roxmltree::Document::parse(&volume.xml) {
        Ok(doc) => doc,
        Err(e) => panic!("not well-formed ({e}):\n{}", volume.xml),
    };
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "volume");
    let name = root.children().find(|n| n.has_tag_name("name")).and_then(|n| n.text());
    assert_eq!(name, Some(volume.name.as_str()), "the name element:\n{}", volume.xml);
}

fuzz_target!(|input: (String, String, u64, bool)| {
    let (name, quantity, bytes, raw) = input;
    let format = if raw { VolumeFormat::Raw } else { VolumeFormat::Qcow2 };
    check(volume_xml::full_clone_volume(&name, bytes, format));
    check(volume_xml::empty_qcow2_volume(&name, bytes));
    check(volume_xml::ignition_volume(&name, bytes));
    if let Err(e) = volume_xml::parse_quantity_bytes(&quantity) {
        assert!(!e.to_string().is_empty(), "an empty error");
    }
});
