//! Discovery log pages into the initiator's checks (nvmeof::host::validate): the header, then
//! as many 1024-byte entries as the input holds and the header allows, as Host::discover reads them.
#![no_main]

use nvmeof::host::validate::{disc_entry, disc_header};
use nvmeof::wire::{DiscLogEntry, DiscLogHdr};
use zerocopy::FromBytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok((h, rest)) = DiscLogHdr::read_from_prefix(data) else { return };
    let Ok(numrec) = disc_header(&h) else { return };
    for (i, e) in rest.chunks_exact(DiscLogEntry::SIZE).take(numrec as usize).enumerate() {
        let e = DiscLogEntry::read_from_bytes(e).expect("chunk is one entry");
        if let Ok(d) = disc_entry(i as u16, &e) {
            assert!(d.subnqn.starts_with("nqn."), "accepted entry {i} without an NQN");
        }
    }
});
